"""`make demo`: the loop on one job: measure it, take gpuwise's recommendation, measure again.

Runs `gpuwise run` on `train_slow_input.py` (real PyTorch training on the CPU; no GPU or cluster
needed). gpuwise finds that the job waits for its input and recommends DataLoader settings; the
second run applies exactly those settings (the script reads them from the environment under the
names the recommendation gives), and the demo prints the engine's predicted effect beside the
measured one. A JSON and an HTML report for each run go to `out/demo/`. About a minute.

`--steps N` trains N steps in each run instead of the script's 120, and `--out DIR` writes the
reports there (the tests run a short demo this way).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "out" / "demo"
SCRIPT = "train_slow_input.py"
# 0.25 ms a sample, 8 ms a batch of 32, about the model's own step on a CPU: a load that a
# recommendation can hide even on a 2-core machine, where it grants one loader worker.
SCRIPT_ARGS = ("--load-ms", "0.25")


def run(
    console: Console, name: str, what: str, settings: dict[str, str], *, out: Path, steps: int | None
) -> dict[str, Any]:
    console.rule(f"[bold]{name}[/]: {SCRIPT} -- {what}")
    report = out / f"{name}.json"
    command = [
        sys.executable,
        "-m",
        "gpuwise.cli",
        "run",
        "--report",
        str(report),
        "--report",
        str(out / f"{name}.html"),
    ]
    command += ["--", sys.executable, str(ROOT / "examples" / SCRIPT), *SCRIPT_ARGS]
    if steps is not None:
        command += ["--steps", str(steps)]
    subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, **settings})
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def compare(before: dict[str, Any], after: dict[str, Any]) -> Table:
    table = Table(title="gpuwise demo: the same job, before and after gpuwise's recommendation", title_justify="left")
    for column in ("", "before", "after", "change"):
        table.add_column(column, justify="left" if not column else "right")
    rows = (
        ("steps observed", "steps", "{:.0f}", None),
        ("mean step time (ms)", "mean_step_seconds", "{:.1f}", 1000.0),
        ("waiting for input", "data_wait_ratio", "{:.0%}", None),
        ("samples per second", "samples_per_second", "{:.0f}", None),
    )
    for label, key, fmt, scale in rows:
        a = before[key] if key == "steps" else before["breakdown"][key]
        b = after[key] if key == "steps" else after["breakdown"][key]
        a, b = (a * scale, b * scale) if scale else (a, b)
        change = f"{b / a:.2f}x" if a and key != "steps" else ""
        table.add_row(label, fmt.format(a), fmt.format(b), change)
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="steps in each run (default: the scripts' 120)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the reports go (default: out/demo)")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    console = Console()
    out.mkdir(parents=True, exist_ok=True)
    before = run(console, "before", "as written (num_workers=0)", {}, out=out, steps=args.steps)
    advice = next((f for f in before["diagnosis"] if f["changes"]), None)
    if advice is None:
        reason = before.get("not_judged") or "gpuwise recommended no setting to change"
        console.print(f"[bold]no recommendation to apply[/]: {reason}", highlight=False)
        return 1
    shown = " ".join(f"{name}={value}" for name, value in advice["changes"].items())
    after = run(
        console, "after", f"with gpuwise's recommendation ({shown})", advice["changes"], out=out, steps=args.steps
    )
    console.rule("[bold]result")
    console.print(compare(before, after))
    for name, result in (("before", before), ("after", after)):
        console.print(f"[bold]{name}[/]: " + " ".join(result["findings"]), highlight=False)
    measured = after["breakdown"]["steps_per_second"] / before["breakdown"]["steps_per_second"]
    console.print(
        f"[bold]{advice['kind']}[/]: set {shown}; predicted {advice['expected_effect']}; "
        f"measured {measured:.1f}x steps per second",
        highlight=False,
    )
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    console.print(f"reports: {where}/{{before,after}}.{{json,html}}", highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
