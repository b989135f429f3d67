"""`torch.nn.modules`: tracegrad's layers (`tracegrad.nn`) under PyTorch's submodule paths
(`torch.nn.modules.conv.Conv2d`, ...), with PyTorch's base classes that code subclasses or
tests with isinstance (`batchnorm._BatchNorm`, `conv._ConvNd`, `loss._Loss`) and the argument
helpers of `utils` (`_pair`, ...). `module` has the global forward hooks."""

from __future__ import annotations

import collections.abc
import itertools
import types
from typing import Any

import tracegrad.nn as _nn
from tracegrad.nn import *  # noqa: F403
from tracegrad.nn.layers import (
    NonDynamicallyQuantizableLinear,
    _BatchNorm,
    _ConvNd,
    _ConvTransposeNd,
    _InstanceNorm,
)
from tracegrad.nn.losses import _Loss, _WeightedLoss
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.nn.modules import module


def _ntuple(n: int, name: str = "parse") -> Any:
    def parse(x: Any) -> tuple:
        if isinstance(x, collections.abc.Iterable) and not isinstance(x, str):
            return tuple(x)
        return tuple(itertools.repeat(x, n))

    parse.__name__ = name
    return parse


_BASES = {"NonDynamicallyQuantizableLinear": NonDynamicallyQuantizableLinear,
          "_BatchNorm": _BatchNorm, "_NormBase": _BatchNorm, "_ConvNd": _ConvNd,
          "_ConvTransposeNd": _ConvTransposeNd, "_InstanceNorm": _InstanceNorm, "_Loss": _Loss,
          "_WeightedLoss": _WeightedLoss, "_single": _ntuple(1, "_single"),
          "_pair": _ntuple(2, "_pair"), "_triple": _ntuple(3, "_triple"),
          "_quadruple": _ntuple(4, "_quadruple"), "_ntuple": _ntuple}  # fmt: skip

# PyTorch's file for each name (those tracegrad has; the rest are not provided there either)
_LAYOUT = {
    "linear": "Linear Identity Bilinear LazyLinear NonDynamicallyQuantizableLinear",
    "conv": "Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d LazyConv1d "
            "LazyConv2d LazyConv3d LazyConvTranspose1d LazyConvTranspose2d LazyConvTranspose3d "
            "_ConvNd _ConvTransposeNd",
    "batchnorm": "BatchNorm1d BatchNorm2d BatchNorm3d SyncBatchNorm _BatchNorm _NormBase",
    "instancenorm": "InstanceNorm1d InstanceNorm2d InstanceNorm3d _InstanceNorm",
    "normalization": "LayerNorm GroupNorm RMSNorm LocalResponseNorm",
    "activation": "ReLU ReLU6 GELU SiLU Mish ELU SELU CELU LeakyReLU PReLU Sigmoid Tanh "
                  "Softplus Softsign Softmax Softmax2d LogSoftmax Softmin Hardtanh Hardswish "
                  "Hardsigmoid LogSigmoid Softshrink Hardshrink Tanhshrink Threshold GLU "
                  "MultiheadAttention",
    "loss": "CrossEntropyLoss NLLLoss MSELoss L1Loss BCELoss BCEWithLogitsLoss SmoothL1Loss "
            "HuberLoss KLDivLoss PoissonNLLLoss GaussianNLLLoss SoftMarginLoss "
            "HingeEmbeddingLoss MultiLabelSoftMarginLoss MarginRankingLoss CosineEmbeddingLoss "
            "TripletMarginLoss TripletMarginWithDistanceLoss MultiMarginLoss "
            "MultiLabelMarginLoss CTCLoss _Loss _WeightedLoss",
    "container": "Sequential ModuleList ModuleDict ParameterList ParameterDict",
    "dropout": "Dropout Dropout1d Dropout2d Dropout3d AlphaDropout FeatureAlphaDropout",
    "pooling": "MaxPool1d MaxPool2d MaxPool3d AvgPool1d AvgPool2d AvgPool3d AdaptiveAvgPool1d "
               "AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d "
               "AdaptiveMaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d LPPool1d LPPool2d LPPool3d",
    "adaptive": "AdaptiveLogSoftmaxWithLoss",
    "rnn": "RNNBase RNN LSTM GRU RNNCellBase RNNCell LSTMCell GRUCell",
    "sparse": "Embedding EmbeddingBag",
    "transformer": "Transformer TransformerEncoder TransformerDecoder TransformerEncoderLayer "
                   "TransformerDecoderLayer",
    "pixelshuffle": "PixelShuffle PixelUnshuffle",
    "upsampling": "Upsample UpsamplingNearest2d UpsamplingBilinear2d",
    "padding": "ConstantPad1d ConstantPad2d ConstantPad3d ZeroPad1d ZeroPad2d ZeroPad3d "
               "ReflectionPad1d ReflectionPad2d ReflectionPad3d ReplicationPad1d "
               "ReplicationPad2d ReplicationPad3d CircularPad1d CircularPad2d CircularPad3d",
    "flatten": "Flatten Unflatten",
    "distance": "CosineSimilarity PairwiseDistance",
    "fold": "Fold Unfold",
    "channelshuffle": "ChannelShuffle",
    "utils": "_single _pair _triple _quadruple _ntuple",
}  # fmt: skip


def _submodule(name: str, names: str) -> types.ModuleType:
    """`torch.nn.modules.<name>`, registered so that `import torch.nn.modules.<name>` finds it."""
    held = {n: _BASES[n] if n in _BASES else getattr(_nn, n)
            for n in names.split() if n in _BASES or hasattr(_nn, n)}  # fmt: skip
    return file_module(f"{__name__}.{name}", f"`torch.nn.modules.{name}`: {names.split()[0]}, ...",
                       held)  # fmt: skip


globals().update({name: _submodule(name, names) for name, names in _LAYOUT.items()})


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
