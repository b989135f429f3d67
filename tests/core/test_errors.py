"""Errors name the user's line: a shape mistake and a trace's refusal, however deep in code the
user called the op was reached."""

from __future__ import annotations

import pytest

import tracegrad as tg
from tracegrad.core.errors import ShapeError, TraceError


def masked_sum(x):
    return x[x > 0].sum()  # a data-dependent shape: a trace refuses it here


def test_a_trace_refusal_names_the_line_that_asked():
    step = tg.trace(lambda x: masked_sum(x) * 2, backend="numpy")
    with pytest.raises(TraceError, match=r"boolean mask.* \(at test_errors\.py:13\)$"):
        step(tg.ones(3))


def test_a_message_that_names_its_line_is_left_as_it_is():
    assert str(TraceError("item() on a traced value (at model.py:7)")).count("(at ") == 1


def test_a_shape_mistake_names_the_line():
    with pytest.raises(ShapeError, match=r"\(at test_errors\.py:\d+\)"):
        tg.ones(2, 3) @ tg.ones(2, 3)
