"""The collector across reads: paused while a read decodes, what it made frozen until the next one."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from gpuwise.prometheus.heap import ReadHeap


class Node:
    """An object in a reference cycle, which only the cyclic collector can free."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts and ends with nothing frozen and collection on."""
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.enable()


def tracked(obj: object) -> bool:
    """Whether `obj` is in one of the collector's generations (a frozen object is in none)."""
    return any(o is obj for o in gc.get_objects())


def test_paused_inside_and_restored_after_the_last_holder() -> None:
    heap = ReadHeap()
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other_fetch() -> None:
        with heap.paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other_fetch)
    with heap.paused():
        assert not gc.isenabled()
        thread.start()
        inside.wait(5)
    assert not gc.isenabled(), "another thread still decodes"
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_what_a_read_made_is_frozen_until_the_next_read_thaws_it() -> None:
    heap = ReadHeap()
    with heap.read():
        assert not gc.isenabled()
        snapshot = [[index] for index in range(10)]
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert not tracked(snapshot), "the cycle's collections would scan the snapshot"
    with heap.read():
        assert tracked(snapshot), "the next read thaws the previous one's objects"
        assert gc.get_freeze_count() == 0
    assert not tracked(snapshot)


def test_cyclic_garbage_frozen_by_reads_is_collected_once_the_frozen_heap_has_grown() -> None:
    heap = ReadHeap(growth=0.25)
    kept: list[object] = []
    with heap.read():  # the first: what it leaves is the size to compare with
        first, second = Node(), Node()
        first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    size = gc.get_freeze_count()
    gc.collect()
    assert gone() is not None, "frozen: no collection sees it"
    for _ in range(3):  # a steady heap: no full collection, however many reads
        with heap.read():
            pass
        gc.collect()
        assert gone() is not None and heap.full_collections == 0
    with heap.read():
        kept.extend([object()] for _ in range(size // 3))  # grown by a third
    with heap.read():  # a full collection as it starts
        assert gone() is None and heap.full_collections == 1
    with heap.read():  # and none again until it grows by a quarter of what is frozen now
        assert heap.full_collections == 1


def test_a_process_that_turned_collection_off_keeps_it_off_and_nothing_frozen() -> None:
    heap = ReadHeap(growth=0)
    gc.disable()
    with heap.read():
        cycle = Node()
        cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gone() is not None, "no collection the process did not ask for"
