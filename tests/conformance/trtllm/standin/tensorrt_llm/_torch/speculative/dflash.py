"""Stand-in of ``tensorrt_llm._torch.speculative.dflash`` (the worker's block-draft step)."""

import torch


def dflash_draft_slot_ids(num_gens, block_size, num_draft_tokens, shift_label, device="cpu"):
    """Reproduces amukkara/TensorRT-LLM, _torch/speculative/dflash.py @ d70a2287,
    ``dflash_draft_slot_ids``: per request, slots ``0..K-1`` under ``shift_label``, else ``1..K``."""
    bases = torch.arange(num_gens, device=device) * block_size
    first = 0 if shift_label else 1
    return (bases[:, None] + first + torch.arange(num_draft_tokens, device=device)[None, :]).flatten()


def markov_chain_logits(base_logits, first_prev, w1, w2):
    """The vanilla Markov refinement the worker applies (``apply_markov_chain_logits`` ->
    ``dspark_markov_chain_logits``): row ``j`` gets ``w2 @ w1[prev_j]``, ``prev_0`` the anchor,
    ``prev_j`` the argmax of refined row ``j-1``. Body NOT read in the stored source; semantics
    from drafter-reference.md section 1.5."""
    rows, prev = [], int(first_prev)
    for j in range(base_logits.shape[0]):
        r = base_logits[j] + w2.float() @ w1.float()[prev]
        rows.append(r)
        prev = int(r.argmax())
    return torch.stack(rows)


class DFlashWorker:
    """Reproduces the draft step of ``DFlashWorker`` / ``DSparkWorker`` (same file @ d70a2287):
    ``_draft_block_width`` (K+1; K under DSpark's ``shift_label``), the trained-width check
    (``_lazy_init_ctx_buffers``), ``validate_block_attention_windows()`` called under TRTLLM,
    the context K/V pool filled by ``precompute_context_kv``, one ``dflash_forward`` over the
    block ``[anchor, mask, ...]``, rows picked by ``dflash_draft_slot_ids``, ``lm_head``, Markov
    refinement when the drafter has the head, greedy argmax. Single request, dense pool."""

    def __init__(self, spec_config, mode_is_dspark: bool):
        self.spec_config, self.is_dspark = spec_config, mode_is_dspark
        self.max_draft_len = spec_config.max_draft_len

    def _draft_block_width(self, dm):
        if self.is_dspark and getattr(dm, "_dspark_shift_label", False):
            return self.max_draft_len
        return self.max_draft_len + 1

    def prepare(self, dm):
        if dm.dflash_attention_backend == "TRTLLM":
            dm.validate_block_attention_windows()
        self.width = self._draft_block_width(dm)
        trained = getattr(dm, "block_size", None) or self.max_draft_len + 1
        if self.width > trained:
            raise ValueError(f"DFlash checkpoint was trained with block_size={trained}. Lower max_draft_len.")

    def draft(self, dm, target_hidden, anchor: int):
        """target_hidden [C, n*h] at positions 0..C-1. Returns (tokens [K], logits [K, V], slots)."""
        c = target_hidden.shape[0]
        w, K = self.width, self.max_draft_len
        mask_id = self.spec_config.mask_token_id if self.spec_config.mask_token_id is not None else dm.mask_token_id
        proj = dm.project_target_hidden(target_hidden)
        k, v = dm.precompute_context_kv(proj, torch.arange(c))
        L, nkv, hd = k.shape[1], k.shape[2], k.shape[3]
        kc = torch.zeros(2, L, c + w, nkv, hd)
        vc = torch.zeros(2, L, c + w, nkv, hd)
        kc[0, :, :c], vc[0, :, :c] = k.transpose(0, 1), v.transpose(0, 1)
        ids = torch.tensor([anchor] + [int(mask_id)] * (w - 1))
        emb = dm.draft_model_full.model.embed_tokens(ids)[None]
        out = dm.dflash_forward(emb, torch.arange(c, c + w)[None], torch.tensor([c]), kc, vc, torch.tensor([0]))
        slots = dflash_draft_slot_ids(1, w, K, self.is_dspark and getattr(dm, "_dspark_shift_label", False))
        logits = dm.lm_head(out[slots])
        if getattr(dm, "has_markov_head", False):
            logits = markov_chain_logits(logits, anchor, dm.markov_w1, dm.markov_w2)
        return logits.argmax(-1), logits, slots
