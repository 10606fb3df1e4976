"""DFlash 2's additions to the DFlash step on the reference host (docs/dflash2-reference.md).

Two features, each built from explicit knobs that the compiled drafter supplies (nothing is
defaulted here, nothing names an adapter):

- :class:`BlockConv`: the grouped, causal, token-conditioned convolution along the drafted
  block that wraps one sublayer (section 2). Knobs: ``taps`` (``conv_kernel_size``),
  ``group_size`` (``conv_group_size``), ``hidden``. :func:`layer_forward` places the
  attention-side and MLP-side wraps in a draft layer.
- :class:`CandidateSelector`: per draft position the ``top_k`` candidates, a low-rank pairwise
  score ``[K, k, k]`` and the walk of one path through them (sections 3-5). Knobs: ``rank``,
  ``top_k``, the unary transform (:class:`UnaryTransform`: multiplier, soft cap, their order)
  and the chain (:class:`Chain`: greedy, or sampled with a temperature).

Block rows are request-major: ``N = requests * block`` rows, slot ``t = row % block``; the
block width is the runtime block (``max_draft_len + 1``), passed per call. Precision: the
coefficient projection runs in the weights' dtype, the convolution sums in float32 and
returns the rows' dtype; the selector's gate, unary scores and edge scores are float32, as
are the realized rows and path logits it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError

Rows = Callable[[torch.Tensor], torch.Tensor]

UNARY_ORDERS = ("scale_then_cap", "cap_then_scale")
CHAIN_MODES = ("greedy", "sampled")


def _refuse(what: str, value, why: str):
    raise UserError(f"dflash2: {what}={value!r} {why}")


def _positive_int(what: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _refuse(what, value, "must be an integer >= 1")
    return value


# --------------------------------------------------------------------------- convolution


def group_index(hidden: int, group_size: int, device=None) -> torch.Tensor:
    """Dynamic group of each channel: ``c // group_size`` (contiguous groups). ``[hidden]`` int64."""
    return torch.arange(hidden, device=device) // group_size


def grouped_block_conv(rows: torch.Tensor, coeff: torch.Tensor, base: torch.Tensor,
                       block: int, group_size: int) -> torch.Tensor:
    """One side of the convolution (section 2, "One side").

    ``rows [N, h]``; ``coeff [N, T, G]`` (this side's coefficients, of the row written);
    ``base [T, h]``. ``out[t, c] = sum_{i <= min(T-1, t)} (base[i, c] + coeff[t, i, c // g])
    * rows[t - i, c]`` with ``t`` the slot in its block: causal, zero before slot 0, never
    across blocks (so taps ``>= block`` add nothing: ``conv_kernel_size`` may exceed the block). Float32 inside; returns ``[N, h]`` in ``rows``' dtype.
    """
    n, h = rows.shape
    taps = base.shape[0]
    if n % block:
        _refuse("rows", n, f"is not a whole number of blocks of {block}")
    y = rows.float()
    slot = torch.arange(n, device=rows.device) % block
    per_channel = coeff.float().index_select(-1, group_index(h, group_size, rows.device))
    weight = base.float().unsqueeze(0) + per_channel  # [N, T, h]
    out = weight[:, 0] * y
    for tap in range(1, min(taps, block)):  # a tap reaching past the block's first slot adds nothing
        earlier = F.pad(y[:-tap], (0, 0, tap, 0))  # row t reads row t - tap
        out = out + weight[:, tap] * earlier * (slot >= tap).unsqueeze(-1)
    return out.to(rows.dtype)


