"""Tensor transforms (closed registry). Importing this package registers the built-ins."""

from . import cast, fuse, mxfp8, norm_fold  # noqa: F401  (registration side effects)
from .base import TRANSFORMS, Binding, Context, TensorMeta, Transform, TransformError, get_transform

__all__ = ["TRANSFORMS", "Binding", "Context", "TensorMeta", "Transform", "TransformError", "get_transform"]
