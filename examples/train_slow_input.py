"""A small PyTorch training job whose input pipeline is deliberately slow.

Each sample takes a couple of milliseconds to "load" (standing in for reading and decoding an
image from network storage), and the DataLoader loads them in the training process itself
(`num_workers=0`), so the model waits for every batch. Run it under gpuwise to see it:

    gpuwise run -- python examples/train_slow_input.py

Its DataLoader settings come from `--num-workers`/`--pin-memory`, or from the environment
variables `num_workers` and `pin_memory`: the names `gpuwise run` gives them in a recommendation,
so `make demo` applies what gpuwise recommended as it is written. Runs on a CPU.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowImages(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic 32x32 RGB images in 10 classes; each one takes `load_ms` to load."""

    def __init__(self, size: int, load_ms: float) -> None:
        self.size = size
        self.load_seconds = load_ms / 1000.0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.load_seconds)  # the slow part: storage latency and decoding
        label = index % 10
        image = torch.randn(3, 32, 32, generator=torch.Generator().manual_seed(index)) + label / 10
        return image, label


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=32)
    # The settings gpuwise run recommends, by the names it gives them: num_workers=4 pin_memory=1.
    parser.add_argument("--num-workers", type=int, default=int(os.environ.get("num_workers", "0")))  # noqa: SIM112
    parser.add_argument("--pin-memory", action="store_true", default=os.environ.get("pin_memory") == "1")  # noqa: SIM112
    parser.add_argument("--load-ms", type=float, default=2.0, help="time to load one sample")
    args = parser.parse_args(argv)

    # Loading here waits on storage, not on the CPU, so more workers than cores can be right;
    # torch's rule of thumb (workers <= cores) would only add a warning to the demo's output.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    # pin_memory without a GPU is a no-op torch warns about: the demo runs on CPUs too.
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dataset = SlowImages(size=args.steps * args.batch_size, load_ms=args.load_ms)
    workers = args.num_workers
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=args.pin_memory,
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
    )
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    started = time.perf_counter()
    for step, (images, labels) in enumerate(loader, 1):
        loss = loss_fn(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 40 == 0 or step == args.steps:
            print(f"step {step:4d}  loss {loss.item():.3f}", flush=True)
    seconds = time.perf_counter() - started
    print(f"trained {args.steps} steps in {seconds:.1f} s ({args.steps * args.batch_size / seconds:.0f} samples/s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