class BlockConv(nn.Module):
    """The convolution that wraps one sublayer (``attention_conv`` or ``mlp_conv``).

    ``base_kernel [2, T, h]`` (side 0 wraps the sublayer's input, side 1 its output);
    ``kernel_projection.weight [2*T*G, h]``, ``G = h / group_size``, no bias: ``d = W x``
    read as ``[2, T, G]`` (feature ``side*T*G + tap*G + group``). Both sides' coefficients
    come from the sublayer's input. Weights start uninitialised.
    """

    def __init__(self, hidden: int, taps: int, group_size: int):
        super().__init__()
        hidden = _positive_int("hidden", hidden)
        self.taps = _positive_int("conv_kernel_size", taps)
        self.group_size = _positive_int("conv_group_size", group_size)
        if hidden % group_size:
            _refuse("conv_group_size", group_size, f"must divide hidden_size={hidden}")
        self.groups = hidden // group_size
        self.base_kernel = nn.Parameter(torch.empty(2, taps, hidden))
        self.kernel_projection = nn.Linear(hidden, 2 * taps * self.groups, bias=False)

    def coefficients(self, x: torch.Tensor) -> torch.Tensor:
        """``x [N, h]`` -> ``[N, 2, T, G]`` (projection in the weights' dtype)."""
        d = self.kernel_projection(x.to(self.kernel_projection.weight.dtype))
        return d.view(x.shape[0], 2, self.taps, self.groups)

    def prepare(self, x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Input side: ``(conv_0(x) [N, h], output-side coefficients [N, T, G])``."""
        d = self.coefficients(x)
        return grouped_block_conv(x, d[:, 0], self.base_kernel[0], block, self.group_size), d[:, 1]

    def finish(self, y: torch.Tensor, coeff: torch.Tensor, block: int) -> torch.Tensor:
        """Output side: ``conv_1(y)`` with the coefficients :meth:`prepare` returned."""
        return grouped_block_conv(y, coeff, self.base_kernel[1], block, self.group_size)

    def wrap(self, sublayer: Rows, x: torch.Tensor, block: int) -> torch.Tensor:
        """``finish(sublayer(prepare(x)))``: what the residual is added to. ``sublayer`` maps
        ``[N, h]`` rows to ``[N, h]`` rows."""
        inner, coeff = self.prepare(x, block)
        return self.finish(sublayer(inner), coeff, block)

    def extra_repr(self) -> str:
        return f"hidden={self.base_kernel.shape[-1]}, taps={self.taps}, group_size={self.group_size}"


def layer_forward(x: torch.Tensor, block: int, *, attn: Rows, mlp: Rows, norm_in: Rows,
                  norm_post: Rows, attention_conv: BlockConv, mlp_conv: BlockConv) -> torch.Tensor:
    """One draft layer's block rows with both wraps (section 2, "Placement").

    ``x = x + attention_conv.wrap(attn, norm_in(x))``, then
    ``x = x + mlp_conv.wrap(mlp, norm_post(x))``: residuals after the output-side conv.
    ``attn`` sees the convolved normed rows (its q and block k/v come from them; the
    context path is the caller's and is not convolved). ``[N, h]`` -> ``[N, h]``.
    """
    x = x + attention_conv.wrap(attn, norm_in(x), block)
    return x + mlp_conv.wrap(mlp, norm_post(x), block)


# --------------------------------------------------------------------------- selector


@dataclass(frozen=True)
class UnaryTransform:
    """How a candidate's logit becomes its unary score (section 3, disagreement rows 1-2).

    ``multiplier`` (``output_multiplier``, ``> 0`` so the transform is monotone and the
    candidates are the raw logits' top-k); ``softcap`` (``final_logit_softcapping``; ``None``
    for no cap, else ``> 0``); ``order``: ``scale_then_cap`` = ``cap*tanh(m*l/cap)`` (z-lab,
    vLLM S4a) or ``cap_then_scale`` = ``m*cap*tanh(l/cap)`` (vLLM S4b). TensorRT-LLM at
    d70a2287 is ``UnaryTransform(1.0, None, <either>)``.
    """

    multiplier: float
    softcap: Optional[float]
    order: Literal["scale_then_cap", "cap_then_scale"]

    def __post_init__(self):
        if not isinstance(self.multiplier, (int, float)) or isinstance(self.multiplier, bool) \
                or not math.isfinite(self.multiplier) or self.multiplier <= 0:
            _refuse("output_multiplier", self.multiplier, "must be a finite number > 0")
        if self.softcap is not None and (not isinstance(self.softcap, (int, float))
                                         or isinstance(self.softcap, bool)
                                         or not math.isfinite(self.softcap) or self.softcap <= 0):
            _refuse("final_logit_softcapping", self.softcap, "must be null or a finite number > 0")
        if self.order not in UNARY_ORDERS:
            _refuse("unary order", self.order, f"is not one of {', '.join(UNARY_ORDERS)}")

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """``[..., n]`` -> float32 ``[..., n]`` (monotone: it keeps the candidate set)."""
        out = logits.float()
        cap = self.softcap
        if self.order == "scale_then_cap":
            out = out * self.multiplier
            return out if cap is None else cap * torch.tanh(out / cap)
        if cap is not None:
            out = cap * torch.tanh(out / cap)
        return out * self.multiplier


@dataclass(frozen=True)
class Chain:
    """How the walk picks each step's candidate (section 5, disagreement row 3).

    ``greedy``: the first maximum of the realized row (TensorRT-LLM chains this way also when
    the worker later samples; ``temperature`` must be ``None``). ``sampled``: the argmax of
    ``row / temperature + gumbel`` (a sample of ``softmax(row / temperature)``, vLLM S5 and
    z-lab), the next step conditioned on the sampled slot; ``temperature > 0``.
    """

    mode: Literal["greedy", "sampled"]
    temperature: Optional[float]

    def __post_init__(self):
        if self.mode not in CHAIN_MODES:
            _refuse("chain", self.mode, f"is not one of {', '.join(CHAIN_MODES)}")
        if self.mode == "greedy" and self.temperature is not None:
            _refuse("temperature", self.temperature, "is not used by a greedy chain (give null)")
        if self.mode == "sampled" and (not isinstance(self.temperature, (int, float))
                                       or isinstance(self.temperature, bool)
                                       or not math.isfinite(self.temperature)
                                       or self.temperature <= 0):
            _refuse("temperature", self.temperature, "must be a finite number > 0 for a sampled chain")


def gumbel_noise(shape, generator: Optional[torch.Generator], device=None) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log(u))``, float32, ``u`` uniform in ``(0, 1)``."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    return -torch.log(-torch.log(u.clamp(min=tiny, max=1 - 2 ** -24)))


def top_candidates(logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``top_k`` largest ids per position, sorted descending; exact ties (common in bf16)
    keep the lower id first, also at the ``k``-th place (a stable sort, so the set and its
    order are deterministic). ``[..., V]`` -> ``(ids int64 [..., k], logits [..., k])``."""
    values, ids = torch.sort(logits, dim=-1, descending=True, stable=True)
    return ids[..., :top_k], values[..., :top_k]


def predecessor_ids(candidate_ids: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """``pred[b, 0, p] = anchors[b]``, ``pred[b, j, p] = cand[b, j-1, p]``: ``[Bq, K, k]``."""
    k = candidate_ids.shape[-1]
    first = anchors.to(candidate_ids.dtype)[:, None, None].expand(-1, 1, k)
    return torch.cat([first, candidate_ids[:, :-1]], dim=1)


def edge_scores(predecessor_codebook: torch.Tensor, successor_codebook: torch.Tensor,
                gate: torch.Tensor, candidate_ids: torch.Tensor, unary: torch.Tensor,
                anchors: torch.Tensor) -> torch.Tensor:
    """``S[b, j, p, c] = U[b, j, c] + sum_r A[pred[b, j, p], r] gate[b, j, r] C[cand[b, j, c], r]``
    (section 4), float32.

    Codebooks ``[V, r]``; ``gate [Bq, K, r]`` (``W_h z``); ``candidate_ids``, ``unary``
    ``[Bq, K, k]``; ``anchors [Bq]``. Returns ``[Bq, K, k, k]`` (request, position,
    predecessor slot, candidate slot).
    """
    pred = predecessor_codebook[predecessor_ids(candidate_ids, anchors)].float()
    succ = successor_codebook[candidate_ids].float()
    pair = torch.einsum("bjpr,bjcr->bjpc", pred * gate.float().unsqueeze(2), succ)
    return unary.float().unsqueeze(2) + pair


def walk(scores: torch.Tensor, candidate_ids: torch.Tensor, chain: Chain,
         noise: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Walk one path (section 5): step 0 enters at predecessor slot 0, step ``j`` reads row
    ``S[j, p_j]`` and picks ``p_{j+1}`` by ``chain``.

    ``scores [Bq, K, k, k]``; ``noise [Bq, K, k]`` Gumbel noise for a sampled chain
    (``None`` for greedy). Returns ``(realized rows [Bq, K, k] float32, chosen slots [Bq, K],
    tokens [Bq, K])``.
    """
    if (noise is None) != (chain.mode == "greedy"):
        _refuse("noise", None if noise is None else "tensor",
                f"does not fit a {chain.mode} chain (greedy takes none, sampled requires it)")
    nreq, npos, k, _ = scores.shape
    realized = scores.new_empty(nreq, npos, k, dtype=torch.float32)
    chosen = torch.empty(nreq, npos, dtype=torch.long, device=scores.device)
    prev = torch.zeros(nreq, 1, 1, dtype=torch.long, device=scores.device)
    for j in range(npos):
        row = scores[:, j].gather(1, prev.expand(-1, 1, k)).squeeze(1).float()
        realized[:, j] = row
        pick = row if noise is None else row / chain.temperature + noise[:, j].float()
        chosen[:, j] = pick.argmax(-1)
        prev = chosen[:, j].view(nreq, 1, 1)
    return realized, chosen, candidate_ids.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)


def path_logits(vocab: int, candidate_ids: torch.Tensor, realized: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary rows ``[Bq, K, V]`` float32: ``-inf`` except each position's candidates,
    which carry the realized row (argmax reproduces a greedy walk)."""
    out = realized.new_full((*candidate_ids.shape[:-1], vocab), -math.inf, dtype=torch.float32)
    return out.scatter_(-1, candidate_ids, realized.float())


@dataclass
class SelectorOutput:
    """What the selector returns for ``Bq`` requests, ``K`` positions, ``k`` candidates.

    ``tokens [Bq, K]`` int64 (the path); ``candidates [Bq, K, k]`` int64; ``realized
    [Bq, K, k]`` float32 (the score rows the walk read); ``logits [Bq, K, V]`` float32
    (:func:`path_logits`); ``noise [Bq, K, k]`` float32, the Gumbel noise a sampled walk added
    (``None`` for a greedy one).
    """

    tokens: torch.Tensor
    candidates: torch.Tensor
    realized: torch.Tensor
    logits: torch.Tensor
    noise: Optional[torch.Tensor] = None


class CandidateSelector(nn.Module):
    """The pairwise candidate selector (``candidate_selector``).

    ``predecessor_codebook [V, r]``, ``successor_codebook [V, r]`` (bare parameters),
    ``hidden_projection.weight [r, h]`` (no bias). ``top_k >= 2``; ``unary`` and ``chain`` as
    in :class:`UnaryTransform` / :class:`Chain`. Weights start uninitialised.
    """

    def __init__(self, hidden: int, vocab: int, rank: int, top_k: int, unary: UnaryTransform,
                 chain: Chain):
        super().__init__()
        hidden = _positive_int("hidden", hidden)
        vocab = _positive_int("vocab_size", vocab)
        self.rank = _positive_int("selector_rank", rank)
        self.top_k = _positive_int("selector_top_k", top_k)
        if top_k < 2:
            _refuse("selector_top_k", top_k, "must be >= 2")
        if top_k > vocab:
            _refuse("selector_top_k", top_k, f"exceeds vocab_size={vocab}")
        if not isinstance(unary, UnaryTransform) or not isinstance(chain, Chain):
            _refuse("selector", (type(unary).__name__, type(chain).__name__),
                    "needs a UnaryTransform and a Chain")
        self.unary, self.chain = unary, chain
        self.predecessor_codebook = nn.Parameter(torch.empty(vocab, rank))
        self.successor_codebook = nn.Parameter(torch.empty(vocab, rank))
        self.hidden_projection = nn.Linear(hidden, rank, bias=False)

    def gate(self, hidden: torch.Tensor) -> torch.Tensor:
        """``W_h z`` in float32: ``[..., h]`` -> ``[..., r]``."""
        return hidden.float() @ self.hidden_projection.weight.float().T

    def scores(self, logits: torch.Tensor, hidden: torch.Tensor,
               anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(candidate ids [Bq, K, k], edge scores [Bq, K, k, k])`` for ``logits [Bq, K, V]``
        (``lm_head`` of the draft slots), their final-normed ``hidden [Bq, K, h]``, ``anchors [Bq]``."""
        ids, values = top_candidates(logits, self.top_k)
        s = edge_scores(self.predecessor_codebook, self.successor_codebook, self.gate(hidden),
                        ids, self.unary(values), anchors)
        return ids, s

    def forward(self, logits: torch.Tensor, hidden: torch.Tensor, anchors: torch.Tensor,
                generator: Optional[torch.Generator], chain: Optional[Chain] = None) -> SelectorOutput:
        """Sections 3-5 end to end, walked by ``chain`` (default: the selector's own).
        ``generator`` draws the Gumbel noise of a sampled chain (``None``: torch's default)."""
        chain = self.chain if chain is None else chain
        ids, s = self.scores(logits, hidden, anchors)
        noise = None
        if chain.mode == "sampled":
            noise = gumbel_noise(ids.shape, generator, ids.device)
        realized, _, tokens = walk(s, ids, chain, noise)
        return SelectorOutput(tokens, ids, realized, path_logits(logits.shape[-1], ids, realized), noise)

    def extra_repr(self) -> str:
        return (f"rank={self.rank}, top_k={self.top_k}, unary={self.unary}, chain={self.chain}")
