"""Garbage collection paused while a round of answers is decoded, and restored as it was."""

from __future__ import annotations

import gc
import threading

from gpuwise.diagnose.prometheus import gc_paused


def test_paused_inside_and_restored_after_the_last_holder() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other_fetch() -> None:
        with gc_paused():
            inside.set()
            release.wait(5)

    thread = threading.Thread(target=other_fetch)
    with gc_paused():
        assert not gc.isenabled()
        thread.start()
        inside.wait(5)
    assert not gc.isenabled(), "another thread still decodes"
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_a_process_that_turned_collection_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
