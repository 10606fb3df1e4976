"""Tensor transforms: small, pure, invertible ops, each with a metadata-only rule.

A transform is bound to concrete tensor names by :meth:`Transform.bind` (at plan time,
from names alone) and then offers three views of the same op:

- ``meta(inputs: {role: TensorMeta}) -> {out_name: TensorMeta}``: shapes and dtypes only;
  raises :class:`TransformError` for anything that would fail on data.
- ``forward(inputs: {role: Tensor}) -> {out_name: Tensor}``: the conversion.
- ``inverse(outputs: {out_name: Tensor}) -> {in_name: Tensor}``: a right inverse on the
  image of ``forward`` (``forward(inverse(y)) == y`` bit for bit when ``y`` is in the
  image); used to synthesize source checkpoints.
- ``sample(out_metas, gen) -> {out_name: Tensor}``: draws values from the image of
  ``forward``, so that synthetic checkpoints round-trip exactly.

Transforms come from the closed :data:`TRANSFORMS` registry; a spec names them by ``op``.
"""

from __future__ import annotations

from .regex import compile_regex
import functools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, ClassVar, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict

from ..registry import Registry

# safetensors dtype strings -> torch dtype names (the subset drafters use); the torch tables
# below are built from these on first use, so that reading a spec never imports torch.
ST_DTYPES: dict[str, str] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E8M0": "float8_e8m0fnu",  # where torch has it
}
#: dtype names a spec or config may give (``torch_dtype``, a transform's ``dtype``).
PLAIN_DTYPES = ("float32", "float16", "bfloat16", "float64")


@functools.cache
def torch_tables() -> dict[str, dict]:
    """``ST_TO_TORCH`` (safetensors string -> torch dtype), ``TORCH_TO_ST`` and ``DTYPE_NAMES``
    (plain name -> torch dtype)."""
    import torch

    st = {k: getattr(torch, v) for k, v in ST_DTYPES.items() if hasattr(torch, v)}
    return {"ST_TO_TORCH": st, "TORCH_TO_ST": {v: k for k, v in st.items()},
            "DTYPE_NAMES": {n: getattr(torch, n) for n in PLAIN_DTYPES}}


def __getattr__(name: str):
    """``ST_TO_TORCH``, ``TORCH_TO_ST``, ``DTYPE_NAMES``: the torch tables (torch imported here)."""
    tables = torch_tables() if name in ("ST_TO_TORCH", "TORCH_TO_ST", "DTYPE_NAMES") else {}
    if name in tables:
        return tables[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _dtype_key(name: str) -> str:
    """``name`` without a ``torch.`` prefix; a ``ValueError`` naming the known dtypes unless it
    is a plain or safetensors dtype name (no torch needed)."""
    key = str(name).removeprefix("torch.")
    if key not in PLAIN_DTYPES and key not in ST_DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(PLAIN_DTYPES))}")
    return key


def dtype_from_name(name: str) -> torch.dtype:
    """``"bfloat16"`` / ``"torch.bfloat16"`` / ``"BF16"`` -> ``torch.bfloat16``."""
    key, tables = _dtype_key(name), torch_tables()
    if key in tables["DTYPE_NAMES"]:
        return tables["DTYPE_NAMES"][key]
    if key in tables["ST_TO_TORCH"]:
        return tables["ST_TO_TORCH"][key]
    raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(PLAIN_DTYPES))}")


def check_dtype_name(name: str) -> None:
    """A ``ValueError`` naming the known dtypes unless :func:`dtype_from_name` knows ``name``
    (checked by name, without importing torch)."""
    _dtype_key(name)


def _known_dtype_name(v: Optional[str]) -> Optional[str]:
    if v is not None:
        check_dtype_name(v)  # ValueError naming the known dtypes
    return v


