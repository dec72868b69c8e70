"""Mutation testing of the modules that decide and act: `make mutation` (slow, not part of `make test`).

mutmut (3.x) mutates one module at a time and runs that module's fast tests against every mutant;
this script prints the kill rate per module. Survivors judged equivalent (no test could tell them
from the original) are listed with the reason in `mutation/equivalent.toml`; they leave the
denominator and are printed apart.

mutmut expects one source root (`src/` or the project root) and names a module by its path
under it; gpuwise is a namespace package spread over `core/`, `operator/` and `sidecar/`. So each
module gets a stage of its own, `.mutation/<name>/`: its subpackage copied to `src/gpuwise/`, the
tests linked in, and a `pyproject.toml` that tells mutmut which file to mutate and which tests to
run. mutmut puts the stage's `mutants/src` first on `sys.path`, so `gpuwise.<subpackage>` comes
from the mutated copy while the rest of `gpuwise` still comes from the checkout; `PYTHONPATH`
does the same for any subprocess a test starts. mutmut's own start-up check (every trampoline
forced to fail must fail the tests) proves the tests import the mutated copy.

mutmut mutates function bodies only, and none with a decorator other than `@staticmethod` or
`@classmethod`: pydantic's `@model_validator` and `@field_validator` methods are never mutated.

    python -m bench.mutation                 # every module, smallest first
    python -m bench.mutation wire guardrails # some of them
    python -m bench.mutation --budget 300 --show-survivors wire
    python -m bench.mutation --only _fleet --only _refused runner  # some functions only
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ROOT / ".mutation"
EQUIVALENT = ROOT / "mutation" / "equivalent.toml"
MUTMUT = Path(sys.executable).with_name("mutmut")


@dataclass(frozen=True)
class Module:
    name: str
    path: str  # the file mutated, relative to the checkout
    tests: tuple[str, ...]  # the fast tests that cover it

    @property
    def source_root(self) -> str:  # core, operator or sidecar
        return self.path.split("/", 1)[0]

    @property
    def subpackage(self) -> str:  # gpuwise/<subpackage>: what the stage copies
        return "/".join(self.path.split("/")[1:3])

    @property
    def in_stage(self) -> str:  # the file's path in the stage
        return "src/" + self.path.split("/", 1)[1]

    @property
    def dotted(self) -> str:  # the module name mutmut gives its mutants
        return self.in_stage.removeprefix("src/").removesuffix(".py").replace("/", ".")


_CHECKPOINT_TESTS = (
    "tests/act/test_checkpoint_acks.py",
    "tests/act/test_runner_states.py",
    "tests/act/test_runner_advance.py",
    "tests/act/test_suspend.py",
)

_ACK_TESTS = (
    "test_an_ack_round_trips_and_is_told_from_a_step_event",
    "test_only_the_tail_of_a_long_path_travels",
    "test_request_ids_are_label_safe",
    "test_malformed_acks_are_rejected",
)

# Smallest and fastest first: `make mutation` runs them in this order.
MODULES: tuple[Module, ...] = (
    Module(
        "wire",
        "sidecar/gpuwise/instrument/wire.py",
        (
            "tests/instrument/test_wire.py",
            "tests/instrument/test_instrument.py",
            "tests/sidecar/test_steps.py",
            # its pure wire tests only: the torch ones patch torch in-process and need the original package
            *(f"tests/sidecar/test_checkpoint.py::{name}" for name in _ACK_TESTS),
        ),
    ),
    Module("guardrails", "operator/gpuwise/act/guardrails.py", ("tests/act/test_guardrails.py",)),
    Module(
        "receiver",
        "sidecar/gpuwise/sidecar/receiver.py",
        ("tests/sidecar/test_receiver.py", "tests/sidecar/test_steps.py", "tests/sidecar/test_flood.py"),
    ),
    Module(
        "steps",
        "sidecar/gpuwise/sidecar/steps.py",
        ("tests/sidecar/test_step_book.py", "tests/sidecar/test_steps.py", "tests/sidecar/test_flood.py"),
    ),
    Module(
        "straggler",
        "core/gpuwise/diagnose/straggler.py",
        (
            "tests/diagnose/test_straggler_edges.py",
            "tests/diagnose/test_straggler.py",
            "tests/diagnose/test_straggler_episode_edges.py",
            "tests/diagnose/test_straggler_groups_edges.py",
        ),
    ),
    Module(
        "rules",
        "core/gpuwise/diagnose/rules.py",
        (
            "tests/diagnose/test_rules_findings.py",
            "tests/diagnose/test_rules.py",
            "tests/diagnose/test_thresholds.py",
            "tests/diagnose/test_garbage_in.py",
            "tests/diagnose/test_diagnose_command_render.py",
            "tests/diagnose/test_straggler_rule.py",
            "tests/diagnose/test_batch_and_input_advice.py",
            "tests/diagnose/test_rule_boundaries.py",
        ),
    ),
    Module("api.base", "core/gpuwise/api/base.py", ("tests/api",)),
    # api/core.py and api/trainingjob.py: every validator there is a decorated method, which mutmut
    # leaves alone, so they give no mutant at all (README: "Mutation testing").
    Module("checkpoint", "operator/gpuwise/act/checkpoint.py", _CHECKPOINT_TESTS),
    Module(
        "runner",
        "operator/gpuwise/act/runner.py",
        (
            *_CHECKPOINT_TESTS,
            "tests/act/test_runner_start.py",
            "tests/act/test_guardrails.py",
        ),
    ),
)

KILLED = {"killed", "timeout", "caught by type check", "segfault"}


def toml_value(value: object) -> str:
    """A TOML value for a string, bool, number or list of them (JSON's spelling is TOML's here)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def stage(module: Module, per_test_timeout: int) -> Path:
    """A fresh stage for `module`: its subpackage, the tests, and mutmut's and pytest's settings."""
    here = STAGES / module.name
    shutil.rmtree(here, ignore_errors=True)
    source = ROOT / module.source_root / module.subpackage
    shutil.copytree(source, here / "src" / module.subpackage, ignore=shutil.ignore_patterns("__pycache__"))
    (here / "tests").symlink_to(ROOT / "tests")
    # On PYTHONPATH before mutmut fills it: a directory missing at start-up is never searched.
    (here / "mutants" / "src").mkdir(parents=True)
    # mutmut runs the tests from mutants/; some read files of the checkout next to tests/.
    for name in ("core", "operator", "sidecar", "examples", "crds", "charts", "Dockerfile", "README.md"):
        (here / "mutants" / name).symlink_to(ROOT / name)
    pytest_settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    mutmut_settings: dict[str, object] = {
        "source_paths": ["src"],
        "only_mutate": [module.in_stage],
        "pytest_add_cli_args_test_selection": list(module.tests),
        "pytest_add_cli_args": ["-p", "no:cacheprovider", f"--timeout={per_test_timeout}"],
        "use_git_change_detection": False,
        "track_dependencies": False,
    }
    lines = ["[tool.mutmut]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in mutmut_settings.items()]
    lines += ["", "[tool.pytest.ini_options]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in pytest_settings.items() if key != "testpaths"]
    (here / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return here


def load_equivalent() -> dict[str, str]:
    """mutant name -> why it is equivalent."""
    if not EQUIVALENT.exists():
        return {}
    entries = tomllib.loads(EQUIVALENT.read_text()).get("equivalent", [])
    return {entry["mutant"]: entry["reason"] for entry in entries}


@dataclass
class Outcome:
    module: Module
    statuses: dict[str, str]  # mutant name -> mutmut's verdict
    seconds: float
    finished: bool

    def count(self, *verdicts: str, exclude: frozenset[str] = frozenset()) -> int:
        return sum(1 for name, v in self.statuses.items() if v in verdicts and name not in exclude)


def function_patterns(module: Module, functions: Sequence[str]) -> list[str]:
    """mutmut's name patterns for the mutants of `functions` (module-level or methods) in `module`."""
    return [f"{module.dotted}.{pattern}" for f in functions for pattern in (f"x_{f}__mutmut_*", f"xǁ*ǁ{f}__mutmut_*")]


def run(module: Module, budget: float, per_test_timeout: int, jobs: int = 1, only: Sequence[str] = ()) -> Outcome:
    """Every mutant of `module`, or those of the functions named in `only` (a quicker look at some)."""
    here = stage(module, per_test_timeout)
    patterns = function_patterns(module, only)
    env = dict(os.environ, PYTHONPATH=str(here / "mutants" / "src"), PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    finished = True
    with (here / "run.log").open("w") as log:
        try:
            subprocess.run(
                [str(MUTMUT), "run", "--max-children", str(jobs), *patterns],
                cwd=here,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=budget,
                check=False,
            )
        except subprocess.TimeoutExpired:
            finished = False
    seconds = time.monotonic() - started
    listing = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    statuses: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, verdict = line.strip().partition(": ")
        wanted = not patterns or any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
        if sep and name.startswith(module.dotted + ".") and wanted:
            statuses[name] = verdict.strip()
    return Outcome(module, statuses, seconds, finished)


# Run in the stage, one process for all the diffs: `mutmut show` a mutant costs a second's start-up.
_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path, names = sys.argv[1], sys.argv[2:]
out = {}
for name in names:
    lines = get_diff_for_mutant(name, path=path).splitlines()
    out[name] = "\\n".join(line for line in lines if line[:1] in "+-" and not line.startswith(("+++", "---")))
print(json.dumps(out))
"""


def survivor_diffs(module: Module, names: list[str]) -> dict[str, str]:
    """mutant name -> the lines it changed (- original, + mutant)."""
    done = subprocess.run(
        [sys.executable, "-c", _DIFFS, module.in_stage, *names],
        cwd=STAGES / module.name,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        diffs: dict[str, str] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {}
    return diffs


def report(outcomes: list[Outcome], equivalent: dict[str, str], show_survivors: bool) -> None:
    header = (
        f"{'module':<16} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'no tests':>8} "
        f"{'unrun':>5} {'equiv.':>6} {'kill rate':>9} {'time':>7}"
    )
    print(header)
    print("-" * len(header))
    for o in outcomes:
        names = set(o.statuses)
        # Listed as equivalent but killed (the code or the tests changed since): it counts as killed.
        equivalent_here = frozenset(name for name in names if name in equivalent and o.statuses[name] not in KILLED)
        killed = o.count("killed", "caught by type check", "segfault")
        timeout = o.count("timeout")
        survived = o.count("survived", "suspicious", exclude=equivalent_here)
        no_tests = o.count("no tests", exclude=equivalent_here)
        unrun = len(names) - killed - timeout - survived - no_tests - len(equivalent_here)
        judged = len(names) - len(equivalent_here)
        rate = f"{100 * (killed + timeout) / judged:.1f} %" if judged else "-"
        note = "" if o.finished else "  (budget ran out)"
        print(
            f"{o.module.name:<16} {len(names):>7} {killed:>6} {timeout:>7} {survived:>8} {no_tests:>8} "
            f"{unrun:>5} {len(equivalent_here):>6} {rate:>9} {o.seconds:>6.0f}s{note}"
        )
    print("\nkill rate = (killed + timeout) / (mutants - equivalent); 'unrun' mutants count as not killed.")
    for o in outcomes:
        stale = sorted(name for name, verdict in o.statuses.items() if name in equivalent and verdict in KILLED)
        if stale:
            print(f"\nkilled although listed as equivalent in {o.module.name} (take them off the list):")
            for name in stale:
                print(f"  {name}")
        listed = sorted(name for name in o.statuses if name in equivalent and name not in stale)
        if listed:
            print(f"\nequivalent survivors in {o.module.name} (mutation/equivalent.toml):")
            for name in listed:
                print(f"  {name}: {equivalent[name]}")
        alive = sorted(name for name, verdict in o.statuses.items() if verdict not in KILLED and name not in equivalent)
        if alive:
            diffs = survivor_diffs(o.module, alive) if show_survivors else {}
            print(f"\nnot killed in {o.module.name} ({len(alive)}): `mutmut show NAME` in .mutation/{o.module.name}")
            for name in alive:
                print(f"  {name}: {o.statuses[name]}")
                if show_survivors:
                    print("    " + "\n    ".join(diffs.get(name, "(no diff)").splitlines()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", help="module names (default: all): " + ", ".join(m.name for m in MODULES))
    parser.add_argument("--budget", type=float, default=900, help="wall-clock seconds per module (default 900)")
    parser.add_argument("--test-timeout", type=int, default=60, help="pytest-timeout per test, seconds")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="FUNCTION",
        help="only the mutants of this function or method (repeatable): a quick look, not a module's figure",
    )
    parser.add_argument("--show-survivors", action="store_true", help="print the diff of every mutant not killed")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MODULES}
    unknown = [name for name in args.modules if name not in by_name]
    if unknown:
        parser.error(f"unknown modules {unknown}; known: {', '.join(by_name)}")
    selected = [by_name[name] for name in args.modules] if args.modules else list(MODULES)
    equivalent = load_equivalent()
    outcomes = []
    for module in selected:
        print(f"mutating {module.path} against {' '.join(module.tests)} ...", flush=True)
        outcomes.append(run(module, args.budget, args.test_timeout, args.jobs, args.only))
    print()
    report(outcomes, equivalent, args.show_survivors)


if __name__ == "__main__":
    main()
