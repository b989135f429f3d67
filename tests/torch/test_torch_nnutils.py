"""`tracegrad.torch`'s names for the module hooks, nn.utils' submodules (rnn, parametrize,
parametrizations) and torch.utils.checkpoint/hooks: reached by attribute in a fresh interpreter
and by import, the same objects as tracegrad's; a name left out refuses by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tracegrad.torch as torch
from tracegrad.nn import packed, parametrize, utils
from tracegrad.nn.modules import RemovableHandle, register_module_forward_hook
from tracegrad.utils import checkpoint

ROOT = Path(__file__).resolve().parents[2]


def test_the_submodules_are_attributes_before_anything_imports_them():
    code = ("import tracegrad.torch as torch; torch.nn.utils.rnn.pad_sequence; "
            "torch.nn.utils.parametrizations.weight_norm; torch.utils.checkpoint.checkpoint; "
            "torch.nn.modules.module.register_module_forward_hook; torch.utils.hooks")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_names_are_tracegrads():
    assert torch.nn.utils.rnn.pad_sequence is utils.pad_sequence
    assert torch.nn.utils.weight_norm is utils.weight_norm
    assert torch.nn.utils.spectral_norm is utils.spectral_norm
    assert torch.nn.utils.parameters_to_vector is utils.parameters_to_vector
    assert torch.nn.utils.clip_grad_norm_ is utils.clip_grad_norm_
    assert torch.nn.utils.parametrizations.spectral_norm is parametrize.spectral_norm
    assert torch.nn.utils.parametrize.register_parametrization is \
        parametrize.register_parametrization  # fmt: skip
    assert torch.nn.modules.module.register_module_forward_hook is register_module_forward_hook
    assert torch.nn.modules.Linear is torch.nn.Linear
    assert torch.utils.hooks.RemovableHandle is RemovableHandle
    assert torch.utils.checkpoint.checkpoint is checkpoint.checkpoint


@pytest.mark.parametrize(
    "name", ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pack_sequence",
             "unpack_sequence"]
)  # fmt: skip
def test_packed_sequences_are_tracegrads(name):
    assert getattr(torch.nn.utils.rnn, name) is getattr(packed, name)


def test_a_missing_name_is_refused_by_name():
    with pytest.raises(AttributeError, match="torch.nn.utils.rnn.invert_permutation is not"):
        torch.nn.utils.rnn.invert_permutation  # noqa: B018


def test_device_states_are_none_on_the_cpu():
    """performer-pytorch's and reformer's reversible layers save the GPU RNG states of their
    inputs' devices beside the CPU's, and restore them to replay dropout in backward."""
    from tracegrad.torch.utils.checkpoint import get_device_states, set_device_states

    devices, states = get_device_states(torch.zeros(2), torch.ones(3))
    assert devices == [] and states == []
    set_device_states(devices, states)
    with pytest.raises(ValueError, match="CPU only"):
        set_device_states([0], [torch.zeros(1)])
