"""Stand-in for llama.cpp's DFlash 2 arithmetic (tests only; no llama.cpp code copied).

llama.cpp is C++ over ggml, so nothing here can run its code; the arithmetic of the pieces
that fix DFlash 2's math is transcribed from its public source, read for facts:

    [A] repository ggml-org/llama.cpp, path src/models/dflash.cpp,
        commit 01b78a1567a9ff908b0ccc0bccd22a4e77b9688e
        - llama_model_dflash::load_arch_hparams   -> load_hparams
        - llama_model_dflash::load_arch_tensors   -> check_dflash2 (the DFlash 2 refusals)
        - build_dflash2_conv (static)             -> block_conv
        - llama_model_dflash::graph<false>        -> conv_wrap, layer (where the four
          convolutions sit, residual order), logit_transform (the DFlash 2-only output
          transform of the lm_head logits); no input embedding scale (inpL = get_rows(tok_embd))
    [B] repository ggml-org/llama.cpp, path common/speculative.cpp, same commit
        - common_speculative_impl_draft_dflash constructor -> clamp_draft (block_size default,
          sample_from_anchor default, n_max clamp)
        - ...::draft (the noise block)                     -> noise_block
        - ...::build_dflash2_selector_cpu                  -> top_k_scan, gate
        - ...::draft (the is_dflash2 branch)               -> walk_cpu
    [C] the earlier in-graph selector: src/models/dflash.cpp as stored under index ids
        57834642706 / 60348582428 (repository and commit not named by the index), function
        build_dflash2_selector -> lattice (the same lattice, position by position, in the fork
        LaurentZuijdwijk/llama.cpp @ 3466b48806f9fefe1162aa4053ffebcfcabe83aa,
        build_post_sampling); its reader is
        ggml-org/llama.cpp common/speculative.cpp @ 001d906a6d86e2490e394361e7cc6f478b100088,
        ...::draft (is_dflash2 branch) -> walk_lattice
    [D] repository ggml-org/llama.cpp, path src/llama-hparams.h,
        commit 027d57567f8506fca217b6c2a840b461369cf950 (a version without the dflash_* fields):
        the defaults f_logit_scale = 0 and f_final_logit_softcapping = 30 -> load_hparams

ggml ops have no Python analogue; their arithmetic is restated with torch in the caller's dtype
(llama.cpp computes in float32: f32 activations, codebooks dequantized to f32 with the GGUF
type's ``to_float``, sequential float sums on the CPU path). ``ggml_top_k`` is documented in
ggml.h as returning "indices in no particular order"; :func:`lattice` therefore takes the
candidate order from its caller. Nothing here exists that the real code lacks. Not read, and so
not played: the DFlash 2 converter (conversion/qwen.py versions read register DFlashDraftModel
only) and the defaults of the dflash_* hparams (absent in [D]): such an absent key is ``None``.
"""

from __future__ import annotations

import math

import torch

# GGUF keys. [B] reads "dflash.block_size", "dflash.sample_from_anchor", "dflash.attention.causal"
# by these literal strings; the others are the LLM_KV_* names [A] reads, with arch "dflash", spelled
# as gguf-py's Keys.LLM has them in a fork (LaurentZuijdwijk/llama.cpp, gguf-py/gguf/constants.py,
# commit b57d51ded3ebc6a2bd0225297f2c6544ae2989fb); llama-arch.cpp's table itself was not read.
KEYS = {
    "f_logit_scale": "dflash.logit_scale",                          # LLM_KV_LOGIT_SCALE
    "f_final_logit_softcapping": "dflash.final_logit_softcapping",  # LLM_KV_FINAL_LOGIT_SOFTCAPPING
    "dflash_block_size": "dflash.block_size",
    "dflash_conv_kernel_size": "dflash.conv_kernel_size",
    "dflash_conv_group_size": "dflash.conv_group_size",
    "dflash_selector_rank": "dflash.selector_rank",
    "dflash_selector_top_k": "dflash.selector_top_k",
    "target_layer_ids": "dflash.target_layers",                    # LLM_KV_TARGET_LAYERS
}


