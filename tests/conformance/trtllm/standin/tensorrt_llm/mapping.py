"""Stand-in of ``tensorrt_llm.mapping``.

Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/mapping.py`` (index id 3760030498, commit not shown by
the index), ``Mapping`` / ``MpiTopology`` for one pipeline stage and no context parallelism: the
fields a drafter's building blocks read (``world_size``, ``rank``, ``tp_size``, ``enable_attention_dp``)
and ``tp_rank = rank % tp_size``, ``tp_group`` (the ranks of this stage), ``is_last_pp_rank()``.
Other parallel dimensions (pp, cp, moe) are not reproduced and are refused when set."""


class Mapping:
    def __init__(self, world_size=1, rank=0, gpus_per_node=8, *, tp_size=1, pp_size=1, cp_size=1,
                 enable_attention_dp=False, **others):
        if pp_size != 1 or cp_size != 1 or any(v not in (None, 1, False) for v in others.values()):
            raise NotImplementedError("stand-in Mapping: only tp_size (and attention DP) are reproduced")
        if world_size != tp_size * pp_size * cp_size:
            raise ValueError(f"world_size {world_size} != tp_size {tp_size} * pp_size {pp_size} * cp_size {cp_size}")
        self.world_size, self.rank, self.gpus_per_node = world_size, rank, gpus_per_node
        self.tp_size, self.pp_size, self.cp_size = tp_size, pp_size, cp_size
        self.enable_attention_dp = enable_attention_dp

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def tp_group(self) -> list:
        return list(range(self.tp_size))

    def is_last_pp_rank(self) -> bool:
        return True

    def is_first_pp_rank(self) -> bool:
        return True
