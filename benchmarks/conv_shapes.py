"""Each convolution kernel alone (the Numba backend's forward, input gradient and weight
gradient) against its floor, the same GEMM as one product of the whole batch at the best rate
this machine gives it (zoo.py's floor), and against PyTorch's own op when torch is installed,
on the shapes of pytorch/examples' DCGAN (nz 100, ngf = ndf = 32, batch 32), of CIFAR ResNet-20
(batch 128), of depthwise convolutions (MobileNet's, ConvNeXt's), of layers with few output
channels (RGB outputs, one-class heads), of first layers (one or three input channels), of one
large image (batch 1) and of a sweep of common geometries.

    PYTHONPATH=$PWD python benchmarks/conv_shapes.py \
        [--set dcgan|sweep|resnet|first|depthwise|few|image|all] [--dtype float32]

Each time is the fastest of repeated runs (the host is shared: the fastest is the least
disturbed); `x floor` and `x torch` are ratios measured in the same run."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from zoo import best_gemm_seconds, gemms  # noqa: E402

from tracegrad.compiler.kernels.native import compile_native  # noqa: E402
from tracegrad.core import primitives as P  # noqa: E402
from tracegrad.core.ir import Node, Value  # noqa: E402
from tracegrad.core.ops import conv as C  # noqa: E402

# (name, input (N, C, H, W), out channels, kernel, stride, padding, transposed)
DCGAN = [
    ("G1 convT 100->256 1->4", (32, 100, 1, 1), 256, 4, 1, 0, True),
    ("G2 convT 256->128 4->8", (32, 256, 4, 4), 128, 4, 2, 1, True),
    ("G3 convT 128->64 8->16", (32, 128, 8, 8), 64, 4, 2, 1, True),
    ("G4 convT 64->32 16->32", (32, 64, 16, 16), 32, 4, 2, 1, True),
    ("G5 convT 32->3 32->64", (32, 32, 32, 32), 3, 4, 2, 1, True),
    ("D1 conv 3->32 64->32", (32, 3, 64, 64), 32, 4, 2, 1, False),
    ("D2 conv 32->64 32->16", (32, 32, 32, 32), 64, 4, 2, 1, False),
    ("D3 conv 64->128 16->8", (32, 64, 16, 16), 128, 4, 2, 1, False),
    ("D4 conv 128->256 8->4", (32, 128, 8, 8), 256, 4, 2, 1, False),
    ("D5 conv 256->1 4->1", (32, 256, 4, 4), 1, 4, 1, 0, False),
]
SWEEP = [
    ("3x3 s1 p1 16ch 32x32", (64, 16, 32, 32), 16, 3, 1, 1, False),
    ("3x3 s2 p1 16->32 32x32", (64, 16, 32, 32), 32, 3, 2, 1, False),
    ("3x3 s1 p1 64ch 8x8", (64, 64, 8, 8), 64, 3, 1, 1, False),
    ("1x1 s2 p0 16->32 32x32", (64, 16, 32, 32), 32, 1, 2, 0, False),
    ("1x1 s1 p0 256->64 4x4", (64, 256, 4, 4), 64, 1, 1, 0, False),
    ("5x5 s1 p2 3->32 32x32", (64, 3, 32, 32), 32, 5, 1, 2, False),
    ("5x5 s1 p0 32->64 14x14", (64, 32, 14, 14), 64, 5, 1, 0, False),
    ("3x3 s1 p1 512ch 1x1", (64, 512, 1, 1), 512, 3, 1, 1, False),
    ("convT 3x3 s1 p1 32ch 16x16", (64, 32, 16, 16), 32, 3, 1, 1, True),
    ("convT 3x3 s2 p1 64->32 8x8", (64, 64, 8, 8), 32, 3, 2, 1, True),
    ("convT 5x5 s3 p2 32->16 8x8", (32, 32, 8, 8), 16, 5, 3, 2, True),
]


# CIFAR ResNet-20 (batch 128): its 3 x 3 layers of each stage and the stride-2 transitions
RESNET = [
    ("3x3 s1 p1 3->16 32x32", (128, 3, 32, 32), 16, 3, 1, 1, False),
    ("3x3 s1 p1 16ch 32x32", (128, 16, 32, 32), 16, 3, 1, 1, False),
    ("3x3 s2 p1 16->32 32x32", (128, 16, 32, 32), 32, 3, 2, 1, False),
    ("1x1 s2 p0 16->32 32x32", (128, 16, 32, 32), 32, 1, 2, 0, False),
    ("3x3 s1 p1 32ch 16x16", (128, 32, 16, 16), 32, 3, 1, 1, False),
    ("3x3 s2 p1 32->64 16x16", (128, 32, 16, 16), 64, 3, 2, 1, False),
    ("3x3 s1 p1 64ch 8x8", (128, 64, 8, 8), 64, 3, 1, 1, False),
]


# Few output channels: RGB outputs, one-class heads (their products of columns are thin; the
# kernels run them over planes where that pays, `conv._by_planes`)
FEW = [
    ("3x3 s1 p1 32->3 32x32", (16, 32, 32, 32), 3, 3, 1, 1, False),
    ("3x3 s1 p1 64->3 64x64", (16, 64, 64, 64), 3, 3, 1, 1, False),
    ("3x3 s1 p1 128->1 32x32", (8, 128, 32, 32), 1, 3, 1, 1, False),
    ("3x3 s1 p1 16->2 28x28", (64, 16, 28, 28), 2, 3, 1, 1, False),
    ("5x5 s1 p2 32->4 32x32", (32, 32, 32, 32), 4, 5, 1, 2, False),
    ("4x4 s2 p1 64->3 32x32", (64, 64, 32, 32), 3, 4, 2, 1, False),
    ("4x4 s1 p1 512->1 8x8", (16, 512, 8, 8), 1, 4, 1, 1, False),
    ("1x1 s1 p0 64->1 64x64", (16, 64, 64, 64), 1, 1, 1, 0, False),
]


# First layers: one or three input channels over the whole image (a product only K = 9..48 deep,
# memory-bound on its output and columns): MNIST CNNs, CIFAR stems, DCGAN's discriminator, a
# ViT's patches, an ImageNet stem at a small batch
FIRST = [
    ("3x3 s1 p1 1->32 28x28", (256, 1, 28, 28), 32, 3, 1, 1, False),
    ("3x3 s1 p0 1->32 28x28", (64, 1, 28, 28), 32, 3, 1, 0, False),
    ("3x3 s1 p1 3->16 32x32", (128, 3, 32, 32), 16, 3, 1, 1, False),
    ("3x3 s1 p1 3->32 32x32", (16, 3, 32, 32), 32, 3, 1, 1, False),
    ("4x4 s2 p1 3->64 64x64", (64, 3, 64, 64), 64, 4, 2, 1, False),
    ("4x4 s4 p0 3->192 32x32", (64, 3, 32, 32), 192, 4, 4, 0, False),
    ("7x7 s2 p3 3->64 112x112", (8, 3, 112, 112), 64, 7, 2, 3, False),
]


# Depthwise convolutions (groups = channels) of MobileNet-style nets at batch 64 and of a
# ConvNeXt stage at batch 32; the last field is the groups
DEPTHWISE = [
    ("dw 3x3 s1 32ch 32x32", (64, 32, 32, 32), 32, 3, 1, 1, False, 32),
    ("dw 3x3 s2 96ch 32x32", (64, 96, 32, 32), 96, 3, 2, 1, False, 96),
    ("dw 3x3 s1 144ch 16x16", (64, 144, 16, 16), 144, 3, 1, 1, False, 144),
    ("dw 3x3 s1 384ch 4x4", (64, 384, 4, 4), 384, 3, 1, 1, False, 384),
    ("dw 5x5 s2 240ch 14x14", (64, 240, 14, 14), 240, 5, 2, 2, False, 240),
    ("dw 7x7 s1 96ch 28x28", (32, 96, 28, 28), 96, 7, 1, 3, False, 96),
]

# One large image (batch 1: inference, style transfer, super-resolution), as fast_neural_style's
# TransformerNet at 512 x 512: its 9 x 9 first and last layers, strided, residual, upsampled
IMAGE = [
    ("9x9 s1 p4 3->32 512x512", (1, 3, 512, 512), 32, 9, 1, 4, False),
    ("3x3 s2 p1 32->64 512x512", (1, 32, 512, 512), 64, 3, 2, 1, False),
    ("3x3 s1 p1 128ch 128x128", (1, 128, 128, 128), 128, 3, 1, 1, False),
    ("3x3 s1 p1 64->32 512x512", (1, 64, 512, 512), 32, 3, 1, 1, False),
    ("9x9 s1 p4 32->3 512x512", (1, 32, 512, 512), 3, 9, 1, 4, False),
]

SETS = {"dcgan": DCGAN, "sweep": SWEEP, "resnet": RESNET, "first": FIRST, "depthwise": DEPTHWISE,
        "few": FEW, "image": IMAGE}  # fmt: skip


def geometry(shape, out, k, s, p, transposed, groups=1):
    """(x shape, w shape, y shape, attrs) of the convolution whose input is x: for a transposed
    one, the convolution whose input gradient it is (its x is that convolution's output)."""
    a = dict(stride=(s, s), padding=((p, p), (p, p)), dilation=(1, 1), groups=groups)
    if not transposed:
        w = (out, shape[1] // groups, k, k)
        return shape, w, (shape[0], out, *C.output_size(shape, w, **a)), a
    n, c, h, wd = shape
    big = (n, out, (h - 1) * s - 2 * p + k, (wd - 1) * s - 2 * p + k)
    return big, (c, out, k, k), shape, a


def fastest(f, budget: float = 0.5, least: int = 5) -> float:
    best, spent, runs = float("inf"), 0.0, 0
    while runs < least or (spent < budget and runs < 200):
        start = time.perf_counter()
        f()
        took = time.perf_counter() - start
        best, spent, runs = min(best, took), spent + took, runs + 1
    return best


def torch_ops(x, w, y, a, torch):
    """PyTorch's forward, input gradient and weight gradient of the same convolution."""
    from torch.nn.grad import conv2d_input, conv2d_weight

    tx, tw, tg = (torch.from_numpy(v) for v in (x, w, y))
    kw = dict(stride=a["stride"], padding=a["padding"][0][0], groups=a["groups"])
    return [lambda: torch.nn.functional.conv2d(tx, tw, **kw),
            lambda: conv2d_input(x.shape, tw, tg, **kw),
            lambda: conv2d_weight(tx, w.shape, tg, **kw)]  # fmt: skip


def measure(row, dtype, torch) -> list[dict[str, Any]]:
    name, shape, out, k, s, p, transposed, *groups = row
    xs, ws, ys, a = geometry(shape, out, k, s, p, transposed, *groups)
    rng = np.random.default_rng(0)
    x, w, y = (rng.standard_normal(v).astype(dtype) for v in (xs, ws, ys))
    v = lambda arr: Value(arr.shape, arr.dtype)  # noqa: E731
    nodes = [Node(P.conv2d, [v(x), v(w)], [v(y)], a),
             Node(P.conv2d_input_grad, [v(y), v(w)], [v(x)], dict(a, shape=xs)),
             Node(P.conv2d_weight_grad, [v(x), v(y)], [v(w)], dict(a, shape=ws))]  # fmt: skip
    kernels = compile_native(nodes)
    args = [(x, w, np.empty_like(y)), (y, w, np.empty_like(x)), (x, y, np.empty_like(w))]
    theirs = torch_ops(x, w, y, a, torch) if torch is not None else [None] * 3
    # a transposed convolution's forward is the input gradient, its input gradient the forward
    roles = ["input_grad", "forward", "weight_grad"] if transposed else None
    found = []
    for i, (node, (ok, kernel), arg) in enumerate(zip(nodes, kernels, args, strict=True)):
        kernel(*arg)  # warm
        t = fastest(lambda kernel=kernel, arg=arg: kernel(*arg))
        floor = sum(best_gemm_seconds(g, dtype) for g in gemms(node))
        tt = fastest(theirs[i]) if theirs[i] is not None else None
        op = node.op.replace("conv2d_", "").replace("conv2d", "forward")
        found.append(dict(name=name, op=f"{op}{' (' + roles[i] + ')' if roles else ''}", s=t,
                          floor=floor, torch=tt, native=ok))  # fmt: skip
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=[*SETS, "all"], default="dcgan")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
    except ImportError:
        torch = None
    rows = SETS.get(args.set) or [row for rows in SETS.values() for row in rows]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {args.dtype}")
    print(f"{'shape':<28} {'op':<34} {'ms':>7} {'floor':>7} {'x floor':>7} {'torch':>7} "
          f"{'x torch':>7}")  # fmt: skip
    total = dict(s=0.0, floor=0.0, torch=0.0)
    for row in rows:
        for r in measure(row, np.dtype(args.dtype), torch):
            tt, t = r["torch"], r["s"]
            theirs = "" if tt is None else f"{tt * 1e3:7.3f} {t / tt:7.2f}"
            print(
                f"{r['name']:<28} {r['op']:<34} {t * 1e3:7.3f} {r['floor'] * 1e3:7.3f} "
                f"{t / r['floor']:7.2f} {theirs}{'' if r['native'] else ' (NumPy)'}"
            )
            for key in total:
                total[key] += r[key] or 0.0
    t, tt = total["s"], total["torch"]
    theirs = f"{tt * 1e3:7.2f} {t / tt:7.2f}" if torch is not None else ""
    print(
        f"{'total':<63} {t * 1e3:7.2f} {total['floor'] * 1e3:7.2f} "
        f"{t / total['floor']:7.2f} {theirs}"
    )


if __name__ == "__main__":
    main()
