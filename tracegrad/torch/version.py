"""`torch.version`: the PyTorch API version this namespace follows (and its tests compare
with), labelled as tracegrad's; no CUDA, no ROCm."""

__version__ = "2.13.0+tracegrad"
cuda = hip = git_version = None
