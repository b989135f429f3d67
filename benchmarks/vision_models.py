"""torchvision's and timm's image classifiers, unchanged, trained a step on PyTorch and on
tracegrad:

    python benchmarks/vision_models.py [--models ...] [--methods tg-traced torch] [--rounds 2]
                                       [--steps 15] [--budget 10]

Needs the `torchvision` and `timm` packages (beside tracegrad, `pip install --no-deps
torchvision timm` and timm's own needs: huggingface_hub, pyyaml, safetensors) and PyTorch for
the baseline. Each model is built by its library (`torchvision.models.<name>(num_classes=10)`,
`timm.create_model(name, num_classes=10)`, random weights) with `import torch` meaning the
method's library, as `python -m tracegrad run` does; one step is zero_grad, cross-entropy,
backward and SGD with momentum 0.9 on a batch of 64 x 64 images. Methods: `torch` (eager),
`tg-eager` and `tg-traced` (tracegrad's `torch.compile` of the step), each in a process of its
own, the methods in turn for `--rounds` rounds (`harness.run_rounds`); a row gives each
method's median step and the rounds' ratios to PyTorch eager. The libraries draw their initial
weights differently, so the losses are not compared; `zoo.py` holds the models whose weights,
data and losses are shared exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import MARK, compare_models, model_parser, runnable, time_step  # noqa: E402

METHODS = ("torch", "tg-eager", "tg-traced")
# name: (library, batch), the families' small members, as a CPU user would train them
MODELS = {
    "resnet18": ("torchvision", 16),
    "resnet50": ("torchvision", 8),
    "mobilenet_v2": ("torchvision", 32),
    "mobilenet_v3_small": ("torchvision", 32),
    "efficientnet_b0": ("torchvision", 16),
    "shufflenet_v2_x0_5": ("torchvision", 32),
    "squeezenet1_0": ("torchvision", 16),
    "densenet121": ("torchvision", 8),
    "regnet_y_400mf": ("torchvision", 16),
    "mnasnet0_5": ("torchvision", 32),
    "convnext_tiny": ("torchvision", 8),
    "convnext_atto": ("timm", 16),
    "vit_tiny_patch16_224": ("timm", 16),
    "ghostnet_100": ("timm", 16),
    "lcnet_050": ("timm", 32),
    "poolformer_s12": ("timm", 8),
}
SIZE = 64


@contextlib.contextmanager
def library(method: str) -> Iterator[Any]:
    """Inside, `import torch` means the method's library; gives that torch module."""
    if method == "torch":
        import torch

        torch.set_num_threads(int(os.environ.get("TORCH_THREADS", os.cpu_count() or 1)))
        yield torch
        return
    import tracegrad.torch as tgt

    with tgt.imported_as_torch():
        yield tgt


def build(method: str, name: str) -> Callable[[], float]:
    """One step of `name` under `method`; a traced or eager one can wait for its kernels."""
    source, batch = MODELS[name]
    with library(method) as torch:
        torch.manual_seed(0)
        if source == "torchvision":
            import torchvision

            model = getattr(torchvision.models, name)(num_classes=10)
        else:
            import timm

            sized = {"img_size": SIZE} if name.startswith("vit") else {}
            model = timm.create_model(name, num_classes=10, pretrained=False, **sized)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        rng = np.random.default_rng(0)
        x = torch.tensor(rng.standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32))
        y = torch.tensor(rng.integers(0, 10, batch))

        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        if method == "tg-traced":
            step = torch.compile(step)
    return runnable(method, step, (x, y))


def main() -> None:
    args = model_parser(__doc__, MODELS, METHODS).parse_args()
    if args.profile:
        from zoo import profile_run

        return profile_run(args.profile, build("tg-traced", args.profile), "float32")
    if args.child:
        print(MARK + json.dumps(time_step(build(*args.child), args.steps, args.budget)))
        return

    def about(name: str) -> str:
        return f"{MODELS[name][0]}, batch {MODELS[name][1]} of 3x{SIZE}x{SIZE}"

    compare_models(os.path.abspath(__file__), args, about)


if __name__ == "__main__":
    main()
