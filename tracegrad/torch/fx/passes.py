"""`torch.fx.passes`: `shape_prop.ShapeProp`, which runs a GraphModule on example inputs and
records each node's tensor metadata in `node.meta["tensor_meta"]` (what FX tutorials print).
The other passes (graph drawing, splitting, operator support) are not provided."""

from __future__ import annotations

from typing import Any, NamedTuple

from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import file_module
from tracegrad.torch.fx.interpreter import Interpreter
from tracegrad.torch.fx.node import Node, map_aggregate


class TensorMetadata(NamedTuple):
    """PyTorch's fields: the shape, dtype, strides (in elements) and whether it requires grad;
    never quantized, always contiguous in memory format."""

    shape: tuple
    dtype: Any
    requires_grad: bool
    stride: tuple
    memory_format: Any
    is_quantized: bool
    qparams: dict


def _extract(t: Tensor) -> TensorMetadata:
    return TensorMetadata(tuple(t.shape), t.dtype, t.requires_grad, tuple(t.stride()), None,
                          False, {})  # fmt: skip


class ShapeProp(Interpreter):
    """`ShapeProp(gm).propagate(*inputs)`: run, and record each node's result's metadata (a
    tuple of them for a node giving several tensors) and `node.type`."""

    def run_node(self, n: Node) -> Any:
        result = super().run_node(n)
        found: list[bool] = []
        meta = map_aggregate(result, lambda x: (found.append(True), _extract(x))[1]
                             if isinstance(x, Tensor) else x)  # fmt: skip
        if found:
            n.meta["tensor_meta"] = meta
        n.meta["type"] = type(result)
        return result

    def propagate(self, *args: Any) -> Any:
        return super().run(*args)


shape_prop = file_module(f"{__name__}.shape_prop", "`torch.fx.passes.shape_prop`",
                         {"ShapeProp": ShapeProp, "TensorMetadata": TensorMetadata,
                          "_extract_tensor_metadata": _extract})  # fmt: skip
