"""`torch.utils.model_zoo`: PyTorch's older name for `torch.hub`'s downloads."""

from tracegrad.torch.hub import load_state_dict_from_url as load_url
from tracegrad.torch.hub import tqdm

__all__ = ["load_url", "tqdm"]