def load_hparams(metadata: dict) -> dict:
    """[A] ``load_arch_hparams``: every DFlash key optional; the soft cap is set to 0 before it
    is read (absent -> 0, no cap; [D]'s default would be 30); the logit scale absent -> [D]'s
    default 0 (no scale in the graph); the dflash_* keys absent -> ``None`` (default not read).
    ``target_layers`` absent -> RuntimeError, as the loader throws. No embedding-scale key."""
    hp = {name: metadata.get(key) for name, key in KEYS.items()}
    hp["f_logit_scale"] = float(metadata.get(KEYS["f_logit_scale"], 0.0))
    hp["f_final_logit_softcapping"] = float(metadata.get(KEYS["f_final_logit_softcapping"], 0.0))
    if hp["target_layer_ids"] is None:
        raise RuntimeError("DFlash model requires 'target_layers' in GGUF metadata")
    return hp


def check_dflash2(hp: dict, n_embd: int) -> None:
    """[A] ``load_arch_tensors`` when ``selector_hidden.weight`` is present: rank, block size,
    top-k, kernel and group all ``> 0``; group divides ``n_embd``; ``n_embd >= k * (k + 1)``.
    Tensor shapes (ggml ne order): conv base ``{n_embd, T, 2}``, conv proj ``{n_embd, 2*T*G}``,
    codebooks ``{rank, n_vocab}``, selector_hidden ``{n_embd, rank}``: the HF shapes reversed."""
    names = ("dflash_selector_rank", "dflash_block_size", "dflash_selector_top_k",
             "dflash_conv_kernel_size", "dflash_conv_group_size")
    if any(hp[n] is None or hp[n] <= 0 for n in names):
        raise RuntimeError("DFlash2 model is missing conv/selector metadata")
    if n_embd % hp["dflash_conv_group_size"] != 0:
        raise RuntimeError("DFlash2 hidden size must be divisible by conv_group_size")
    k = hp["dflash_selector_top_k"]
    if n_embd < k * (k + 1):
        raise RuntimeError("DFlash2 hidden size is too small for the selector lattice")


def block_conv(hidden, dynamic, base, side: int, n_blocks: int, kernel: int, group_size: int):
    """[A] ``build_dflash2_conv``. ``hidden`` ``[N, h]`` (block-major rows, ``N = n_blocks * B``,
    ``B = N / n_blocks`` the runtime block); ``dynamic`` ``[N, 2*T*G]`` (``proj(input)``, read as
    ne ``{G, T, 2, N}``: element ``side*T*G + tap*G + group``); ``base`` ``[2, T, h]`` (ne
    ``{h, T, 2}``). weight[tap, row, c] = coeff[row, side, tap, c // g] + base[side, tap, c];
    the result sums, tap 0 first, weight[tap] times the rows shifted ``tap`` slots down inside
    each block with zero fill."""
    n, h = hidden.shape
    groups = h // group_size
    block = n // n_blocks
    coeffs = dynamic.reshape(n, 2, kernel, groups)[:, side]              # [N, T, G]
    weight_all = coeffs.repeat_interleave(group_size, dim=-1) + base[side]  # [N, T, h]
    blocks = hidden.reshape(n_blocks, block, h)
    result = None
    for tap in range(kernel):
        if tap == 0:
            values = blocks
        else:
            zeros = blocks.new_zeros(n_blocks, min(tap, block), h)
            values = torch.cat((zeros, blocks[:, :block - tap]), 1) if tap < block else zeros
        term = weight_all[:, tap] * values.reshape(n, h)
        result = term if result is None else result + term
    return result


def conv_wrap(sublayer, x, proj_weight, base, n_blocks: int, kernel: int, group_size: int):
    """[A] ``graph<false>``: ``dynamic = proj(x)`` of the sublayer's *input*; side 0 on the
    input, side 1 on the sublayer's output with the same ``dynamic``."""
    dynamic = x @ proj_weight.T
    inner = block_conv(x, dynamic, base, 0, n_blocks, kernel, group_size)
    return block_conv(sublayer(inner), dynamic, base, 1, n_blocks, kernel, group_size)


