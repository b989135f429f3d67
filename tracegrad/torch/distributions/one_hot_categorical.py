"""`torch.distributions.one_hot_categorical`: the one-hot categoricals."""

from tracegrad.distributions import OneHotCategorical, OneHotCategoricalStraightThrough  # noqa: F401
