"""Train the tiny target/drafter pair shipped in ``tests/fixtures/tiny_pair`` (issue 21).

Both models read bytes (vocabulary 256, token id == byte value; 255 never occurs in UTF-8
text and is the drafter's mask token). The corpus is the Python standard library's own
``*.py`` files (``sysconfig`` ``stdlib`` path, site-/dist-packages excluded), present offline
on every machine with Python; about 2% of the files (``crc32(relative path) % 50 == 0``) are
held out and give the evaluation prompts.

1. **Target**: a ``LlamaForCausalLM`` (6 layers, hidden 128, 4/2 heads of 32, MLP 384),
   next-byte cross entropy on random 512-byte windows, AdamW, cosine schedule; saved with
   ``save_pretrained`` in bfloat16 with a byte-level tokenizer (``tokenizer.json``).
2. **Drafter**: DSpark as in docs/../shared/drafter-reference.md section 1 (3 layers, GQA
   4/2 x 32, partial NeoX rope 16/32, Gemma norms, ``swiglu_oai`` MLP 384, windowed
   *non-causal* attention with ``W = 32`` on every layer, block ``B = 7`` with
   ``sample_from_anchor``, vanilla Markov head rank 32, confidence head with Markov), fed
   the outputs of target layers ``[1, 3, 5]``. The DFlash/DSpark objective: random anchor
   positions ``a`` in each 512-byte window; the block ``[x_a, m, ..., m]`` at positions
   ``a..a+B-1`` attends to the context features of positions ``< a`` and to its own block,
   under the mask ``|p - k| <= W - 1``; slot ``j`` learns the frozen target's next-byte
   distribution at position ``a + j`` (soft cross entropy, weight ``exp(-j / 4)``), with the
   Markov head fed the true byte at ``a + j``. The confidence head learns (BCE, weight 0.1,
   on detached inputs) whether the slot's argmax is the target's argmax.
3. Saved in the MiniMax-M3.1 DSpark **source** layout (``dspark/``): the VL-shaped
   ``config.json`` of ``adapters/minimax_dspark.yaml``'s synth config with these sizes,
   tensors under ``language_model.model.dspark.``, linears MXFP8 (e4m3 + uint8
   ``weight_scale_inv``), norms as Gemma ``w``, the rest bfloat16.

Training time per phase is a budget: the first 20 steps are timed and the step count set
to fit (``--target-seconds``, ``--drafter-seconds``; ``--*-steps`` caps it); the LR schedule
follows that count. ``train_log.json`` records recipe, seed, corpus, steps, time, losses.

Usage::

    python bench/train_tiny_pair.py --out DIR [--device cuda] [--seed 0]
    python bench/train_tiny_pair.py --out DIR --small      # CPU smoke run (a few steps)
    python bench/train_tiny_pair.py --pack DIR             # write DIR/dspark from DIR/drafter_raw.safetensors
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import sysconfig
import time
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

MASK_ID = 255
TARGET = dict(vocab_size=256, hidden_size=128, intermediate_size=384, num_hidden_layers=6, num_attention_heads=4,
              num_key_value_heads=2, head_dim=32, max_position_embeddings=4096, rope_theta=10000.0,
              rms_norm_eps=1e-6, tie_word_embeddings=False)
DRAFT = dict(layers=3, heads=4, kv_heads=2, head_dim=32, rotary_dim=16, inter=384, window=32, block=7, rank=32,
             rope_theta=10000.0, eps=1e-6, target_layer_ids=[1, 3, 5], alpha=1.702, limit=7.0)
PREFIX = "language_model.model.dspark."


# ---- corpus ---------------------------------------------------------------------------------

def stdlib_files() -> tuple[Path, list[Path]]:
    """The standard library's ``*.py`` files, sorted; ``site-packages`` / ``dist-packages`` folders are
    pruned from the walk, not listed and filtered (they can hold ten times the standard library)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("site-packages", "dist-packages")]
        found += [Path(folder, n) for n in names if n.endswith(".py")]
    return root, sorted(p for p in found if p.is_file())


