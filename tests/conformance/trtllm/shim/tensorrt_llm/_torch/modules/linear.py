"""Shim: ``_torch/modules/linear.py``: the excerpt's ``WeightMode`` / ``WeightsLoadingConfig``
(NVIDIA linear.py, source id 421325918); ``Linear``, ``TensorParallelMode``, ``load_weight_shard`` and the
unquantized loading from the stand-in (a transcription of linear.py, source id 3478255898)."""
import importlib.util
from pathlib import Path

from tensorrt_llm._excerpts import export, mu

export(globals(), mu, ["WeightMode", "WeightsLoadingConfig"])
_path = Path(__file__).resolve().parents[4] / "standin" / "tensorrt_llm" / "_torch" / "modules" / "linear.py"
_spec = importlib.util.spec_from_file_location("tensorrt_llm._torch.modules._standin_linear", _path)
_standin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_standin)
Linear = _standin.Linear
TensorParallelMode = _standin.TensorParallelMode
load_weight_shard = _standin.load_weight_shard
UnquantizedLinearMethod = _standin.UnquantizedLinearMethod
