"""`torch.signal`: the window functions of `torch.signal.windows`."""

from tracegrad.torch.signal import windows  # noqa: F401
