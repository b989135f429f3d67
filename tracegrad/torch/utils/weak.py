"""`torch.utils.weak`: weak references compared by identity. Tensors compare elementwise, so
`weakref.WeakKeyDictionary` cannot hold them as keys; these can (caches keyed by tensor)."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, MutableMapping
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["TensorWeakRef", "WeakIdKeyDictionary", "WeakIdRef", "WeakTensorKeyDictionary"]


class WeakIdRef(weakref.ref):
    """A weak reference equal to another only if both point at the same live object (or are
    the same reference), hashed by that object's identity."""

    __slots__ = ("_id",)

    def __new__(cls, key: Any, callback: Any = None) -> WeakIdRef:
        self = super().__new__(cls, key, callback)
        self._id = id(key)
        return self

    def __init__(self, key: Any, callback: Any = None) -> None:
        super().__init__(key, callback)

    def __hash__(self) -> int:
        return self._id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WeakIdRef):
            return NotImplemented
        a, b = self(), other()
        return self is other if a is None or b is None else a is b


class WeakIdKeyDictionary(MutableMapping):
    """A dict whose keys are held weakly and compared by identity; an entry goes when its key
    is collected."""

    def __init__(self, items: Any = None) -> None:
        self.data: dict[WeakIdRef, Any] = {}
        self_ref = weakref.ref(self)

        def forget(ref: WeakIdRef) -> None:
            owner = self_ref()
            if owner is not None:
                owner.data.pop(ref, None)

        self._forget = forget
        if items is not None:
            self.update(items)

    def __getitem__(self, key: Any) -> Any:
        return self.data[WeakIdRef(key)]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.data[WeakIdRef(key, self._forget)] = value

    def __delitem__(self, key: Any) -> None:
        del self.data[WeakIdRef(key)]

    def __contains__(self, key: object) -> bool:
        try:
            return WeakIdRef(key) in self.data
        except TypeError:  # not weakly referable
            return False

    def __iter__(self) -> Iterator[Any]:
        for ref in list(self.data):
            key = ref()
            if key is not None:
                yield key

    def __len__(self) -> int:
        return sum(ref() is not None for ref in list(self.data))

    def __repr__(self) -> str:
        return f"<WeakIdKeyDictionary at {id(self):#x}>"


WeakTensorKeyDictionary = WeakIdKeyDictionary


class TensorWeakRef:
    """A weak reference to a tensor (`ref()` gives it, or None once collected)."""

    def __init__(self, tensor: Any) -> None:
        self.ref = weakref.ref(tensor)

    def __call__(self) -> Any:
        return self.ref()


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
