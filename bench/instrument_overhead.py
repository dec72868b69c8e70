"""What auto-instrumentation costs a real PyTorch training loop (CPU), measured side by side.

One process runs one small training loop (MLP, DataLoader, SGD; ~0.3 ms a step here, so the
hooks' cost shows) in short blocks of steps: bare, instrumented (hooks installed, reporting to a
real `gpuwise sidecar` in a subprocess), and bare again as a control, in rotating order so that
drift and background load hit all alike. The overhead is the median of the paired differences
(instrumented - bare); the control (bare - bare) shows the noise floor of the same run. The
verdict uses the training thread's CPU time, which is what instrumentation costs the training
process; wall time also carries whatever else the machine runs. Also prints the step hook's
cost on its own and checks that the sidecar counted every instrumented step. As in a pod, the
tracker watches a (empty) checkpoint-request file, so the handshake's poll is in the figures.
Budget: 20 µs per step.

    .venv/bin/python -m bench.instrument_overhead [--blocks 300] [--block 30]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BUDGET_SECONDS = 20e-6


def training(torch: Any) -> Callable[[int], tuple[float, float]]:
    """A training loop; `run(n)` runs n optimizer steps: wall and thread CPU seconds per step."""
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(4096, 32), torch.randn(4096, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def batches() -> Iterator[Any]:
        while True:
            yield from loader

    stream = batches()

    def run(n: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(n):
            x, y = next(stream)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return (time.perf_counter() - wall) / n, (time.thread_time() - cpu) / n

    return run


def scraped_steps(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        for line in response.read().decode().splitlines():
            if line.startswith("gpuwise_steps_total"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def hook_cost(tracker: Any, calls: int = 5000) -> list[float]:
    costs = []
    for _ in range(calls):
        started = time.perf_counter()
        tracker.end_step()
        costs.append(time.perf_counter() - started)
        time.sleep(0)
    return sorted(costs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=300, help="blocks of each kind (bare, instrumented, control)")
    parser.add_argument("--block", type=int, default=30, help="steps per block")
    args = parser.parse_args()

    import torch
    from tests.support.waiting import eventually, free_port

    from gpuwise.instrument import torch_hooks
    from gpuwise.instrument.checkpoint import Checkpoints
    from gpuwise.instrument.sender import Sender
    from gpuwise.instrument.tracker import Tracker

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="gw-bench-") as tmp:
        socket_path, port = Path(tmp) / "steps.sock", free_port()
        command = [sys.executable, "-m", "gpuwise.cli", "sidecar", "--backend", "simulated", "--address", "127.0.0.1"]
        command += ["--port", str(port), "--socket", str(socket_path), "--log-level", "WARNING"]
        sidecar = subprocess.Popen(command)
        try:
            eventually(socket_path.exists, timeout=30)
            sender = Sender(str(socket_path))
            tracker = Tracker(sender)
            requests = Path(tmp) / "checkpoint-request"
            requests.write_text("")  # no request: the poll finds nothing, as nearly always
            tracker.checkpoints = Checkpoints(str(requests), sender.send, print)
            run = training(torch)
            run(500)  # warm-up: allocator, dispatcher caches
            results: dict[str, list[tuple[float, float]]] = {"bare": [], "instrumented": [], "control": []}
            orders = list(itertools.permutations(results))
            for block in range(args.blocks):
                for kind in orders[block % len(orders)]:
                    remove = torch_hooks.install(torch, tracker) if kind == "instrumented" else None
                    results[kind].append(run(args.block))
                    if remove is not None:
                        remove()
            tracker.flush()
            expected = args.blocks * args.block
            seen = eventually(lambda: (s := scraped_steps(port)) >= expected and s, timeout=10)
            coalesced = hook_cost(tracker)
            sending = hook_cost(Tracker(Sender(str(socket_path)), send_interval=0.0))
        finally:
            sidecar.terminate()
            sidecar.wait()

    print(f"PyTorch {torch.__version__}, CPU, 1 thread; MLP 32-64-1, batch 16, DataLoader, SGD")
    print(f"{args.blocks} blocks of {args.block} steps each: bare, instrumented, bare again; one process")
    print(f"{'per step (median)':22}{'bare':>10}{'instrumented':>15}{'overhead':>12}{'control':>11}{'ratio':>8}")
    overhead = 0.0
    bare, instrumented, control = results["bare"], results["instrumented"], results["control"]
    for column, name in ((1, "training thread CPU"), (0, "wall clock")):
        b = statistics.median(r[column] for r in bare)
        i = statistics.median(r[column] for r in instrumented)
        paired = statistics.median(x[column] - y[column] for x, y in zip(instrumented, bare, strict=True))
        noise = statistics.median(x[column] - y[column] for x, y in zip(control, bare, strict=True))
        overhead = overhead or paired
        print(f"{name:22}{b * 1e6:8.1f} µs{i * 1e6:13.1f} µs{paired * 1e6:+10.1f} µs{noise * 1e6:+9.1f} µs{i / b:8.3f}")
    print("(overhead: median of paired block differences; control: bare minus bare, the noise floor)")
    for name, costs in (("coalesced (as used)", coalesced), ("sending every step", sending)):
        median, p99 = costs[len(costs) // 2], costs[int(len(costs) * 0.99)]
        print(f"step hook alone, {name}: median {median * 1e6:.1f} µs, p99 {p99 * 1e6:.1f} µs")
    verdict = "within" if overhead <= BUDGET_SECONDS else "OVER"
    print(
        f"budget {BUDGET_SECONDS * 1e6:.0f} µs per step: {verdict}; the sidecar counted {seen:.0f} of {expected} steps"
    )
    return 0 if seen >= expected else 1


if __name__ == "__main__":
    sys.exit(main())