def layer(x, attn, mlp, attn_norm, ffn_norm, attn_conv, ffn_conv, n_blocks, kernel, group_size):
    """[A] ``graph<false>`` per layer: ``ffn_inp = conv(attn(...)) + inpL``; ``l_out =
    conv(ffn(...)) + ffn_inp``. ``*_conv`` are ``(proj_weight, base)``."""
    ffn_inp = conv_wrap(attn, attn_norm(x), *attn_conv, n_blocks, kernel, group_size) + x
    return conv_wrap(mlp, ffn_norm(ffn_inp), *ffn_conv, n_blocks, kernel, group_size) + ffn_inp


def logit_transform(logits, hp: dict):
    """[A] ``graph<false>``, DFlash 2 only: ``l *= f_logit_scale`` when it is nonzero,
    then, when ``f_final_logit_softcapping > 0``: ``cap * tanh(l * (1/cap))`` (ggml_scale by the
    reciprocal, ggml_tanh, ggml_scale by cap). Scale first, then cap."""
    out = logits
    if hp["f_logit_scale"] != 0.0:
        out = out * hp["f_logit_scale"]
    cap = hp["f_final_logit_softcapping"]
    if cap > 0.0:
        out = torch.tanh(out * (1.0 / cap)) * cap
    return out


def clamp_draft(n_max: int, n_min: int, metadata: dict, is_dspark: bool = False):
    """[B] constructor: ``block_size`` from "dflash.block_size" (absent -> 16);
    ``sample_from_anchor`` from "dflash.sample_from_anchor" (absent -> true); drafts at most
    ``block_size`` (DSpark with sample_from_anchor) else ``block_size - 1``.
    Returns ``(n_max, n_min, block_size, sample_from_anchor)``."""
    block_size = int(metadata.get("dflash.block_size", 16))
    sample_from_anchor = str(metadata.get("dflash.sample_from_anchor", "true")) == "true"
    n_draft_max = block_size if (is_dspark and sample_from_anchor) else block_size - 1
    return min(n_max, n_draft_max), min(n_min, n_draft_max), block_size, sample_from_anchor


def noise_block(id_last: int, mask_token_id: int, n_max: int, is_dspark: bool,
                sample_from_anchor: bool) -> list[int]:
    """[B] ``draft``: ``n_max`` rows plus the anchor unless anchor-first DSpark; row 0 is the
    last accepted token, the rest the mask token. DFlash 2 then reads rows ``1..`` (slots 1..K)."""
    n_block_tokens = n_max + (0 if (is_dspark and sample_from_anchor) else 1)
    return [id_last if i == 0 else mask_token_id for i in range(n_block_tokens)]


def top_k_scan(logits_row, top_k: int):
    """[B] ``build_dflash2_selector_cpu``: one scan keeping the ``top_k`` largest, descending;
    a value enters only if strictly greater than the current last, and moves up only past
    strictly smaller ones (an equal later id stays behind). Starts from ids 0 and values -inf."""
    ids = [0] * top_k
    vals = [-math.inf] * top_k
    for t in range(logits_row.shape[0]):
        v = float(logits_row[t])
        if v <= vals[top_k - 1]:
            continue
        pos = top_k - 1
        while pos > 0 and v > vals[pos - 1]:
            vals[pos] = vals[pos - 1]
            ids[pos] = ids[pos - 1]
            pos -= 1
        vals[pos] = v
        ids[pos] = t
    return torch.tensor(ids, dtype=torch.long), torch.tensor(vals, dtype=logits_row.dtype)


def gate(sel_hidden, hidden_row):
    """[B] ``build_dflash2_selector_cpu``: ``gate[k] = sum_d sel_hidden[k, d] * embd[d]``
    (``sel_hidden`` in HF order ``[rank, n_embd]``; ``embd`` the decoder's final-normed row)."""
    return sel_hidden @ hidden_row