def held_out(rel: str) -> bool:
    return zlib.crc32(rel.encode()) % 50 == 0


def corpus() -> tuple[torch.Tensor, list[bytes], dict]:
    """Training bytes (uint8, files joined by blank lines) and the held-out files' bytes."""
    root, files = stdlib_files()
    train, held = [], []
    for p in files:
        data = p.read_bytes()
        (held if held_out(str(p.relative_to(root))) else train).append(data)
    blob = b"\n\n".join(train)
    assert MASK_ID not in blob, "byte 255 in the corpus (it is the mask token)"
    info = {"stdlib": str(root), "python": sys.version.split()[0], "train_files": len(train),
            "held_out_files": len(held), "train_bytes": len(blob)}
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8), held, info


def make_prompts(held: list[bytes], n: int, seed: int) -> list[str]:
    """``n`` prompts from held-out files: runs of whole ASCII lines, 96..200 bytes, no blank start."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in torch.randperm(len(held), generator=g).tolist():
        lines = held[i].split(b"\n")
        if len(lines) < 40:
            continue
        start = int(torch.randint(0, len(lines) - 30, (1,), generator=g))
        text = b""
        for line in lines[start:]:
            if len(text) + len(line) + 1 > 200:
                break
            text += line + b"\n"
        if len(text) >= 96 and text.isascii() and text.strip() and not text.startswith(b"\n"):
            out.append(text.decode())
        if len(out) == n:
            break
    return out


def batches(data: torch.Tensor, n: int, t: int, g: torch.Generator, device) -> torch.Tensor:
    starts = torch.randint(0, data.numel() - t - 1, (n,), generator=g)
    idx = starts[:, None] + torch.arange(t)
    return data[idx].to(device=device, dtype=torch.long)


# ---- the drafter (drafter reference, section 1) --------------------------------------------

class GemmaNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


def rope(x: torch.Tensor, pos: torch.Tensor, rotary: int, theta: float) -> torch.Tensor:
    """NeoX halves on the first ``rotary`` dims of ``x [N, T, H, D]`` at ``pos [T]``."""
    inv = theta ** (-(torch.arange(0, rotary, 2, dtype=torch.float64, device=x.device) / rotary))
    ang = pos.to(torch.float64)[:, None] * inv
    cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
    half = rotary // 2
    xf = x.float()
    x1, x2, rest = xf[..., :half], xf[..., half:rotary], xf[..., rotary:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1).to(x.dtype)


def block_mask(anchors: torch.Tensor, t: int, b: int, w: int) -> torch.Tensor:
    """``[A*B, t + A*B]`` bool for blocks of ``b`` slots at ``anchors [A]`` over ``t`` context
    positions: context keys ``k < a`` and block keys of the same block, all within
    ``|p - k| <= w - 1`` (non-causal window)."""
    qpos = (anchors[:, None] + torch.arange(b, device=anchors.device)).reshape(-1)
    qa = anchors.repeat_interleave(b)
    cpos = torch.arange(t, device=anchors.device)
    ctx = (cpos[None] < qa[:, None]) & ((qpos[:, None] - cpos[None]).abs() <= w - 1)
    blk = (qa[:, None] == qa[None]) & ((qpos[:, None] - qpos[None]).abs() <= w - 1)
    return torch.cat([ctx, blk], 1)


class Layer(nn.Module):
    def __init__(self, h: int, s: dict):
        super().__init__()
        hq, hk, d = s["heads"], s["kv_heads"], s["head_dim"]
        self.input_layernorm = GemmaNorm(h, s["eps"])
        self.post_attention_layernorm = GemmaNorm(h, s["eps"])
        self.q_proj = nn.Linear(h, hq * d, bias=False)
        self.k_proj = nn.Linear(h, hk * d, bias=False)
        self.v_proj = nn.Linear(h, hk * d, bias=False)
        self.o_proj = nn.Linear(hq * d, h, bias=False)
        self.q_norm = GemmaNorm(d, s["eps"])
        self.k_norm = GemmaNorm(d, s["eps"])
        self.gate_proj = nn.Linear(h, s["inter"], bias=False)
        self.up_proj = nn.Linear(h, s["inter"], bias=False)
        self.down_proj = nn.Linear(s["inter"], h, bias=False)
        self.s = s

    def kv(self, y, pos):
        n, t, _ = y.shape
        s = self.s
        k = rope(self.k_norm(self.k_proj(y).view(n, t, s["kv_heads"], s["head_dim"])), pos, s["rotary_dim"],
                 s["rope_theta"])
        return k, self.v_proj(y).view(n, t, s["kv_heads"], s["head_dim"])

    def forward(self, x, qpos, c, cpos, mask):
        s = self.s
        n, q_len, _ = x.shape
        y = self.input_layernorm(x)
        q = rope(self.q_norm(self.q_proj(y).view(n, q_len, s["heads"], s["head_dim"])), qpos, s["rotary_dim"],
                 s["rope_theta"])
        kb, vb = self.kv(y, qpos)
        kc, vc = self.kv(c, cpos)
        k, v = torch.cat([kc, kb], 1), torch.cat([vc, vb], 1)
        rep = s["heads"] // s["kv_heads"]
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
        x = x + self.o_proj(a.transpose(1, 2).reshape(n, q_len, -1))
        y = self.post_attention_layernorm(x)
        g = self.gate_proj(y).float().clamp(max=s["limit"])
        u = self.up_proj(y).float().clamp(-s["limit"], s["limit"])
        return x + self.down_proj((g * torch.sigmoid(s["alpha"] * g) * (u + 1.0)).to(y.dtype))


class Drafter(nn.Module):
    def __init__(self, h: int, vocab: int, s: dict):
        super().__init__()
        self.s = s
        self.fc = nn.Linear(len(s["target_layer_ids"]) * h, h, bias=False)
        self.hidden_norm = GemmaNorm(h, s["eps"])
        self.layers = nn.ModuleList(Layer(h, s) for _ in range(s["layers"]))
        self.final_norm = GemmaNorm(h, s["eps"])
        self.markov_w1 = nn.Parameter(torch.randn(vocab, s["rank"]) * 0.02)
        self.markov_w2 = nn.Parameter(torch.randn(vocab, s["rank"]) * 0.02)
        self.confidence = nn.Linear(h + s["rank"], 1)

    def mask(self, anchors: torch.Tensor, t: int) -> torch.Tensor:
        return block_mask(anchors, t, self.s["block"], self.s["window"])

    def forward(self, hidden, tokens, anchors, embed, lm_head):
        """``hidden [N, T, n*h]`` target layer outputs, ``tokens [N, T]``, ``anchors [A]`` ->
        ``(logits [N, A, B, V] float32, z [N, A, B, h], prev [N, A, B])``."""
        n, t = tokens.shape
        b = self.s["block"]
        c = self.hidden_norm(self.fc(hidden))
        offs = torch.arange(b, device=tokens.device)
        qpos = (anchors[:, None] + offs).reshape(-1)
        ids = torch.full((n, anchors.numel(), b), MASK_ID, device=tokens.device, dtype=torch.long)
        ids[:, :, 0] = tokens[:, anchors]
        x = F.embedding(ids.view(n, -1), embed).to(c.dtype)
        mask = self.mask(anchors, t)
        cpos = torch.arange(t, device=tokens.device)
        for layer in self.layers:
            x = layer(x, qpos, c, cpos, mask)
        z = self.final_norm(x)
        prev = tokens[:, anchors[:, None] + offs]  # true byte at a + j
        logits = (z @ lm_head.t().to(z.dtype)).float() + (F.embedding(prev, self.markov_w1) @ self.markov_w2.t()).view(
            n, -1, embed.shape[0]).float()
        return logits.view(n, -1, b, embed.shape[0]), z.view(n, -1, b, z.shape[-1]), prev


# ---- training ---------------------------------------------------------------------------------

class LayerTap:
    """Outputs of the target's decoder layers ``ids`` (forward hooks), concatenated in order."""

    def __init__(self, model, ids):
        self.ids, self.out = list(ids), {}
        for i in self.ids:
            model.model.layers[i].register_forward_hook(self._hook(i))

    def _hook(self, i):
        def hook(_mod, _inp, out):
            self.out[i] = out[0] if isinstance(out, tuple) else out
        return hook

    def take(self) -> torch.Tensor:
        h = torch.cat([self.out[i] for i in self.ids], -1)
        self.out = {}
        return h


