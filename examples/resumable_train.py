"""A training script gpuwise can restart safely: it checkpoints often and resumes from its latest checkpoint.

Nothing in it is specific to gpuwise. Two habits make a job restartable with a new config:

- **Read the tunables from the environment**, under the names the TrainingJob declares in
  `spec.efficiency.tunables` (see `trainingjob.yaml`): here `BATCH_SIZE` and `NUM_WORKERS`.
  gpuwise applies a new value by restarting the job with the variable changed.
- **Resume from the latest checkpoint** when it starts (GPUWISE_RESUME_FROM names the one gpuwise
  asked for, when it restarted or resumed the job), and save one now and then with `torch.save`.
  With auto-instrumentation, a `torch.save` that returns while gpuwise asks for a checkpoint is
  the answer it waits for before it restarts the job.

Each checkpoint is its own file (`step-00000400.pt`), and the two newest are kept: a save cut
short by the restart leaves a broken newest file, and the one before it is still good.

To checkpoint exactly when gpuwise asks instead, register a callback (it runs at a step boundary):

    from gpuwise import instrument

    @instrument.on_checkpoint
    def checkpoint_now(request_id: str) -> str:
        return str(save_checkpoint())  # its path, for the sidecar's log

Run it locally with `gpuwise run -- python examples/resumable_train.py`. Other settings:
`CHECKPOINT_DIR` (default `checkpoints`), `CHECKPOINT_EVERY` (steps, default 200), `MAX_STEPS`
(default 5000).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

KEEP = 2


def setting(name: str, default: int) -> int:
    value = os.environ.get(name, str(default))
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"{name}={value!r} is not an integer") from None


def latest_checkpoint(directory: Path) -> dict[str, Any] | None:
    """The newest checkpoint that loads; a broken one (cut short by a restart) is skipped.

    After a restart or a resume by gpuwise, GPUWISE_RESUME_FROM names the checkpoint this script
    saved when gpuwise asked for one (the path its save returned): a candidate even where it is not
    in `directory`. The newest by step wins, so a later save of the script's own is not thrown away.
    """
    candidates = sorted(directory.glob("step-*.pt"), reverse=True)
    resume_from = Path(os.environ.get("GPUWISE_RESUME_FROM") or "")
    if resume_from.name and resume_from.is_file():  # gone: this script keeps only its newest saves
        candidates.insert(0, resume_from)
    newest: dict[str, Any] | None = None
    for path in candidates:
        try:
            state: dict[str, Any] = torch.load(path, weights_only=True)
        except Exception as error:
            print(json.dumps({"event": "skipped", "checkpoint": path.name, "error": repr(error)}), flush=True)
            continue
        if newest is None or state["step"] > newest["step"]:
            newest = state
    return newest


def save(directory: Path, state: dict[str, Any]) -> Path:
    path = directory / f"step-{state['step']:08d}.pt"
    torch.save(state, path)
    for old in sorted(directory.glob("step-*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def main() -> None:
    batch_size, num_workers = setting("BATCH_SIZE", 32), setting("NUM_WORKERS", 0)
    every, max_steps = setting("CHECKPOINT_EVERY", 200), setting("MAX_STEPS", 5000)
    directory = Path(os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    directory.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 32), torch.randn(4096, 1))
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    state = latest_checkpoint(directory)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    config = {"batch_size": batch_size, "num_workers": num_workers}
    print(json.dumps({"event": "start", "resumed_from": step, **config}), flush=True)

    loader = DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=num_workers)
    while step < max_steps:
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % every == 0 or step == max_steps:
                state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
                save(directory, {**state, "config": config})
            if step == max_steps:
                break
    print(json.dumps({"event": "done", "step": step, **config}), flush=True)


if __name__ == "__main__":
    main()