def walk_cpu(cand, unary, gates, anchor: int, sel_prev, sel_next, p_min: float = 0.0,
             n_min: int = 0):
    """[B] ``draft``, is_dflash2: block positions ``i = 1..K`` (``cand``/``unary`` ``[K+1, k]``
    and ``gates`` ``[K+1, r]`` of the whole block, row 0 the anchor's, unused). Predecessor id:
    the anchor at ``i = 1``, else ``cand[i-1][predecessor]``; scores[j] = unary[i, j] +
    sum_r next[cand[i, j], r] * prev[pred_id, r] * gate[i, r]; predecessor = first maximum.
    With ``p_min > 0`` it stops when ``1 / sum_k exp(s_k - s_max) < p_min``; a draft shorter than
    ``n_min`` is dropped. Returns ``(tokens, score rows)``: llama.cpp keeps the tokens only."""
    tokens, rows = [], []
    predecessor = 0
    for i in range(1, cand.shape[0]):
        pred_id = anchor if i == 1 else int(cand[i - 1, predecessor])
        scores = unary[i] + (sel_next[cand[i]] * sel_prev[pred_id] * gates[i]).sum(-1)
        predecessor = int(torch.argmax(scores))  # std::max_element: first maximum
        if p_min > 0.0:
            total = float(torch.exp(scores - scores[predecessor]).sum())
            if 1.0 / total < p_min:
                break
        rows.append(scores)
        tokens.append(int(cand[i, predecessor]))
    if len(tokens) < n_min:
        tokens, rows = [], []
    return tokens, rows


def lattice(cand, unary, gates, anchor: int, sel_prev, sel_next, n_embd: int, block_size: int):
    """[C] ``build_dflash2_selector`` for one block: ``block_size`` rows of ``n_embd`` floats
    (``block_size = min(tokens per block, dflash.block_size)``). Row 0 zeros; row ``i >= 1``:
    the ``k`` candidate ids (as floats), then ``k*k`` scores at ``p*k + c`` (ggml_mul_mat of the
    successor rows by ``prev[pred] * gate``: ``score[p, c] = sum_r next[cand[i, c], r] *
    (prev[pred_p, r] * gate[i, r])``), plus ``unary[i, c]``; zero padded. Row 1's predecessor is
    the anchor (one row, repeated ``k`` times); row ``i >= 2``'s are ``cand[i-1]``. ``cand`` is
    taken in the caller's order (``ggml_top_k``: no particular order)."""
    k = cand.shape[1]
    out = torch.zeros(block_size, n_embd, dtype=unary.dtype)
    for i in range(1, block_size):
        preds = [anchor] * k if i == 1 else [int(p) for p in cand[i - 1]]
        cond = sel_prev[preds] * gates[i]                    # [k (pred), r]
        score = cond @ sel_next[cand[i]].T + unary[i]        # [pred, cand]
        out[i, :k] = cand[i].to(unary.dtype)
        out[i, k:k + k * k] = score.reshape(-1)
    return out


def walk_lattice(rows, top_k: int, p_min: float = 0.0, n_min: int = 0):
    """[C]'s reader ([B] @ 001d906a ``draft``, is_dflash2): for ``i = 1..``: scores =
    ``row[k + predecessor*k : ...]``, predecessor = first maximum, p_min stop as in
    :func:`walk_cpu`, token = ``row[predecessor]``; shorter than ``n_min`` -> dropped."""
    tokens = []
    predecessor = 0
    for i in range(1, rows.shape[0]):
        row = rows[i]
        scores = row[top_k + predecessor * top_k: top_k + (predecessor + 1) * top_k]
        predecessor = int(torch.argmax(scores))
        if p_min > 0.0:
            total = float(torch.exp(scores - scores[predecessor]).sum())
            if 1.0 / total < p_min:
                break
        tokens.append(int(row[predecessor]))
    if len(tokens) < n_min:
        tokens = []
    return tokens
