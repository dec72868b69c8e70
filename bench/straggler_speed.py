"""The straggler detector's cost per straggler job, one `step()` a sample against skipping ahead.

    python -m bench.straggler_speed            # 500 jobs, best of 7 runs
    python -m bench.straggler_speed --jobs 2000 --repeat 15
    python -m bench.straggler_speed --workers 10   # room for a straggler group: its pass runs too

Jobs are shaped like `bench/evaluate.py`'s straggler jobs: 4 workers × 61 samples 15 s apart,
step times ~1.0 ± 2 % noise, the last worker 1.8 times slower over the last third; the peer
ratios are taken once (`job_peer_ratios`), and only `episodes_in` is timed, both ways in the same
process. It checks that both ways find the same episodes, to the bit, and prints µs per job for
each and their ratio.
"""

from __future__ import annotations

import argparse
import random
import sys
import timeit
from array import array
from collections.abc import Sequence

from gpuwise.diagnose.straggler import (
    Episode,
    PeerRatios,
    StragglerPolicy,
    _episodes_in,
    episodes_in,
    job_peer_ratios,
)
from gpuwise.diagnose.window import Points


def straggler_jobs(count: int, workers: int = 4, samples: int = 61, seed: int = 0) -> list[PeerRatios]:
    rng = random.Random(seed)
    times = array("d", [1_795_000_000 + 15 * k for k in range(samples)])
    slow_from = samples * 2 // 3
    jobs: list[PeerRatios] = []
    for _ in range(count):
        steps = {}
        for w in range(workers):
            slowdown = [1.8 if w == workers - 1 and k >= slow_from else 1.0 for k in range(samples)]
            steps[w] = Points(times, array("d", [0.5 * (1 + 0.02 * rng.uniform(-1, 1)) * s for s in slowdown]))
        jobs.append(job_peer_ratios(steps))
    return jobs


def exact(episodes: list[Episode]) -> list[tuple[int, float, float, float, float]]:
    return [(e.worker, e.start, e.end, e.peak_slowdown, e.baseline) for e in episodes]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    jobs, policy = straggler_jobs(args.jobs, workers=args.workers), StragglerPolicy()
    plain = [exact(_episodes_in(job, policy, skip_ahead=False)) for job in jobs]
    fast = [exact(episodes_in(job, policy)) for job in jobs]
    if plain != fast:
        raise SystemExit("skipping ahead found other episodes than one step a sample")
    if not all(plain):
        raise SystemExit("a straggler job without its episode")

    def per_job(run: object) -> float:
        seconds = min(timeit.repeat(run, number=1, repeat=args.repeat))  # type: ignore[arg-type]
        return seconds / len(jobs) * 1e6

    before = per_job(lambda: [_episodes_in(job, policy, skip_ahead=False) for job in jobs])
    after = per_job(lambda: [episodes_in(job, policy) for job in jobs])
    print(f"{len(jobs)} straggler jobs: one step a sample {before:.1f} µs/job, skipping ahead {after:.1f} µs/job")
    print(f"ratio {before / after:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
