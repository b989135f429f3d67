"""PyTorch's dtype objects (`torch.float32`), which a tensor's `dtype` answers: each stands for
a NumPy dtype, which NumPy takes it as, and has PyTorch's attributes and name; comparing with
`==` and hashing go by the NumPy dtype, so `x.dtype == np.float32` holds too."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.core.bfloat16 import BFLOAT16


class _DtypeClass(type):
    """`isinstance(d, torch.dtype)` holds for NumPy's dtypes too: code tells a dtype argument
    from others that way (`.to(np.float16)` or `.to(device)`)."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, np.dtype) or type.__instancecheck__(cls, obj)


class dtype(metaclass=_DtypeClass):  # noqa: N801 (PyTorch's name)
    """PyTorch's `torch.dtype` (what `x.dtype` is), standing for a NumPy dtype: it has PyTorch's
    attributes (`is_floating_point`, `itemsize`) and prints as PyTorch's (`torch.float32`), and
    NumPy takes it wherever a dtype goes (`np.zeros(2, x.dtype)`: it reads `.dtype`); it equals
    and hashes as its NumPy dtype, and NumPy's attributes (`kind`, `char`, `type`) are its
    NumPy dtype's (but bfloat16's `kind`, "f"). bfloat16 is held as its bits (core/bfloat16);
    a dtype with no NumPy counterpart (complex32, float8) exists, so that code naming it runs,
    and raises when used."""

    __slots__ = ("name", "_numpy", "_why", "_hash", "kind", "char", "type")

    def __init__(self, name: str, numpy: Any = None, why: str = "") -> None:
        self.name = name
        self._numpy = None if numpy is None else np.dtype(numpy)
        self._why = why
        self._hash = hash(name if numpy is None else self._numpy)
        if numpy is not None:  # slots, not __getattr__: asked at many ops
            self.kind, self.char, self.type = self._numpy.kind, self._numpy.char, self._numpy.type
        if name == "bfloat16":  # the float it is, not its bits' void: code asks `kind in "fc"`
            self.kind = "f"

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype (NumPy reads this attribute in np.dtype(x), np.zeros(n, x), ...)."""
        if self._numpy is None:
            raise TypeError(f"torch.{self.name} is not provided by tracegrad: {self._why}")
        return self._numpy

    __numpy_dtype__ = dtype  # NumPy 2's protocol, asked first (then `.dtype`)

    is_floating_point = property(lambda self: self._kind() == "f")
    is_complex = property(lambda self: self._kind() == "c")
    is_signed = property(lambda self: self._kind() in "fic")
    itemsize = property(lambda self: self.dtype.itemsize)

    def _kind(self) -> str:
        if self._numpy is None:
            return "c" if self.name.startswith("complex") else "f"
        return self.kind

    def to_real(self) -> dtype:
        """The dtype of a complex dtype's parts (complex64: float32); a real dtype itself."""
        return DTYPES[_PARTS[self.name]] if self.name in _PARTS else self

    def to_complex(self) -> dtype:
        """The complex dtype of a float dtype's precision (float64: complex128)."""
        if self.name == "float64" or self.name == "complex128":
            return DTYPES["complex128"]
        return DTYPES["complex64"]

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __getattr__(self, name: str) -> Any:  # NumPy's attributes: `kind`, `char`, `type`, ...
        if name not in _NUMPY_ATTRIBUTES:  # not `shape`: duck typing would take it for an array
            raise AttributeError(f"'torch.dtype' object has no attribute '{name}'")
        return getattr(self.dtype, name)

    def __reduce__(self) -> tuple:  # pickles and copies are the one object of its name
        return torch_dtype_named, (self.name,)

    def __eq__(self, other: Any) -> bool:  # asked at many ops: the common cases first
        if other.__class__ is dtype:
            return self is other or self.name == other.name
        if self._numpy is None:
            return False
        if isinstance(other, np.dtype):
            return self._numpy == other
        try:
            return self._numpy == np.dtype(other)
        except TypeError:
            return False

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return self._hash


_NUMPY_ATTRIBUTES = frozenset(
    {
        "kind",  # (slots where a NumPy dtype exists)
        "char",
        "type",
        "num",
        "str",
        "byteorder",
        "alignment",
        "isnative",
        "isbuiltin",
        "hasobject",
        "descr",
        "base",
    }
)

DTYPES = {
    "float32": dtype("float32", np.float32), "float64": dtype("float64", np.float64),
    "float16": dtype("float16", np.float16),
    "bfloat16": dtype("bfloat16", BFLOAT16),  # its bits: made, viewed, converted (core/bfloat16)
    "complex32": dtype("complex32", why="NumPy has no complex32; use complex64"),
    **{name: dtype(name, why="NumPy has no float8 types; use float16 or float32")
       for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                    "float8_e8m0fnu")},
    "int8": dtype("int8", np.int8), "int16": dtype("int16", np.int16),
    "int32": dtype("int32", np.int32), "int64": dtype("int64", np.int64),
    "uint8": dtype("uint8", np.uint8), "uint16": dtype("uint16", np.uint16),
    "uint32": dtype("uint32", np.uint32), "uint64": dtype("uint64", np.uint64),
    "bool": dtype("bool", np.bool_),
    "complex64": dtype("complex64", np.complex64), "complex128": dtype("complex128", np.complex128),
}  # fmt: skip
_PARTS = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "short": "int16",
           "int": "int32", "long": "int64", "chalf": "complex32", "cfloat": "complex64",
           "cdouble": "complex128"}  # fmt: skip


def torch_dtype(d: Any) -> dtype:
    """PyTorch's dtype object for a NumPy dtype (or anything np.dtype takes)."""
    d = np.dtype(d)
    return _OF_NUMPY.get(d) or DTYPES[d.name]


def torch_dtype_named(name: str) -> dtype:
    return DTYPES[name]


_OF_NUMPY = {d._numpy: d for d in DTYPES.values() if d._numpy is not None}


def of_array(a: Any) -> Any:
    """The dtype a tensor holding `a` (an array or a traced value) answers: PyTorch's object for
    NumPy's dtype, or the NumPy dtype itself where PyTorch has none (a structured one)."""
    d = a.dtype
    return _OF_NUMPY.get(d, d)
