"""Speculative decoding's draft verification as Triton launches: greedy, random, recovered
tokens and the per-request to per-draft expansion.

Host reference: ``TorchRejectionOps`` (``src/adapters/torch/rejection.py``), the
torch ops behind the ``RejectionOps`` port (``src/ports/rejection.py``); vLLM 0.33's
rejection sampler kernels (``vllm/v1/sample/rejection_sampler.py``) are the model of the
algorithm. Written fresh for triton-ascend's subset: a request's drafts are one vector
tile (no scalar loop carrying a "rejected" flag), the first rejection is a min
reduction over that tile, and a vocabulary row is read in tiles (the unified buffer
never holds a row).

Where the semantics are fixed by the host reference rather than by vLLM:
- ``recover`` without draft probabilities removes the draft's own token from the target
  row; a padded draft (-1) removes token 0, as the reference's ``clamp(min=0)`` does
  (vLLM's kernel removes nothing there).
- random acceptance compares ``target / draft >= uniform`` in float32 (Ascend has no
  fp64 vector unit); the reference compares in float64, so the two can differ only where
  the ratio and the draw agree to float32 rounding.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# A vocabulary tile of the recovered-token kernel: 1024 float32 probabilities from each
# of three rows (target, draft, inv_q) plus the scores, ~16 KiB of the 192 KiB buffer.
DEFAULT_VOCAB_BLOCK = 1024
# Tile of the expansion kernel's per-request runs.
DEFAULT_EXPAND_BLOCK = 128


# Reductions take Triton's own combine functions (as tl.min/tl.max compile): interpreted,
# Triton reduces with them in one numpy call instead of one interpreted call per element
# (see topk_topp.py).
_min = tl.standard._elementwise_min
_max = tl.standard._elementwise_max


@triton.jit
def _draft_span(cu_ptr, req):
    """[start, end) of request `req`'s drafts, from the cumulative counts."""
    end = tl.load(cu_ptr + req).to(tl.int64)
    before = tl.load(cu_ptr + tl.maximum(req - 1, 0)).to(tl.int64)
    start = tl.where(req > 0, before, 0)
    return start, end


@triton.jit
def _write_row(out_row, offs, count, first_reject, tokens, bonus_ptr, req):
    """Row of `out`: tokens[:first_reject + 1] (within the request's count), and the bonus
    token at column `count` when no draft was rejected."""
    tl.store(out_row + offs, tokens.to(tl.int32), mask=(offs <= first_reject) & (offs < count))
    if first_reject >= count:
        bonus = tl.load(bonus_ptr + req)
        tl.store(out_row + count, bonus.to(tl.int32))


@triton.jit
def rejection_greedy_kernel(
    out_ptr,  # [B, K + 1] int32, rows out_stride apart
    out_stride,
    cu_num_drafts_ptr,  # [B] int32
    draft_ids_ptr,  # [N] int32/int64, -1: padded
    target_argmax_ptr,  # [N] int64
    bonus_ptr,  # [B] int64
    is_greedy_ptr,  # [B] uint8 (read when HAS_IS_GREEDY)
    HAS_IS_GREEDY: tl.constexpr,
    BLOCK_K: tl.constexpr,  # >= K, a power of two
):
    req = tl.program_id(0)
    greedy = True
    if HAS_IS_GREEDY:
        greedy = tl.load(is_greedy_ptr + req) != 0
    if greedy:
        start, end = _draft_span(cu_num_drafts_ptr, req)
        count = end - start
        offs = tl.arange(0, BLOCK_K)
        inb = offs < count
        draft = tl.load(draft_ids_ptr + start + offs, mask=inb, other=-1).to(tl.int64)
        target = tl.load(target_argmax_ptr + start + offs, mask=inb, other=0).to(tl.int64)
        # The first position whose draft differs from the target's argmax (count: none).
        first = tl.reduce(tl.where(inb & (draft != target), offs, BLOCK_K), 0, _min)
        first = tl.minimum(first.to(tl.int64), count)
        out_row = out_ptr + req.to(tl.int64) * out_stride
        _write_row(out_row, offs, count, first, target, bonus_ptr, req)


