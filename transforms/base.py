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
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any, ClassVar, Optional

import torch
from pydantic import AfterValidator, BaseModel, ConfigDict

from ..registry import Registry

# safetensors dtype strings <-> torch dtypes (the subset drafters use).
ST_TO_TORCH: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
if hasattr(torch, "float8_e8m0fnu"):
    ST_TO_TORCH["F8_E8M0"] = torch.float8_e8m0fnu
TORCH_TO_ST = {v: k for k, v in ST_TO_TORCH.items()}

DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}


def dtype_from_name(name: str) -> torch.dtype:
    """``"bfloat16"`` / ``"torch.bfloat16"`` / ``"BF16"`` -> ``torch.bfloat16``."""
    key = str(name).removeprefix("torch.")
    if key in DTYPE_NAMES:
        return DTYPE_NAMES[key]
    if key in ST_TO_TORCH:
        return ST_TO_TORCH[key]
    raise ValueError(f"unknown dtype {name!r}; known: {', '.join(sorted(DTYPE_NAMES))}")


def _known_dtype_name(v: Optional[str]) -> Optional[str]:
    if v is not None:
        dtype_from_name(v)  # ValueError naming the known dtypes
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
        return f"{TORCH_TO_ST.get(self.dtype, dtype_name(self.dtype))}{list(self.shape)}"


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

    def describe(self) -> str:
        return f"{self.name}({self.params.model_dump_json(exclude_defaults=True)})"


TRANSFORMS: Registry[type[Transform]] = Registry("transform", builtins=__package__)


def register_transform(cls: type[Transform]) -> type[Transform]:
    return TRANSFORMS.register(cls.name, cls)


def get_transform(op: str) -> type[Transform]:
    """Look a transform up by name; an unknown name lists the known ones."""
    return TRANSFORMS.lookup(op)
