"""The step book's arithmetic, figure by figure: what each datagram adds, where its steps land in the
histogram, what a copy shares. Each case here was a mutant of `steps.py` the other tests let live."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwise.instrument import wire
from gpuwise.sidecar.steps import MAX_PROCESSES, PIDS_PER_RANK, StepBook, StepDelta

NOW = 1_700_000_000.0  # a whole second
ALL_KNOWN = wire.SAMPLES_KNOWN | wire.PIN_MEMORY_KNOWN | wire.AUTOCAST_KNOWN


def event(steps: int, **changes: Any) -> wire.StepEvent:
    fields: dict[str, Any] = {
        "pid": 10,
        "rank": 0,
        "flags": ALL_KNOWN,
        "steps": steps,
        "samples": steps * 32,
        "step_seconds": steps * 0.1,
        "wait_seconds": steps * 0.04,
        "last_step_seconds": 0.1,
        "num_workers": 4,
        "batch_size": 32,
        "cuda_allocated_peak": 1 << 30,
        "cuda_reserved_peak": 2 << 30,
        "dropped": 0,
        "ended_at": NOW,
    }
    return wire.StepEvent(**{**fields, **changes})


def test_a_datagram_says_what_it_added() -> None:
    book = StepBook()
    delta = book.record(event(3, step_seconds=0.3, wait_seconds=0.12, ended_at=NOW + 0.2), NOW + 1)
    assert delta == StepDelta(0, 3, 0.3, 0.12, 96, 0.1, NOW + 0.2)
    assert book.record(event(3, step_seconds=0.3, wait_seconds=0.12), NOW + 2) is None, "no new step: nothing added"
    assert book.processes()[0].steps == 3


def test_steps_whose_datagrams_were_lost_share_the_rest_of_the_time_evenly() -> None:
    book = StepBook()
    # 3 steps in 0.3 s, the last 0.1 s: the two others took 0.1 s each, the 0.1 s bucket's upper edge.
    book.record(event(3, step_seconds=0.3), NOW)
    assert book.processes()[0].bucket_counts == [0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    book.record(event(6, step_seconds=0.6), NOW)
    assert book.processes()[0].bucket_counts == [0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    two = StepBook()
    two.record(event(2, step_seconds=1.1, last_step_seconds=0.1), NOW)  # the other took 1 s
    assert two.processes()[0].bucket_counts == [0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]


def test_dropped_datagrams_and_samples_add_what_changed() -> None:
    book = StepBook()
    book.record(event(1, dropped=2), NOW)
    delta = book.record(event(2, dropped=5, samples=32), NOW)  # a step with no sample: a zero, not one
    assert delta is not None and delta.samples == 0
    (process,) = book.processes()
    assert process.dropped == 5 and process.samples == 32


def test_unknown_samples_stay_unknown() -> None:
    book = StepBook()
    delta = book.record(event(2, flags=0), NOW)
    assert delta is not None and delta.samples is None
    assert book.processes()[0].samples is None


@pytest.mark.parametrize(
    ("flags", "pin_memory", "autocast"),
    [
        (0, None, None),
        (wire.PIN_MEMORY_KNOWN | wire.AUTOCAST_KNOWN, False, False),
        (wire.PIN_MEMORY_KNOWN | wire.PIN_MEMORY_ON | wire.AUTOCAST_KNOWN | wire.AUTOCAST_ON, True, True),
    ],
)
def test_settings_known_off_and_unknown_are_three_things(flags: int, pin_memory: bool, autocast: bool) -> None:
    book = StepBook()
    book.record(event(1, flags=flags), NOW)
    (process,) = book.processes()
    assert (process.pin_memory, process.autocast) == (pin_memory, autocast)


@pytest.mark.parametrize(("value", "read"), [(0, 0), (-1, None)])
def test_zero_is_a_figure_and_minus_one_unknown(value: int, read: int | None) -> None:
    book = StepBook()
    book.record(event(1, num_workers=value, batch_size=value, cuda_allocated_peak=value, cuda_reserved_peak=value), NOW)
    (process,) = book.processes()
    assert (process.num_workers, process.batch_size, process.cuda_allocated_peak, process.cuda_reserved_peak) == (
        read,
        read,
        read,
        read,
    )


def test_the_recent_ratio_sums_whole_seconds_in_its_window() -> None:
    book = StepBook()
    book.record(event(10, step_seconds=1.0, wait_seconds=0.3, ended_at=NOW + 0.2), NOW + 1)
    book.record(event(20, step_seconds=2.0, wait_seconds=0.5, ended_at=NOW + 0.7), NOW + 1)  # the same second
    book.record(event(30, step_seconds=3.0, wait_seconds=0.5, ended_at=NOW + 1.5), NOW + 2)
    (process,) = book.processes()
    assert list(process.recent) == [[NOW, 2.0, 0.5], [NOW + 1, 1.0, 0.0]]
    assert process.wait_ratio(NOW + 30) == pytest.approx(0.5 / 3.0), "a second exactly 30 s old is in"
    assert process.wait_ratio(NOW + 30.5) == 0.0, "then only the later second"


def test_a_process_with_exactly_the_books_age_in_step_time_is_new() -> None:
    book = StepBook(started_at=NOW)
    assert book.record(event(100, step_seconds=10.0), NOW + 10) is not None
    resumed = StepBook(started_at=NOW)
    assert resumed.record(event(100, step_seconds=10.0), NOW + 9.5) is None, "a baseline"


def test_every_pid_of_a_full_rank_is_remembered() -> None:
    book = StepBook()
    for pid in range(PIDS_PER_RANK):
        book.record(event(1, pid=pid), NOW)
    book.record(event(2, pid=0), NOW)  # the first pid again, one step on
    assert book.processes()[0].steps == PIDS_PER_RANK + 1


def test_a_copy_shares_nothing_that_changes() -> None:
    book = StepBook()
    book.record(event(3, step_seconds=0.3, ended_at=NOW), NOW)
    copy = book.processes()[0]
    assert copy.last is None and copy.latest == {}
    assert copy.recent.maxlen == 31
    book.record(event(6, step_seconds=0.6, ended_at=NOW + 5), NOW + 5)
    assert sum(copy.bucket_counts) == 3 and len(copy.recent) == 1


def test_too_many_processes_say_so() -> None:
    book = StepBook()
    for rank in range(MAX_PROCESSES):
        book.record(event(1, rank=rank), NOW)
    with pytest.raises(OverflowError, match=r"^more than 64 training processes$"):
        book.record(event(1, rank=MAX_PROCESSES), NOW)