@triton.jit
def rejection_random_kernel(
    out_ptr,  # [B, K + 1] int32, rows out_stride apart
    out_stride,
    cu_num_drafts_ptr,  # [B] int32
    draft_ids_ptr,  # [N] int32/int64, -1: padded
    draft_probs_ptr,  # [N, V] float32 (read when HAS_DRAFT_PROBS)
    target_probs_ptr,  # [N, V] float32
    bonus_ptr,  # [B] int64
    recovered_ptr,  # [N] int32/int64
    uniform_ptr,  # [N] float32
    is_greedy_ptr,  # [B] uint8
    vocab,
    HAS_DRAFT_PROBS: tl.constexpr,
    BLOCK_K: tl.constexpr,  # >= K, a power of two
):
    req = tl.program_id(0)
    if tl.load(is_greedy_ptr + req) == 0:
        start, end = _draft_span(cu_num_drafts_ptr, req)
        count = end - start
        offs = tl.arange(0, BLOCK_K)
        inb = offs < count
        draft = tl.load(draft_ids_ptr + start + offs, mask=inb, other=-1).to(tl.int64)
        real = inb & (draft >= 0)
        cell = (start + offs) * vocab + tl.where(real, draft, 0)
        target_p = tl.load(target_probs_ptr + cell, mask=real, other=0.0).to(tl.float32)
        draft_p = tl.full([BLOCK_K], 1.0, tl.float32)
        if HAS_DRAFT_PROBS:
            draft_p = tl.load(draft_probs_ptr + cell, mask=real, other=0.0).to(tl.float32)
        u = tl.load(uniform_ptr + start + offs, mask=inb, other=1.0).to(tl.float32)
        # A zero draft probability rejects (no division by zero).
        ratio = target_p / tl.where(draft_p > 0, draft_p, 1.0)
        ok = real & (draft_p > 0) & (ratio >= u)
        first = tl.reduce(tl.where(inb & (ok == 0), offs, BLOCK_K), 0, _min)
        first = tl.minimum(first.to(tl.int64), count)
        recovered = tl.load(recovered_ptr + start + offs, mask=inb, other=0).to(tl.int64)
        tokens = tl.where(offs < first, draft, recovered)
        out_row = out_ptr + req.to(tl.int64) * out_stride
        _write_row(out_row, offs, count, first, tokens, bonus_ptr, req)


