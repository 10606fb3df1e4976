"""Stand-in of ``tensorrt_llm.mapping``.

Reproduces NVIDIA/TensorRT-LLM, ``tensorrt_llm/mapping.py`` (index id 3760030498, commit not shown by
the index), ``Mapping`` / ``MpiTopology`` for one pipeline stage and no context parallelism: the
fields a drafter's building blocks read (``world_size``, ``rank``, ``tp_size``, ``enable_attention_dp``)
and with ``cp_size == 1``: ``tp_rank = rank % tp_size``, ``pp_rank = rank // tp_size``, ``tp_group``
(the ranks of this rank's stage), ``is_first_pp_rank()`` / ``is_last_pp_rank()``. Context parallelism
and the MoE dimensions are not reproduced and are refused when set."""


class Mapping:
    def __init__(self, world_size=1, rank=0, gpus_per_node=8, *, tp_size=1, pp_size=1, cp_size=1,
                 enable_attention_dp=False, **others):
        if cp_size != 1 or any(v not in (None, 1, False) for v in others.values()):
            raise NotImplementedError("stand-in Mapping: only tp_size, pp_size and attention DP are reproduced")
        if world_size != tp_size * pp_size * cp_size:
            raise ValueError(f"world_size {world_size} != tp_size {tp_size} * pp_size {pp_size} * cp_size {cp_size}")
        self.world_size, self.rank, self.gpus_per_node = world_size, rank, gpus_per_node
        self.tp_size, self.pp_size, self.cp_size = tp_size, pp_size, cp_size
        self.enable_attention_dp = enable_attention_dp

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def pp_rank(self) -> int:
        return self.rank // (self.tp_size * self.cp_size)

    @property
    def tp_group(self) -> list:
        base = self.pp_rank * self.tp_size
        return list(range(base, base + self.tp_size))

    def is_last_pp_rank(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    def is_first_pp_rank(self) -> bool:
        return self.pp_rank == 0