#: A transform parameter naming a dtype (``None`` allowed): validated by :func:`dtype_from_name`.
DtypeName = Annotated[Optional[str], AfterValidator(_known_dtype_name)]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class TensorMeta:
    """What a safetensors header says about a tensor: shape and dtype (no data)."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @cached_property
    def nbytes(self) -> int:
        """Bytes of the data (computed once: plans and writers ask for it per tensor)."""
        n = self.dtype.itemsize
        for s in self.shape:
            n *= s
        return n

    def __str__(self) -> str:
        return f"{torch_tables()['TORCH_TO_ST'].get(self.dtype, dtype_name(self.dtype))}{list(self.shape)}"


class TransformError(ValueError):
    """A transform cannot apply to these tensors; the message names them."""


class Params(BaseModel):
    """Base of every transform's parameters (unknown keys refused)."""

    model_config = ConfigDict(extra="forbid")


@dataclass
class Context:
    """What transforms may read besides their tensors: the flattened config, and an
    optional thread pool for elementwise work split into chunks (``None``: run inline)."""

    config: dict[str, Any] = field(default_factory=dict)
    pool: Any = None  # a concurrent.futures.Executor, set by the converter

    @property
    def dtype(self) -> torch.dtype:
        return dtype_from_name(self.config.get("torch_dtype", "bfloat16"))

    def size(self, expr: int | str | list) -> int:
        """An int, a config key, or a list of those multiplied together."""
        if isinstance(expr, int):
            return expr
        if isinstance(expr, str):
            if expr not in self.config or not isinstance(self.config[expr], int):
                raise TransformError(f"config key {expr!r} (an integer) is needed for a size")
            return self.config[expr]
        n = 1
        for e in expr:
            n *= self.size(e)
        return n


@dataclass(frozen=True)
class Binding:
    """One application of a transform: its input names by role and its output names."""

    inputs: dict[str, str]
    outputs: tuple[str, ...]


class Transform:
    """Base class; subclasses set ``name``, ``Params`` and implement the five methods."""

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    #: the ``quantization_config.quant_method`` this transform dequantizes, if any
    quant_method: ClassVar[str | None] = None
    #: ``forward`` works element by element (pairing elements of its inputs at equal
    #: positions): on inputs stacked along a new leading dim it returns the stack of its
    #: outputs, bit for bit. The converter then runs many small tensors in one call.
    elementwise: ClassVar[bool] = False

    def __init__(self, params: Params, match: str):
        self.params = params
        self.match = compile_regex(match)

    # --- names ---------------------------------------------------------------------
    def bind(self, name: str, names: set[str]) -> Binding | None:
        """If ``name`` is this transform's primary input, the binding; else None.

        The default binds name-preserving one-to-one ops: ``{"x": name} -> (name,)``.
        """
        if self.match.test(name):
            return Binding({"x": name}, (name,))
        return None

    def bind_inverse(self, out_name: str, out_names: set[str]) -> Binding | None:
        """The binding that produces ``out_name`` (input names derived from it), or None."""
        if self.match.search(out_name):
            return Binding({"x": out_name}, (out_name,))
        return None

    # --- data ----------------------------------------------------------------------
    def meta(self, b: Binding, inputs: dict[str, TensorMeta], ctx: Context) -> dict[str, TensorMeta]:
        raise NotImplementedError

    def forward(self, b: Binding, inputs: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def inverse(self, b: Binding, outputs: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def sample(
        self, b: Binding, out_metas: dict[str, TensorMeta], gen: torch.Generator, ctx: Context
    ) -> dict[str, torch.Tensor] | None:
        """Values from the image of ``forward``; None means any value of the dtype will do."""
        return None


TRANSFORMS: Registry[type[Transform]] = Registry("transform", builtins=__package__)


def register_transform(cls: type[Transform]) -> type[Transform]:
    return TRANSFORMS.register(cls.name, cls)


def get_transform(op: str) -> type[Transform]:
    """Look a transform up by name; an unknown name lists the known ones."""
    return TRANSFORMS.lookup(op)