@triton.jit
def recover_kernel(
    recovered_ptr,  # [N] out, int32/int64
    cu_num_drafts_ptr,  # [B] int32
    draft_ids_ptr,  # [N] int32/int64
    draft_probs_ptr,  # [N, V] float32 (read when HAS_DRAFT_PROBS)
    target_probs_ptr,  # [N, V] float32
    inv_q_ptr,  # [B, V] float32
    vocab,
    HAS_DRAFT_PROBS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One program per (request, draft position); positions past a request's count exit.
    req = tl.program_id(0)
    pos = tl.program_id(1)
    start, end = _draft_span(cu_num_drafts_ptr, req)
    if pos < end - start:
        token = start + pos
        row = token * vocab
        q_row = req.to(tl.int64) * vocab
        # The reference's clamp(min=0): a padded draft removes token 0.
        own = tl.maximum(tl.load(draft_ids_ptr + token).to(tl.int64), 0)
        cols = tl.arange(0, BLOCK)
        best = tl.full([], float("-inf"), tl.float32)
        best_id = tl.full([], 0, tl.int64)
        for v in range(0, vocab, BLOCK):
            offs = v + cols
            inb = offs < vocab
            target_p = tl.load(target_probs_ptr + row + offs, mask=inb, other=0.0)
            if HAS_DRAFT_PROBS:
                draft_p = tl.load(draft_probs_ptr + row + offs, mask=inb, other=0.0)
                prob = tl.maximum(target_p.to(tl.float32) - draft_p.to(tl.float32), 0.0)
            else:
                prob = tl.where(offs == own, 0.0, target_p.to(tl.float32))
            inv_q = tl.load(inv_q_ptr + q_row + offs, mask=inb, other=0.0).to(tl.float32)
            score = tl.where(inb, prob * inv_q, float("-inf"))
            tile_best = tl.reduce(score, 0, _max)
            # torch's argmax: the first index of the maximum, across tiles too.
            tile_id = tl.reduce(tl.where(score == tile_best, offs, vocab), 0, _min)
            if tile_best > best:
                best = tile_best
                best_id = tile_id.to(tl.int64)
        tl.store(recovered_ptr + token, best_id.to(recovered_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=["replace_from", "replace_to"])
def expand_kernel(
    out_ptr,  # [num_tokens]
    values_ptr,  # [B]
    cu_num_tokens_ptr,  # [B] int32
    replace_from,
    replace_to,
    BLOCK: tl.constexpr,
):
    req = tl.program_id(0)
    start, end = _draft_span(cu_num_tokens_ptr, req)
    value = tl.load(values_ptr + req)
    value = tl.where(value == replace_from, replace_to, value).to(out_ptr.dtype.element_ty)
    cols = tl.arange(0, BLOCK)
    for s in range(start, end, BLOCK):
        offs = s + cols
        row = tl.full([BLOCK], 0, out_ptr.dtype.element_ty) + value
        tl.store(out_ptr + offs, row, mask=offs < end)


def _block_k(max_len: int) -> int:
    return max(1, triton.next_power_of_2(max(max_len, 1)))


def _check_rows(name: str, tensor: Any) -> None:
    if tensor.dim() != 2 or tensor.stride(1) != 1 or tensor.stride(0) != tensor.shape[1]:
        raise ValueError(
            f"rejection {name}: must be a contiguous 2-D tensor, got shape "
            f"{tuple(tensor.shape)} strides {tuple(tensor.stride())}; pass {name}.contiguous()"
        )


def verify_greedy(
    out: Any,
    token_ids: Any,
    cu_num_drafts: Any,
    max_len: int,
    target_argmax: Any,
    bonus_token_ids: Any,
    is_greedy: Any | None,
) -> None:
    """``RejectionOps.verify_greedy`` in one launch of B programs (``out`` int32
    [B, K + 1], rows contiguous)."""
    batch = cu_num_drafts.shape[0]
    if batch == 0:
        return
    if out.stride(1) != 1:
        raise ValueError(f"rejection out: rows must be contiguous, got {tuple(out.stride())}")
    rejection_greedy_kernel[(batch,)](
        out,
        out.stride(0),
        cu_num_drafts,
        token_ids,
        target_argmax,
        bonus_token_ids,
        _as_bytes(is_greedy) if is_greedy is not None else out,
        HAS_IS_GREEDY=is_greedy is not None,
        BLOCK_K=_block_k(max_len),
    )


def verify_random(
    out: Any,
    token_ids: Any,
    cu_num_drafts: Any,
    max_len: int,
    draft_probs: Any | None,
    target_probs: Any,
    bonus_token_ids: Any,
    recovered_token_ids: Any,
    uniform: Any,
    is_greedy: Any,
) -> None:
    """``RejectionOps.verify_random`` in one launch of B programs. float32 probabilities
    and draws (the caller converts vLLM's float64 draws), rows contiguous."""
    batch = cu_num_drafts.shape[0]
    if batch == 0:
        return
    _check_rows("target_probs", target_probs)
    if draft_probs is not None:
        _check_rows("draft_probs", draft_probs)
    rejection_random_kernel[(batch,)](
        out,
        out.stride(0),
        cu_num_drafts,
        token_ids,
        draft_probs if draft_probs is not None else target_probs,
        target_probs,
        bonus_token_ids,
        recovered_token_ids,
        uniform,
        _as_bytes(is_greedy),
        target_probs.shape[1],
        HAS_DRAFT_PROBS=draft_probs is not None,
        BLOCK_K=_block_k(max_len),
    )


def recover(
    recovered: Any,
    token_ids: Any,
    cu_num_drafts: Any,
    max_len: int,
    draft_probs: Any | None,
    target_probs: Any,
    inv_q: Any,
    block: int = DEFAULT_VOCAB_BLOCK,
) -> Any:
    """``RejectionOps.recover`` into ``recovered`` [N] in one launch of B x K programs;
    float32 probabilities and ``inv_q``, rows contiguous. Returns ``recovered``."""
    batch = cu_num_drafts.shape[0]
    if batch == 0 or max_len == 0 or token_ids.shape[0] == 0:
        return recovered
    _check_rows("target_probs", target_probs)
    _check_rows("inv_q", inv_q)
    if draft_probs is not None:
        _check_rows("draft_probs", draft_probs)
    recover_kernel[(batch, max_len)](
        recovered,
        cu_num_drafts,
        token_ids,
        draft_probs if draft_probs is not None else target_probs,
        target_probs,
        inv_q,
        target_probs.shape[1],
        HAS_DRAFT_PROBS=draft_probs is not None,
        BLOCK=block,
    )
    return recovered


def expand_to_tokens(
    out: Any,
    values: Any,
    cu_num_tokens: Any,
    replace_from: float = 0,
    replace_to: float = 0,
    block: int = DEFAULT_EXPAND_BLOCK,
) -> Any:
    """``RejectionOps.expand_to_tokens`` into ``out`` [num_tokens] (``values``' dtype) in
    one launch of B programs. Returns ``out``."""
    batch = cu_num_tokens.shape[0]
    if batch == 0:
        return out
    expand_kernel[(batch,)](out, values, cu_num_tokens, replace_from, replace_to, BLOCK=block)
    return out


def _as_bytes(mask: Any) -> Any:
    """A bool mask [B] as uint8, a zero-copy view: a pointer type every backend lowers.
    torch is imported here only, so the lowering venv (no torch) loads this module."""
    import torch

    return mask.reshape(-1).view(torch.uint8)


# What scripts/kernels_check.py lowers: (case name, kernel, signature, constexprs).
_GREEDY_SIGNATURE = {
    "out_ptr": "*i32",
    "out_stride": "i32",
    "cu_num_drafts_ptr": "*i32",
    "draft_ids_ptr": "*i32",
    "target_argmax_ptr": "*i64",
    "bonus_ptr": "*i64",
    "is_greedy_ptr": "*u8",
    "HAS_IS_GREEDY": "constexpr",
    "BLOCK_K": "constexpr",
}
_RANDOM_SIGNATURE = {
    "out_ptr": "*i32",
    "out_stride": "i32",
    "cu_num_drafts_ptr": "*i32",
    "draft_ids_ptr": "*i32",
    "draft_probs_ptr": "*fp32",
    "target_probs_ptr": "*fp32",
    "bonus_ptr": "*i64",
    "recovered_ptr": "*i32",
    "uniform_ptr": "*fp32",
    "is_greedy_ptr": "*u8",
    "vocab": "i32",
    "HAS_DRAFT_PROBS": "constexpr",
    "BLOCK_K": "constexpr",
}
_RECOVER_SIGNATURE = {
    "recovered_ptr": "*i32",
    "cu_num_drafts_ptr": "*i32",
    "draft_ids_ptr": "*i32",
    "draft_probs_ptr": "*fp32",
    "target_probs_ptr": "*fp32",
    "inv_q_ptr": "*fp32",
    "vocab": "i32",
    "HAS_DRAFT_PROBS": "constexpr",
    "BLOCK": "constexpr",
}
_EXPAND_SIGNATURE = {
    "out_ptr": "*fp32",
    "values_ptr": "*fp32",
    "cu_num_tokens_ptr": "*i32",
    "replace_from": "fp32",
    "replace_to": "fp32",
    "BLOCK": "constexpr",
}
LOWERING_CASES = [
    *(
        (
            f"rejection_greedy[{'is_greedy' if has else 'all'}]",
            rejection_greedy_kernel,
            _GREEDY_SIGNATURE,
            {"HAS_IS_GREEDY": has, "BLOCK_K": 8},
        )
        for has in (True, False)
    ),
    *(
        (
            f"rejection_random[{'draft_probs' if has else 'no_draft_probs'}]",
            rejection_random_kernel,
            _RANDOM_SIGNATURE,
            {"HAS_DRAFT_PROBS": has, "BLOCK_K": 8},
        )
        for has in (True, False)
    ),
    *(
        (
            f"rejection_recover[{'draft_probs' if has else 'no_draft_probs'}]",
            recover_kernel,
            _RECOVER_SIGNATURE,
            {"HAS_DRAFT_PROBS": has, "BLOCK": DEFAULT_VOCAB_BLOCK},
        )
        for has in (True, False)
    ),
    (
        "rejection_expand[fp32]",
        expand_kernel,
        _EXPAND_SIGNATURE,
        {"BLOCK": DEFAULT_EXPAND_BLOCK},
    ),
]
