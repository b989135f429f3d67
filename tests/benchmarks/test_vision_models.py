"""benchmarks/vision_models.py's models, torchvision's and timm's own code (where installed:
neither is a dependency): a compiled step trains as the eager one does, in float32."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
)
import vision_models  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilenet_v3_small", "convnext_atto"])
def test_compiled_steps_train_as_eager_ones(name):
    library = vision_models.MODELS[name][0]
    if importlib.util.find_spec(library) is None:  # (importing it needs `import torch` hooked)
        pytest.skip(f"{library} is not installed")
    losses = []
    for method in ("tg-eager", "tg-traced"):  # each built (seeded) just before its steps: the
        run = vision_models.build(method, name)  # same dropout masks
        losses.append([run() for _ in range(3)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=2e-5)
    assert losses[0][2] != losses[0][0]  # the steps changed the weights
