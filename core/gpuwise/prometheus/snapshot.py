"""What one round of the batched read holds: every job's series, and one `Reported` record a job.

Records are made for every job at once as the round ends (`gpuwise.prometheus.batched`), one
column at a time: taken a job at a time as its timer asks, each of a record's objects was by then
out of the CPU's caches, and cutting the windows cost more than making them there. A window
takes a record's fields by their names (`REPORTED_FIELDS`, the one list of them).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gpuwise.diagnose.window import REPORTED_FIELDS, JobWindow, Points, Reported
from gpuwise.prometheus import answers
from gpuwise.prometheus.labels import JobKey, LabelSets

NOT_REPORTED: Final = Reported()
# A record's fields in the order `JobWindow` takes them, by name: one C call, not 22 keywords.
_reported_fields: Final = operator.attrgetter(*REPORTED_FIELDS)


@dataclass(slots=True)  # not frozen: one is made per job and cycle, and only read
class JobFacts:
    """What the caller knows of a job that Prometheus does not: its age, CPU and configuration."""

    age_seconds: float
    cpu_cores: float | None = None
    processes_per_node: int = 1
    gradient_accumulation_steps: int | None = None  # no metric reports it: the job's env says it


@dataclass(frozen=True)
class Snapshot:
    """Every job's series and facts from one round of queries; windows are cut from it per job.

    A series keeps its times as well as its values, so that the next round can join its new
    points to these (`fetch(previous=)`); a `JobWindow` gets the values (`Points.values`).
    """

    now: float
    window_seconds: float
    step_seconds: float
    series: Mapping[str, Mapping[JobKey, Points]]
    # Per job, per worker index: (unix time, mean step seconds).
    worker_steps: Mapping[JobKey, Mapping[int, Points]] = field(default_factory=dict)
    # Per job, per worker index: the clock-slowdown bits at each sample.
    clock_slowdowns: Mapping[JobKey, Mapping[int, Points]] = field(default_factory=dict)
    # Per job, all of the above and the instant queries' facts in one record.
    by_job: Mapping[JobKey, Reported] = field(default_factory=dict)
    # The times the range queries were evaluated at (`answers.Grid.ending(now, ...)`).
    grid: answers.Grid | None = None
    # What the label sets of this round's answers and earlier ones say: the next round decodes
    # only those it has not seen.
    label_sets: LabelSets = field(default_factory=LabelSets, repr=False, compare=False)

    def jobs(self) -> list[JobKey]:
        """Every (namespace, trainingjob) that some query returned, sorted; unlabelled series left out."""
        return sorted(key for key in self.by_job if all(key))

    def window(self, key: JobKey, job: JobFacts) -> JobWindow:
        return JobWindow(
            *_reported_fields(self.by_job.get(key, NOT_REPORTED)),
            window_seconds=self.window_seconds,
            sample_interval_seconds=self.step_seconds,
            job_age_seconds=job.age_seconds,
            cpu_cores=job.cpu_cores,
            processes_per_node=job.processes_per_node,
            gradient_accumulation_steps=job.gradient_accumulation_steps,
        )
