"""How a read of Prometheus treats Python's cyclic garbage collector.

A round's snapshot (some 300,000 objects the collector tracks at 10,000 jobs) lives exactly one
cycle, until the next read replaces it, and most of the rest of the heap (the TrainingJobs as
the watch delivered them) lives longer. The collector cannot know that:

- While a read decodes its answers it allocates some 500,000 dicts, lists and tuples. Every 700
  allocations would start a collection over what is alive, about 1,000 collections and 0.6 s of
  CPU per round on the benchmark, to find no cycle: JSON has none, nor do the records. So the
  collector is paused while a read runs (`paused`); reference counting frees everything meanwhile.
- Left in the young generations, the new snapshot would then be scanned by the cycle's first
  collection and again by the next older one (0.05-0.1 s a cycle), and every few cycles a full
  collection went over the whole heap (0.3-0.4 s). So what is alive when a read ends is frozen
  (`gc.freeze`): the cycle's collections scan only what the cycle makes.
- The next read thaws it first (`gc.unfreeze`), so that the old snapshot is ordinary garbage
  again. Frozen objects are still freed by reference counting; only cyclic garbage among them
  waits. A read collects it with a full collection over the thawed heap, before it decodes
  anything, once the frozen heap has grown by `FULL_COLLECTION_GROWTH` since the last one: the
  rule CPython itself follows for its oldest generation. In a steady fleet the heap a read
  leaves is the same size every cycle, and a full collection every few cycles regardless (0.3 s
  at 10,000 jobs, on top of a whole cycle's 2 s) would find nothing to collect.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from typing import Final

FULL_COLLECTION_GROWTH: Final = 0.25  # of the objects frozen after the last full collection


class ReadHeap:
    """The collector's state across reads; reads may overlap (one per window length), in threads."""

    def __init__(self, growth: float = FULL_COLLECTION_GROWTH) -> None:
        self.growth = growth
        self._lock = threading.Lock()
        self._holders = 0
        self._restore = False
        self._collected: int | None = None  # objects frozen by the first read after a full collection
        self.full_collections = 0

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Cyclic collection paused while any thread holds it, and restored after the last."""
        with self._lock:
            if self._holders == 0:
                self._restore = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._restore:
                    gc.enable()

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """One read: paused (`paused`), the previous read's heap thawed as it starts, and what is
        alive frozen once it is done. A process that turned collection off is left to itself."""
        with self.paused():
            managed = self._restore
            if managed:
                frozen = gc.get_freeze_count()
                gc.unfreeze()
                with self._lock:
                    full = self._collected is not None and frozen > self._collected * (1 + self.growth)
                    if full:
                        self._collected = None
                        self.full_collections += 1
                if full:
                    gc.collect()
            yield
            if managed:
                gc.freeze()
                with self._lock:
                    if self._collected is None:  # the first read, or the first after a full collection
                        self._collected = gc.get_freeze_count()


read_heap: Final = ReadHeap()
