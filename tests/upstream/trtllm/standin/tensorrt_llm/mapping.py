"""``tensorrt_llm.mapping``: TensorRT-LLM's own ``Mapping`` (``CpType``, ``MappingBase``, ``Mapping``,
``MpiTopology``, ``DeviceMeshTopology``), executed verbatim from ``deep/mapping_excerpt.py`` (NVIDIA
``tensorrt_llm/mapping.py`` @ b35ac1b6). Stubs as ``deep/loader.py``: ``mpi_disabled`` (False: the MPI
orchestrator, TensorRT-LLM's default) and ``DeviceMeshTopologyImpl`` (the Ray mesh, not used)."""

import enum as _enum
import typing as _typing

import torch

from ._deep import run as _run

IntEnum, List = _enum.IntEnum, _typing.List


def mpi_disabled():  # STUB tensorrt_llm._utils.mpi_disabled
    return False


DeviceMeshTopologyImpl = type("DeviceMeshTopologyImpl", (), {})  # STUB: Ray-only device mesh

_run("mapping_excerpt.py", globals())
