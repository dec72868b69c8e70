"""`make demo`: measure a training job with a slow input pipeline, fix it, measure again.

Runs `gpuwise run` on `train_slow_input.py` and then on `train_fixed_input.py` (real PyTorch
training on the CPU; no GPU or cluster needed), writes a JSON and an HTML report for each under
`out/demo/`, and prints what changed. About a minute on a laptop.

`--steps N` trains N steps in each run instead of the scripts' 120, and `--out DIR` writes the
reports there (the tests run a short demo this way).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "out" / "demo"
RUNS = (
    ("before", "train_slow_input.py", "input loaded in the training process (num_workers=0)"),
    ("after", "train_fixed_input.py", "input loaded by 4 prefetching DataLoader workers"),
)


def run(console: Console, name: str, script: str, what: str, *, out: Path, steps: int | None) -> dict[str, Any]:
    console.rule(f"[bold]{name}[/]: {script} -- {what}")
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
    command += ["--", sys.executable, str(ROOT / "examples" / script)]
    if steps is not None:
        command += ["--steps", str(steps)]
    subprocess.run(command, check=True, cwd=ROOT)
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def compare(before: dict[str, Any], after: dict[str, Any]) -> Table:
    table = Table(title="gpuwise demo: the same job, before and after fixing its input pipeline", title_justify="left")
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
    before, after = (run(console, *spec, out=out, steps=args.steps) for spec in RUNS)
    console.rule("[bold]result")
    console.print(compare(before, after))
    for name, result in (("before", before), ("after", after)):
        console.print(f"[bold]{name}[/]: " + " ".join(result["findings"]), highlight=False)
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    console.print(f"reports: {where}/{{before,after}}.{{json,html}}", highlight=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
