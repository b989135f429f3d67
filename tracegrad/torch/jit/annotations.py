"""`torch.jit.annotations`: the typing names TorchScript code imports from here (`List`,
`Optional`, ..., and `BroadcastingList2`, a list or one value for each)."""

from typing import Any, Dict, List, Optional, Tuple  # noqa: UP035 (the names code imports)

__all__ = ["Any", "BroadcastingList1", "BroadcastingList2", "BroadcastingList3", "Dict", "List",
           "Optional", "Tuple"]  # fmt: skip

BroadcastingList1 = BroadcastingList2 = BroadcastingList3 = list
