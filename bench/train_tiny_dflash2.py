"""Train a tiny DFlash 2 drafter for the already-trained target of ``tests/fixtures/tiny_pair``.

The target (``tests/fixtures/tiny_pair/target``, the byte-level ``LlamaForCausalLM`` that
``bench/train_tiny_pair.py`` trained) is loaded and frozen, never retrained. Corpus, held-out
split, anchors, optimiser, schedule and time budget are bench/train_tiny_pair.py's (imported
from it): the Python standard library's ``*.py`` bytes, held-out files by ``crc32 % 50``,
random 512-byte windows, AdamW, cosine LR, steps set to fit ``--drafter-seconds``.

The drafter is z-lab's DFlash 2 (docs/dflash2-reference.md sections 1-5), built from the
project's host modules (``framework/runtime/dflash2.py``: ``BlockConv``, ``layer_forward``,
``CandidateSelector``, ``UnaryTransform``, ``edge_scores``, ``top_candidates``):

- DFlash block decode, Qwen3 backbone: plain RMSNorms, q/k norms, full NeoX rope, silu MLP,
  no biases; 3 layers, hidden 128, heads 4/2 x 32, MLP 384; context ``hidden_norm(fc(h))`` of
  target layer outputs ``[1, 3, 5]``; block ``B = 8`` at positions ``a..a+7``: slot 0 the
  anchor ``x_a``, slots 1..7 the mask token 255, which draft positions ``a+1..a+7``
  (``sample_from_anchor`` false); attention non-causal over context keys ``< a`` and the block,
  window ``|p - k| <= 31`` on every layer (``sliding_attention``).
- a grouped block convolution (``conv_kernel_size 2``, ``conv_group_size 16``) around the
  attention and the MLP of every layer, on block rows only, identity-initialised as
  speculators' ``GroupedDynamicCausalConv.reset_parameters``.
- the candidate selector (``selector_rank 32``, ``selector_top_k 8``), initialised
  ``N(0, 0.02)`` as speculators' ``CandidateSelector``.

Objective, per drafted slot ``j = 1..7`` with weight ``exp(-(j-1)/4)`` (slot 0 weight 0:
speculators' ``dflash_loss_decay`` without ``sample_from_anchor``), weights normalised to sum
1 and averaged over blocks as in bench/train_tiny_pair.py:

- unary: soft cross entropy of ``lm_head(z_j)`` (the target's head) toward the frozen
  target's next-byte distribution at position ``a + j - 1`` (as the DSpark drafter was
  trained);
- selector (vllm-project/speculators ``src/speculators/models/dflash2`` core.py @ 961aeaa /
  metrics.py @ 1b3d845, ``selector_training_candidates`` and ``compute_selector_loss``): the
  candidates are the drafter's own top-``k`` at slot ``j``; when the target's argmax is not
  among them it replaces the ``k``-th; hard cross entropy over the ``k`` edge scores toward
  the target's argmax, teacher forced: the predecessor is the true byte ``x_{a+j-1}`` (the
  anchor for ``j = 1``). The unary part of the score is not detached (as speculators'
  ``score_candidates``: gradients reach the backbone through it and through the gate). One
  departure, so that training scores as z-lab's runtime does for this config: the unary part
  is ``UnaryTransform(output_multiplier 1.0, final_logit_softcapping 20.0, scale_then_cap)``
  of the logit (z-lab's ``compute_logits``; speculators scores the raw logit, TensorRT-LLM
  too: docs/dflash2-reference.md section 7 row 1). ``loss = unary + 1.0 * selector``
  (``selector_loss_alpha`` 1). tests/eval/test_train_tiny_dflash2.py checks this loss against
  speculators 0.9.0's own functions (with the identity transform).

After training, held-out windows give a teacher-forced estimate of the accepted length with
and without the selector (greedy: the unary argmax path vs the selector's greedy walk from
the anchor, ``CandidateSelector.forward``), logged; ``draftsmith eval`` gives the real numbers.

Saved (``OUT/dflash2/``) in the z-lab / inco DFlash 2 layout (docs/dflash2-reference.md
section 6): ``config.json`` (``architectures [DFlash2DraftModel]``, ``model_type qwen3``,
top-level ``is_causal false``, ``dflash_config``, ``layer_types``, ``sliding_window``,
``use_sliding_window``, ``rope_parameters``) and ``model.safetensors`` (bfloat16, no prefix,
codebooks without ``.weight``); the log is ``OUT/dflash2_train_log.json``. ``OUT/dflash2``
must not exist yet.

Usage::

    PYTHONPATH=. python bench/train_tiny_dflash2.py --out DIR [--device cuda] [--seed 0]
    PYTHONPATH=. python bench/train_tiny_dflash2.py --out DIR --small    # CPU smoke run

The fixture (run once on one H200, about 3 minutes in all; needs torch, transformers,
safetensors, and no draftsmith install)::

    PYTHONPATH=. python bench/train_tiny_dflash2.py --out $OUT/pair --device cuda --drafter-seconds 120

then copy ``$OUT/pair/dflash2/`` (``config.json``, ``model.safetensors``) to
``tests/fixtures/tiny_pair/dflash2/`` and ``$OUT/pair/dflash2_train_log.json`` to
``tests/fixtures/tiny_pair/dflash2_train_log.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import shutil
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import train_tiny_pair as pair

ROOT = Path(__file__).resolve().parents[1]
TARGET_DIR = ROOT / "tests" / "fixtures" / "tiny_pair" / "target"
MASK_ID = pair.MASK_ID
DRAFT = dict(layers=3, heads=4, kv_heads=2, head_dim=32, inter=384, window=32, block=8, rope_theta=10000.0,
             eps=1e-6, target_layer_ids=[1, 3, 5], conv_kernel_size=2, conv_group_size=16, selector_rank=32,
             selector_top_k=8, output_multiplier=1.0, final_logit_softcapping=20.0, unary_order="scale_then_cap",
             gamma=4.0, selector_loss_alpha=1.0, init_std=0.02)


def host_dflash2():
    """``framework/runtime/dflash2.py``, the project's DFlash 2 math.

    Imported as usual; where the runtime package's ``__init__`` cannot be imported (it pulls
    in the compiler, hence pydantic, absent on a bare GPU machine) the file is loaded on its
    own: it needs only torch and ``framework/errors.py``.
    """
    if importlib.util.find_spec("draftsmith") is None:
        sys.path.append(str(ROOT))
    try:
        from draftsmith.framework.runtime import dflash2
        return dflash2
    except ImportError:
        pass
    import draftsmith.framework.errors  # noqa: F401  (plain module)
    name = "draftsmith.framework.runtime"
    pkg = types.ModuleType(name)
    pkg.__path__ = [str(ROOT / "framework" / "runtime")]
    sys.modules[name] = pkg
    return importlib.import_module(name + ".dflash2")


D2 = host_dflash2()


# ---- the drafter (z-lab DFlash 2; module names are the checkpoint's tensor names) ------------

class RMSNorm(nn.Module):
    """Qwen3's plain RMSNorm: ``w * x / rms(x)`` (normalised in float32)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, h: int, s: dict):
        super().__init__()
        hq, hk, d = s["heads"], s["kv_heads"], s["head_dim"]
        self.q_proj = nn.Linear(h, hq * d, bias=False)
        self.k_proj = nn.Linear(h, hk * d, bias=False)
        self.v_proj = nn.Linear(h, hk * d, bias=False)
        self.o_proj = nn.Linear(hq * d, h, bias=False)
        self.q_norm = RMSNorm(d, s["eps"])
        self.k_norm = RMSNorm(d, s["eps"])
        self.s = s

    def kv(self, y, pos):
        """``k = rope(k_norm(k_proj(y)))``, ``v = v_proj(y)`` for ``y [N, T, h]`` at ``pos [T]``."""
        n, t, _ = y.shape
        s = self.s
        k = self.k_norm(self.k_proj(y).view(n, t, s["kv_heads"], s["head_dim"]))
        return pair.rope(k, pos, s["head_dim"], s["rope_theta"]), self.v_proj(y).view(n, t, s["kv_heads"], s["head_dim"])

    def forward(self, y, qpos, c, cpos, mask):
        """Block rows ``y [N, Q, h]`` (normed, convolved) at ``qpos [Q]``; context ``c [N, T, h]``
        at ``cpos [T]`` (not convolved); ``mask [Q, T + Q]`` -> ``o_proj(attn) [N, Q, h]``."""
        s = self.s
        n, q_len, _ = y.shape
        q = self.q_norm(self.q_proj(y).view(n, q_len, s["heads"], s["head_dim"]))
        q = pair.rope(q, qpos, s["head_dim"], s["rope_theta"])
        kb, vb = self.kv(y, qpos)
        kc, vc = self.kv(c, cpos)
        rep = s["heads"] // s["kv_heads"]
        k = torch.cat([kc, kb], 1).repeat_interleave(rep, 2)
        v = torch.cat([vc, vb], 1).repeat_interleave(rep, 2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
        return self.o_proj(a.transpose(1, 2).reshape(n, q_len, -1))


class MLP(nn.Module):
    def __init__(self, h: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, h: int, s: dict):
        super().__init__()
        self.input_layernorm = RMSNorm(h, s["eps"])
        self.post_attention_layernorm = RMSNorm(h, s["eps"])
        self.self_attn = Attention(h, s)
        self.mlp = MLP(h, s["inter"])
        self.attention_conv = D2.BlockConv(h, s["conv_kernel_size"], s["conv_group_size"])
        self.mlp_conv = D2.BlockConv(h, s["conv_kernel_size"], s["conv_group_size"])
        for conv in (self.attention_conv, self.mlp_conv):  # identity: DFlash 1 at step 0
            with torch.no_grad():
                conv.base_kernel.zero_()
                conv.base_kernel[:, 0] = 1.0
                conv.kernel_projection.weight.zero_()

    def forward(self, x, qpos, c, cpos, mask):
        """``x [N, Q, h]`` block rows (``Q = A * B``, request-major) -> ``[N, Q, h]``."""
        n, q_len, h = x.shape
        b = self.self_attn.s["block"]
        rows = lambda f: (lambda r: f(r.view(n, q_len, h)).reshape(n * q_len, h))  # noqa: E731
        out = D2.layer_forward(
            x.reshape(n * q_len, h), b,
            attn=rows(lambda y: self.self_attn(y, qpos, c, cpos, mask)), mlp=self.mlp,
            norm_in=self.input_layernorm, norm_post=self.post_attention_layernorm,
            attention_conv=self.attention_conv, mlp_conv=self.mlp_conv)
        return out.view(n, q_len, h)


class DFlash2Drafter(nn.Module):
    def __init__(self, h: int, vocab: int, s: dict):
        super().__init__()
        self.s = s
        self.fc = nn.Linear(len(s["target_layer_ids"]) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, s["eps"])
        self.layers = nn.ModuleList(Layer(h, s) for _ in range(s["layers"]))
        self.norm = RMSNorm(h, s["eps"])
        unary = D2.UnaryTransform(s["output_multiplier"], s["final_logit_softcapping"], s["unary_order"])
        self.candidate_selector = D2.CandidateSelector(h, vocab, s["selector_rank"], s["selector_top_k"], unary,
                                                       D2.Chain("greedy", None))
        sel = self.candidate_selector
        for w in (sel.predecessor_codebook, sel.successor_codebook, sel.hidden_projection.weight):
            nn.init.normal_(w, std=s["init_std"])

    def forward(self, hidden, tokens, anchors, embed, lm_head):
        """``hidden [N, T, n*h]`` target layer outputs, ``tokens [N, T]``, ``anchors [A]`` ->
        ``(logits [N, A, B, V] float32, z [N, A, B, h])`` (slot 0 = anchor)."""
        n, t = tokens.shape
        b = self.s["block"]
        c = self.hidden_norm(self.fc(hidden))
        qpos = (anchors[:, None] + torch.arange(b, device=tokens.device)).reshape(-1)
        ids = torch.full((n, anchors.numel(), b), MASK_ID, device=tokens.device, dtype=torch.long)
        ids[:, :, 0] = tokens[:, anchors]
        x = F.embedding(ids.view(n, -1), embed).to(c.dtype)
        mask = pair.block_mask(anchors, t, b, self.s["window"])
        cpos = torch.arange(t, device=tokens.device)
        for layer in self.layers:
            x = layer(x, qpos, c, cpos, mask)
        z = self.norm(x)
        logits = (z @ lm_head.t().to(z.dtype)).float()
        return logits.view(n, -1, b, embed.shape[0]), z.view(n, -1, b, z.shape[-1])


# ---- the objective -----------------------------------------------------------------------------

def slot_weights(b: int, gamma: float, device) -> torch.Tensor:
    """Weights of the drafted slots ``1..b-1``: ``exp(-(j-1)/gamma)``, normalised to sum 1."""
    w = torch.exp(-torch.arange(b - 1, dtype=torch.float32, device=device) / gamma)
    return w / w.sum()


def selector_candidates(logits, target_ids, k):
    """speculators' ``selector_training_candidates``: the drafter's top-``k`` (sorted), the
    target id put at rank ``k`` where it is absent. -> ``(ids [..., k], target slot [...],
    contains_target [...])``."""
    ids, _ = D2.top_candidates(logits.detach(), k)
    hit = ids.eq(target_ids.unsqueeze(-1))
    contains = hit.any(-1)
    slot = torch.where(contains, hit.long().argmax(-1), torch.full_like(target_ids, k - 1))
    ids = ids.clone()
    ids[..., -1] = torch.where(contains, ids[..., -1], target_ids)
    return ids, slot, contains


def teacher_forced_scores(sel, logits, z, ids, prev):
    """Edge scores ``[..., k]`` of candidates ``ids [..., k]`` after the true predecessor
    ``prev [...]``: section 4's ``S`` with one position per row and the predecessor for every
    slot (``edge_scores`` with ``K = 1``, anchors = ``prev``)."""
    lead, k = ids.shape[:-1], ids.shape[-1]
    m = prev.numel()
    unary = sel.unary(logits.gather(-1, ids))
    s = D2.edge_scores(sel.predecessor_codebook, sel.successor_codebook, sel.gate(z).reshape(m, 1, -1),
                       ids.reshape(m, 1, k), unary.reshape(m, 1, k), prev.reshape(m))
    return s[:, 0, 0].reshape(*lead, k)


def unary_loss(logits, t_logits, w):
    """Soft cross entropy toward the target's distribution, ``[N, A, B-1, V]`` each, slot
    weights ``w [B-1]``, averaged over blocks."""
    ce = -(torch.softmax(t_logits, -1) * torch.log_softmax(logits, -1)).sum(-1)  # [N, A, B-1]
    return (ce.mean((0, 1)) * w).sum()


def selector_loss(sel, logits, z, target_ids, prev, w):
    """The selector's teacher-forced hard cross entropy (speculators' ``compute_selector_loss``
    with its weights normalised to sum 1 over the drafted slots): ``logits [N, A, B-1, V]``,
    ``z [N, A, B-1, h]``, ``target_ids``/``prev [N, A, B-1]``. -> ``(loss, ids [..., k],
    scores [..., k] float32, contains_target [...])``."""
    k = sel.top_k
    ids, slot, contains = selector_candidates(logits, target_ids, k)
    scores = teacher_forced_scores(sel, logits, z, ids, prev).float()
    ce = F.cross_entropy(scores.reshape(-1, k), slot.reshape(-1), reduction="none").view_as(slot)
    return (ce.mean((0, 1)) * w).sum(), ids, scores, contains


def drafted_positions(anchors: torch.Tensor, b: int) -> torch.Tensor:
    """``[A, B-1]``: slot ``j = 1..B-1`` drafts position ``a + j``; its target distribution is
    the target's at ``a + j - 1`` and its predecessor the true byte there."""
    return anchors[:, None] + torch.arange(b - 1, device=anchors.device)


def block_terms(drafter, model, tap, x, anchors, embed, head, amp):
    """One forward: drafted-slot logits, targets and selector inputs for blocks at ``anchors``."""
    s = drafter.s
    b = s["block"]
    with torch.no_grad(), amp:
        t_logits = model(input_ids=x).logits.float()
        hidden = tap.take()
    with amp:
        logits, z = drafter(hidden.to(torch.bfloat16 if x.is_cuda else torch.float32), x, anchors, embed, head)
    pos = drafted_positions(anchors, b)
    return logits[:, :, 1:], z[:, :, 1:], t_logits[:, pos], x[:, pos]  # x[:, pos]: the true predecessor bytes


def train_drafter(model, data, args, device, log):
    s = DRAFT
    torch.manual_seed(args.seed + 2)
    h = model.config.hidden_size
    drafter = DFlash2Drafter(h, model.config.vocab_size, s).to(device)
    tap = pair.LayerTap(model, s["target_layer_ids"])
    embed, head = model.model.embed_tokens.weight.detach(), model.lm_head.weight.detach()
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.drafter_lr, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(args.seed + 3)
    b, k = s["block"], s["selector_top_k"]
    w = slot_weights(b, s["gamma"], device)
    amp = pair.autocast(device)
    sel = drafter.candidate_selector

    def step(i, total):
        for grp in opt.param_groups:
            grp["lr"] = pair.cosine_lr(i, total, args.drafter_lr, 100)
        x = pair.batches(data, args.batch, args.seq, g, device)
        lo = 8
        anchors = (torch.randperm(args.seq - b - lo, generator=g)[: args.anchors] + lo).sort().values.to(device)
        logits, z, t_logits, prev = block_terms(drafter, model, tap, x, anchors, embed, head, amp)
        loss_u = unary_loss(logits, t_logits, w)
        target_ids = t_logits.argmax(-1)
        with amp:
            loss_s, ids, scores, contains = selector_loss(sel, logits, z, target_ids, prev, w)
        opt.zero_grad(set_to_none=True)
        (loss_u + s["selector_loss_alpha"] * loss_s).backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            agree = (logits.argmax(-1) == target_ids).float().mean((0, 1))
            picked = ids.gather(-1, scores.argmax(-1, keepdim=True)).squeeze(-1)
            sel_agree = ((picked == target_ids) & contains).float().mean((0, 1))
        return {"loss_unary": round(loss_u.item(), 4), "loss_selector": round(loss_s.item(), 4),
                "slot_agree": [round(a, 3) for a in agree.tolist()],
                "selector_tf_agree": [round(a, 3) for a in sel_agree.tolist()],
                f"recall_at_{k}": round(contains.float().mean().item(), 3),
                "tau_tf": round(1 + torch.cumprod(agree, 0).sum().item(), 3)}

    drafter.train()
    stats = pair.budgeted(args.drafter_seconds, args.drafter_steps, step, log, "drafter")
    drafter.eval()
    return drafter, tap, stats


@torch.no_grad()
def held_out_accepted(drafter, model, tap, data, args, device) -> dict:
    """Teacher-forced accepted length on held-out windows (``1 +`` the leading drafted slots
    equal to the target's argmax), greedy: the unary argmax path, the selector's walk from the
    anchor, and the top-``k`` oracle (every slot's target among its candidates)."""
    s = drafter.s
    b = s["block"]
    g = torch.Generator().manual_seed(args.seed + 4)
    embed, head = model.model.embed_tokens.weight.detach(), model.lm_head.weight.detach()
    amp = pair.autocast(device)
    lead = lambda ok: ok.long().cumprod(-1).sum(-1).float() + 1  # noqa: E731
    sums = {"unary": 0.0, "selector": 0.0, f"top_{s['selector_top_k']}_oracle": 0.0}
    blocks = 0
    for _ in range(args.eval_batches):
        x = pair.batches(data, args.batch, args.seq, g, device)
        anchors = (torch.randperm(args.seq - b - 8, generator=g)[: args.anchors] + 8).sort().values.to(device)
        logits, z, t_logits, _ = block_terms(drafter, model, tap, x, anchors, embed, head, amp)
        target = t_logits.argmax(-1).flatten(0, 1)  # [N*A, B-1]
        lg, zz = logits.flatten(0, 1), z.flatten(0, 1).float()
        out = drafter.candidate_selector(lg, zz, x[:, anchors].reshape(-1), None)
        ids, _ = D2.top_candidates(lg, s["selector_top_k"])
        sums["unary"] += lead(lg.argmax(-1) == target).sum().item()
        sums["selector"] += lead(out.tokens == target).sum().item()
        sums[f"top_{s['selector_top_k']}_oracle"] += lead(ids.eq(target[..., None]).any(-1)).sum().item()
        blocks += target.shape[0]
    return {"blocks": blocks, **{key: round(v / blocks, 4) for key, v in sums.items()}}


# ---- saving: the z-lab / inco DFlash 2 layout (docs/dflash2-reference.md section 6) --------------

def zlab_config(target_cfg, version: str) -> dict:
    s = DRAFT
    n = s["layers"]
    return {
        "architectures": ["DFlash2DraftModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "is_causal": False,
        "dflash_config": {
            "block_size": s["block"], "conv_group_size": s["conv_group_size"],
            "conv_kernel_size": s["conv_kernel_size"], "final_logit_softcapping": s["final_logit_softcapping"],
            "mask_token_id": MASK_ID, "output_multiplier": s["output_multiplier"],
            "selector_rank": s["selector_rank"], "selector_top_k": s["selector_top_k"],
            "target_layer_ids": list(s["target_layer_ids"]),
        },
        "dtype": "bfloat16",
        "eos_token_id": None,
        "head_dim": s["head_dim"],
        "hidden_act": "silu",
        "hidden_size": target_cfg.hidden_size,
        "initializer_range": s["init_std"],
        "intermediate_size": s["inter"],
        "layer_types": ["sliding_attention"] * n,
        "max_position_embeddings": target_cfg.max_position_embeddings,
        "max_window_layers": n,
        "model_type": "qwen3",
        "num_attention_heads": s["heads"],
        "num_hidden_layers": n,
        "num_key_value_heads": s["kv_heads"],
        "num_target_layers": target_cfg.num_hidden_layers,
        "pad_token_id": None,
        "rms_norm_eps": s["eps"],
        "rope_parameters": {"rope_theta": s["rope_theta"], "rope_type": "default"},
        "sliding_window": s["window"],
        "tie_word_embeddings": False,
        "transformers_version": version,
        "use_cache": False,
        "use_sliding_window": True,
        "vocab_size": target_cfg.vocab_size,
    }


def zlab_tensors(drafter: DFlash2Drafter) -> dict[str, torch.Tensor]:
    """The state dict as it is (module names are the layout's names), in bfloat16."""
    return {name: t.detach().float().cpu().to(torch.bfloat16).contiguous() for name, t in drafter.state_dict().items()}


def save(out: Path, drafter, target_cfg, version: str, log_data: dict) -> None:
    """``out/dflash2/{config.json, model.safetensors}`` (written beside, then renamed into place)
    and ``out/dflash2_train_log.json``."""
    from safetensors.torch import save_file

    final, tmp = out / "dflash2", out / "dflash2.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(zlab_config(target_cfg, version), indent=2) + "\n")
    save_file(zlab_tensors(drafter), str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tmp.rename(final)
    (out / "dflash2_train_log.json").write_text(json.dumps(log_data, indent=1) + "\n")


def load_target(path: Path, device):
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    model = model.to(device) if device.type == "cuda" else model.float()  # CPU: the bf16 weights, float32 math
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder (dflash2/, dflash2_train_log.json)")
    ap.add_argument("--target", type=Path, default=TARGET_DIR, help="the trained target (not retrained)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--anchors", type=int, default=48)
    ap.add_argument("--drafter-seconds", type=float, default=120)
    ap.add_argument("--drafter-steps", type=int, default=20000)
    ap.add_argument("--drafter-lr", type=float, default=2e-3)
    ap.add_argument("--eval-batches", type=int, default=8, help="held-out batches for the accepted-length estimate")
    ap.add_argument("--small", action="store_true", help="CPU smoke run: batch 2, seq 64, 8 anchors, at most 30 steps, 1 eval batch")
    args = ap.parse_args()
    if (args.out / "dflash2").exists():
        ap.error(f"{args.out / 'dflash2'}: exists; give another --out")
    if not (args.target / "config.json").is_file():
        ap.error(f"{args.target}: no config.json (the trained target of tests/fixtures/tiny_pair)")
    if args.small:
        args.batch, args.seq, args.anchors = 2, 64, 8
        args.drafter_steps, args.eval_batches = min(args.drafter_steps, 30), 1
    device = torch.device(args.device)
    t0 = time.perf_counter()

    def log(msg):
        print(msg, flush=True)

    data, held, info = pair.corpus()
    held_data = torch.frombuffer(bytearray(b"\n\n".join(held)), dtype=torch.uint8)
    log(f"corpus {info}")
    model = load_target(args.target, device)
    drafter, tap, d_stats = train_drafter(model, data, args, device, log)
    accepted = held_out_accepted(drafter, model, tap, held_data, args, device)
    log(f"held-out accepted length (teacher forced, greedy) {accepted}")
    import transformers

    weights = (args.target / "model.safetensors").read_bytes()
    log_data = {"seed": args.seed, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                "torch": torch.__version__, "transformers": transformers.__version__, "corpus": info,
                "target": {"path": str(args.target), "model_safetensors_sha256": hashlib.sha256(weights).hexdigest()},
                "recipe": {key: (str(v) if isinstance(v, Path) else v) for key, v in vars(args).items() if key != "out"},
                "drafter": DRAFT, "drafter_train": d_stats, "held_out_accepted_length_tf": accepted,
                "total_seconds": round(time.perf_counter() - t0, 1)}
    save(args.out, drafter, model.config, transformers.__version__, log_data)
    log(f"saved {args.out / 'dflash2'} in {log_data['total_seconds']} s")


if __name__ == "__main__":
    main()