def autocast(device: torch.device):
    """bf16 autocast on CUDA; a disabled context on CPU (float32 there)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def cosine_lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def budgeted(seconds: float, cap: int, step_fn, log, name: str) -> dict:
    """Run ``step_fn(step, total)``; steps 10..29 are timed (after warm-up) and the step count
    set to ``min(cap, seconds / step_time)`` (the schedule follows the final count)."""
    t0 = time.perf_counter()
    total = cap
    losses = []
    step = 0
    t_probe = None
    while step < total:
        loss = step_fn(step, total)
        if step % 100 == 0 or step == total - 1:
            losses.append({"step": step, **loss})
            log(f"{name} step {step}/{total} {loss}")
        step += 1
        if step in (10, 30) and step < total:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if step == 10:
                t_probe = time.perf_counter()
            else:
                per = (time.perf_counter() - t_probe) / 20
                total = max(30, min(cap, int((seconds - (time.perf_counter() - t0)) / per) + 30))
    return {"steps": total, "seconds": round(time.perf_counter() - t0, 1), "losses": losses}


def train_target(data, args, device, log):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(LlamaConfig(**TARGET, bos_token_id=None, eos_token_id=None, pad_token_id=None)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.target_lr, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(args.seed + 1)
    amp = autocast(device)

    def step(i, total):
        for grp in opt.param_groups:
            grp["lr"] = cosine_lr(i, total, args.target_lr, 100)
        x = batches(data, args.batch, args.seq + 1, g, device)
        with amp:
            logits = model(input_ids=x[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return {"loss": round(loss.item(), 4), "bits_per_byte": round(loss.item() / math.log(2), 4)}

    model.train()
    stats = budgeted(args.target_seconds, args.target_steps, step, log, "target")
    model.eval()
    return model, stats


def train_drafter(model, data, args, device, log):
    s = DRAFT
    torch.manual_seed(args.seed + 2)
    h = TARGET["hidden_size"]
    drafter = Drafter(h, 256, s).to(device)
    tap = LayerTap(model, s["target_layer_ids"])
    embed = model.model.embed_tokens.weight.detach()
    head = model.lm_head.weight.detach()
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.drafter_lr, betas=(0.9, 0.95), weight_decay=0.01)
    g = torch.Generator().manual_seed(args.seed + 3)
    b = s["block"]
    weights = torch.exp(-torch.arange(b, dtype=torch.float32, device=device) / 4.0)
    weights = weights / weights.sum()
    amp = autocast(device)

    def step(i, total):
        for grp in opt.param_groups:
            grp["lr"] = cosine_lr(i, total, args.drafter_lr, 100)
        x = batches(data, args.batch, args.seq, g, device)
        with torch.no_grad(), amp:
            t_logits = model(input_ids=x).logits.float()
            hidden = tap.take()
        lo = 8
        anchors = (torch.randperm(args.seq - b - lo, generator=g)[: args.anchors] + lo).sort().values.to(device)
        with amp:
            logits, z, prev = drafter(hidden.to(torch.bfloat16 if device.type == "cuda" else torch.float32), x,
                                      anchors, embed, head)
        pos = anchors[:, None] + torch.arange(b, device=device)  # slot j predicts position a + j + 1
        p_t = torch.softmax(t_logits[:, pos], -1)  # [N, A, B, V]
        ce = -(p_t * torch.log_softmax(logits, -1)).sum(-1)  # [N, A, B]
        loss = (ce.mean((0, 1)) * weights).sum()
        agree = (logits.argmax(-1) == t_logits[:, pos].argmax(-1)).float()
        conf_in = torch.cat([z.detach().float(), F.embedding(prev, drafter.markov_w1).detach().float()], -1)
        conf_logit = F.linear(conf_in, drafter.confidence.weight.float(), drafter.confidence.bias.float()).squeeze(-1)
        loss_c = F.binary_cross_entropy_with_logits(conf_logit, agree)
        opt.zero_grad(set_to_none=True)
        (loss + 0.1 * loss_c).backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        acc = agree.mean((0, 1))
        # expected acceptance length if slots were independent of each other's errors (teacher forced)
        tau = 1 + torch.cumprod(acc, 0).sum().item()
        return {"loss": round(loss.item(), 4), "conf_bce": round(loss_c.item(), 4),
                "slot_agree": [round(a, 3) for a in acc.tolist()], "tau_tf": round(tau, 3)}

    drafter.train()
    stats = budgeted(args.drafter_seconds, args.drafter_steps, step, log, "drafter")
    return drafter, stats


# ---- saving -----------------------------------------------------------------------------------

def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    b2u = bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def minimax_config(h: int) -> dict:
    """The VL-shaped MiniMax DSpark config (adapters/minimax_dspark.yaml synth config, our sizes)."""
    s = DRAFT
    n = s["layers"]
    return {
        "architectures": ["DSparkMiniMaxDraftModel"],
        "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "mxfp8", "weight_block_size": [1, 32]},
        "dspark_config": {"hybrid_context_fusion": False},
        "text_config": {
            "model_type": "minimax_m3", "num_hidden_layers": n, "hidden_size": h,
            "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
            "rotary_dim": s["rotary_dim"], "rope_theta": s["rope_theta"], "rms_norm_eps": s["eps"],
            "vocab_size": 256, "dense_intermediate_size": s["inter"], "dspark_ffn_hidden_size": s["inter"],
            "dspark_use_dense_ffn": True, "dspark_hybrid_context_fusion": False, "hidden_act": "swigluoai",
            "swiglu_alpha": s["alpha"], "swiglu_limit": s["limit"], "use_gemma_norm": True,
            "qk_norm_type": "per_head", "sliding_window": s["window"], "layer_types": ["sliding_attention"] * n,
            "moe_layer_freq": [0] * n, "sparse_attention_config": None, "dspark_block_size": s["block"],
            "dspark_noise_token_id": MASK_ID, "dspark_markov_rank": s["rank"], "dspark_markov_head_type": "vanilla",
            "dspark_target_layer_ids": s["target_layer_ids"], "enable_confidence_head": True,
            "confidence_head_with_markov": True, "torch_dtype": "bfloat16",
        },
    }


def minimax_tensors(drafter: Drafter) -> dict[str, torch.Tensor]:
    from draftsmith.transforms.mxfp8 import quantize

    bf = lambda t: t.detach().float().cpu().to(torch.bfloat16).contiguous()  # noqa: E731
    out = {
        PREFIX + "fc.weight": bf(drafter.fc.weight),
        PREFIX + "hidden_norm.weight": bf(drafter.hidden_norm.weight),
        PREFIX + "final_norm.weight": bf(drafter.final_norm.weight),
        PREFIX + "markov_head.markov_w1.weight": bf(drafter.markov_w1),
        PREFIX + "markov_head.markov_w2.weight": bf(drafter.markov_w2),
        PREFIX + "confidence_head.proj.weight": bf(drafter.confidence.weight),
        PREFIX + "confidence_head.proj.bias": bf(drafter.confidence.bias),
    }
    for i, layer in enumerate(drafter.layers):
        p = f"{PREFIX}layers.{i}.decoder_layer."
        for name in ("input_layernorm", "post_attention_layernorm"):
            out[p + name + ".weight"] = bf(getattr(layer, name).weight)
        for name in ("q_norm", "k_norm"):
            out[p + "self_attn." + name + ".weight"] = bf(getattr(layer, name).weight)
        for group, names in (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")),
                             ("mlp", ("gate_proj", "up_proj", "down_proj"))):
            for name in names:
                q, scale = quantize(getattr(layer, name).weight.detach().float().cpu(), torch.uint8)
                out[f"{p}{group}.{name}.weight"] = q.contiguous()
                out[f"{p}{group}.{name}.weight_scale_inv"] = scale.contiguous()
    return out


def pack(out: Path, drafter: Drafter) -> None:
    """Write ``out/dspark`` (MiniMax DSpark source layout) from a trained drafter."""
    from safetensors.torch import save_file

    (out / "dspark").mkdir(parents=True, exist_ok=True)
    (out / "dspark" / "config.json").write_text(json.dumps(minimax_config(TARGET["hidden_size"]), indent=2) + "\n")
    save_file(minimax_tensors(drafter), str(out / "dspark" / "model.safetensors"), metadata={"format": "pt"})


def save(out: Path, model, drafter, prompts, log_data):
    """``target/``, ``drafter_raw.safetensors`` (float32 training state), ``prompts.jsonl``,
    ``train_log.json``, and ``dspark/`` when draftsmith is importable (else run ``--pack``)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).cpu().save_pretrained(out / "target")
    byte_tokenizer().save_pretrained(out / "target")
    save_file({k: v.detach().float().cpu().contiguous() for k, v in drafter.state_dict().items()},
              str(out / "drafter_raw.safetensors"))
    try:
        pack(out, drafter)
    except ImportError as e:  # the GPU machine has no pydantic: pack here later with --pack
        print(f"not packed ({e}); run: python bench/train_tiny_pair.py --pack {out}")
    with open(out / "prompts.jsonl", "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    (out / "train_log.json").write_text(json.dumps(log_data, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="output folder (target/, dspark/, prompts.jsonl, train_log.json)")
    ap.add_argument("--pack", type=Path, help="only write DIR/dspark from DIR/drafter_raw.safetensors")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--anchors", type=int, default=48)
    ap.add_argument("--target-seconds", type=float, default=110)
    ap.add_argument("--target-steps", type=int, default=20000)
    ap.add_argument("--target-lr", type=float, default=3e-3)
    ap.add_argument("--drafter-seconds", type=float, default=130)
    ap.add_argument("--drafter-steps", type=int, default=20000)
    ap.add_argument("--drafter-lr", type=float, default=2e-3)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--small", action="store_true",
                    help="CPU smoke run: batch 2, seq 64, 8 anchors, at most 30 + 30 steps (fewer with --*-steps)")
    args = ap.parse_args()
    if args.pack:
        from safetensors.torch import load_file

        drafter = Drafter(TARGET["hidden_size"], 256, DRAFT)
        drafter.load_state_dict(load_file(str(args.pack / "drafter_raw.safetensors")))
        pack(args.pack, drafter)
        print(f"wrote {args.pack / 'dspark'}")
        return
    if args.out is None:
        ap.error("--out is required")
    if args.small:
        args.batch, args.seq, args.anchors = 2, 64, 8
        args.target_steps, args.drafter_steps = min(args.target_steps, 30), min(args.drafter_steps, 30)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    lines = []

    def log(msg):
        lines.append(msg)
        print(msg, flush=True)

    data, held, info = corpus()
    log(f"corpus {info}")
    model, t_stats = train_target(data, args, device, log)
    for p in model.parameters():
        p.requires_grad_(False)
    model = model.to(torch.bfloat16) if device.type == "cuda" else model.to(torch.bfloat16).float()
    drafter, d_stats = train_drafter(model, data, args, device, log)
    prompts = make_prompts(held, args.prompts, args.seed)
    log_data = {"seed": args.seed, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                "torch": torch.__version__, "corpus": info,
                "recipe": {k: v for k, v in vars(args).items() if k not in ("out",)},
                "target_config": TARGET, "drafter": DRAFT, "target": t_stats, "drafter_train": d_stats,
                "total_seconds": round(time.perf_counter() - t0, 1)}
    try:
        import transformers
        log_data["transformers"] = transformers.__version__
    except ImportError:
        pass
    save(args.out, model, drafter, prompts, log_data)
    log(f"saved to {args.out} in {log_data['total_seconds']} s")


if __name__ == "__main__":
    main()
