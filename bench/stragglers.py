"""Run the straggler detector on a PAI mini-batch trace and print its episodes as JSON.

    python bench/stragglers.py ../shared/data/pai-minibatch/job_1_norm.csv

Data: Alibaba PAI per-worker mini-batch times (cluster-trace-gpu-v2020, CC BY 4.0). Times in
the output are in the file's own units (seconds from the start).
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import sys
import time
from collections.abc import Sequence

from gpuwise.diagnose.straggler import detect_stragglers, persistent_slow_workers

COLUMNS = ("worker", "time", "batch_time_norm")


def load(path: pathlib.Path) -> list[tuple[float, int, float]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
        return [(float(r["time"]), int(r["worker"]), float(r["batch_time_norm"])) for r in reader]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=pathlib.Path, nargs="+")
    args = parser.parse_args(argv)
    for path in args.csv:
        samples = load(path)
        started = time.perf_counter()
        episodes = detect_stragglers(samples)
        seconds = time.perf_counter() - started
        report = {
            "file": path.name,
            "stragglers": [e.as_dict() for e in episodes],
            "persistent": [{"worker": w, "slowdown": s} for w, s in persistent_slow_workers(samples).items()],
            "samples": len(samples),
            "seconds": round(seconds, 4),
        }
        json.dump(report, sys.stdout)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
