"""The collector across reads: paused while a read decodes, what it made frozen until the next one."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from gpuwise.diagnose.heap import ReadHeap


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
    heap = ReadHeap(full_collection_reads=100)
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


def test_cyclic_garbage_frozen_by_reads_is_collected_by_every_nth_read() -> None:
    heap = ReadHeap(full_collection_reads=3)
    with heap.read():  # the first of three
        first, second = Node(), Node()
        first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    gc.collect()
    assert gone() is not None, "frozen: no collection sees it"
    with heap.read():  # the second
        pass
    gc.collect()
    assert gone() is not None
    with heap.read():  # the third: a full collection as it starts
        assert gone() is None


def test_a_process_that_turned_collection_off_keeps_it_off_and_nothing_frozen() -> None:
    heap = ReadHeap(full_collection_reads=1)
    gc.disable()
    with heap.read():
        cycle = Node()
        cycle.other = cycle
    gone = weakref.ref(cycle)
    del cycle
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gone() is not None, "no collection the process did not ask for"
