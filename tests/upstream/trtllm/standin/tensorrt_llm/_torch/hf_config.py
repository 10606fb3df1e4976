"""Stand-in of ``transformers.PretrainedConfig`` as TensorRT-LLM reads it (transformers is not
installed in draftsmith's test environment).

Reproduces: huggingface/transformers, configuration_utils.py, ``PretrainedConfig``: every
``config.json`` key becomes an attribute; a key that is absent raises ``AttributeError`` on
attribute access (``getattr(cfg, k, default)`` returns the default); ``to_dict()``.
Not a TensorRT-LLM module; lives here so the stand-in needs nothing outside itself.
"""

import copy


class PretrainedConfig:
    def __init__(self, **kwargs):
        self.__dict__.update(copy.deepcopy(kwargs))
        self.__dict__.setdefault("architectures", None)
        self.__dict__.setdefault("torch_dtype", None)

    @classmethod
    def from_dict(cls, d):
        return cls(**dict(d))

    def to_dict(self):
        return copy.deepcopy(dict(self.__dict__))
