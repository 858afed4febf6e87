"""vLLM's top-k/top-p masking of sampler logits as one Triton launch, without a sort.

Host reference: vLLM's ``apply_top_k_top_p_pytorch`` (``vllm/v1/sample/ops/
topk_topp_sampler.py``, vLLM 0.33): keep the k largest logits of a row (every logit
equal to the k-th largest stays), then, over the softmax of what is left in ascending
order, mask each logit whose cumulative probability is <= 1 - p (the largest always
stays). Masked logits become -inf, in place.

How, in the unified buffer's limits: a row is never held whole. Each threshold is found
by bisection over the logits' order-preserving int32 keys, each step one tiled pass over
the row (~70 passes of BLOCK logits a row). One difference from the reference, by
design: logits tied exactly at the top-p threshold are kept or masked together, where
the reference's unstable sort splits a tie arbitrarily.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# 1024 float32 logits a tile: 4 KiB, with room for the keys and masks beside it.
DEFAULT_BLOCK = 1024
# Bisection steps: the key range of a row spans at most 2**32 values.
_STEPS = tl.constexpr(33)


# Reductions take Triton's own combine functions (tl.reduce(x, 0, _add) is what tl.sum
# compiles to). Interpreted, Triton reduces with these in one numpy call; with a combine
# function of this module it would call the function once per element (~1,000 interpreted
# calls per tile, seconds per row). They are compiled JIT functions, as anyone gets them
# (load_interpreted() imports Triton before it switches to the interpreter): the
# interpreter only compares them by identity and never calls them.
_add = tl.standard._sum_combine
_max = tl.standard._elementwise_max
_min = tl.standard._elementwise_min


@triton.jit
def _keys(x):
    """Order-preserving int32 keys of float32 values (a < b exactly when key(a) < key(b))."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _count_at_least(base, vocab, cols, t, BLOCK: tl.constexpr):
    """How many logits of the row at `base` have a key >= t: one tiled pass."""
    count = tl.full([], 0, tl.int32)
    for start in range(0, vocab, BLOCK):
        offs = start + cols
        inb = offs < vocab
        key = _keys(tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32))
        count += tl.reduce(tl.where(inb & (key >= t), 1, 0), 0, _add)
    return count


@triton.jit
def topk_topp_kernel(
    logits_ptr,  # [num_rows, vocab] float32, rows row_stride apart; masked in place
    row_stride,
    vocab,
    k_ptr,  # [num_rows] int32/int64 (read when HAS_K)
    p_ptr,  # [num_rows] float32 (read when HAS_P)
    HAS_K: tl.constexpr,
    HAS_P: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * row_stride
    cols = tl.arange(0, BLOCK)

    # Pass 1: the row's smallest and largest key, and its largest logit.
    kmin = tl.full([], 2147483647, tl.int32)
    kmax = tl.full([], -2147483648, tl.int32)
    xmax = tl.full([], float("-inf"), tl.float32)
    for start in range(0, vocab, BLOCK):
        offs = start + cols
        inb = offs < vocab
        x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
        key = _keys(x)
        kmin = tl.minimum(kmin, tl.reduce(tl.where(inb, key, 2147483647), 0, _min))
        kmax = tl.maximum(kmax, tl.reduce(tl.where(inb, key, -2147483648), 0, _max))
        xmax = tl.maximum(xmax, tl.reduce(x, 0, _max))

    # Top-k: the largest key t with count(key >= t) >= k (lo always holds).
    lo = kmin
    if HAS_K:
        k = tl.load(k_ptr + row).to(tl.int32)
        hi = kmax
        if k >= vocab:  # no top-k on this row (vLLM passes k = vocab): nothing to search
            hi = kmin
        for _ in range(_STEPS):
            if lo < hi - 1:  # not hi - lo: that overflows int32
                # floor((lo + hi) / 2) without int32 overflow
                mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)
                count = _count_at_least(base, vocab, cols, mid, BLOCK)
                if count >= k:
                    lo = mid
                else:
                    hi = mid
        # lo holds and hi = lo + 1 failed, unless hi is still kmax, never tried: try it.
        count_top = _count_at_least(base, vocab, cols, hi, BLOCK)
        if count_top >= k:
            lo = hi
    threshold = lo

    if HAS_P:
        p = tl.load(p_ptr + row).to(tl.float32)
        # Softmax denominator over what top-k kept.
        total = tl.full([], 0.0, tl.float32)
        for start in range(0, vocab, BLOCK):
            offs = start + cols
            inb = offs < vocab
            x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
            key = _keys(x)
            e = tl.where(inb & (key >= threshold), tl.exp(x - xmax), 0.0)
            total += tl.reduce(e, 0, _add)
        # The smallest key t with mass(threshold <= key <= t) > 1 - p; by definition the
        # largest key qualifies (the reference keeps its last logit) and threshold - 1
        # does not.
        plo = threshold - 1
        phi = kmax
        for _ in range(_STEPS):
            if plo < phi - 1:
                mid = (plo >> 1) + (phi >> 1) + (plo & phi & 1)
                mass = tl.full([], 0.0, tl.float32)
                for start in range(0, vocab, BLOCK):
                    offs = start + cols
                    inb = offs < vocab
                    x = tl.load(base + offs, mask=inb, other=float("-inf")).to(tl.float32)
                    key = _keys(x)
                    sel = inb & (key >= threshold) & (key <= mid)
                    mass += tl.reduce(tl.where(sel, tl.exp(x - xmax) / total, 0.0), 0, _add)
                if mass > 1.0 - p:
                    phi = mid
                else:
                    plo = mid
        threshold = phi

    # Last pass: mask below the threshold, in place.
    for start in range(0, vocab, BLOCK):
        offs = start + cols
        inb = offs < vocab
        raw = tl.load(base + offs, mask=inb, other=float("-inf"))
        x = raw.to(tl.float32)
        key = _keys(x)
        out = tl.where(key >= threshold, x, float("-inf"))
        tl.store(base + offs, out, mask=inb)


def apply_top_k_top_p(logits: Any, k: Any | None, p: Any | None, block: int = DEFAULT_BLOCK) -> Any:
    """Mask ``logits`` [rows, vocab] in place (vLLM's contract) and return it.

    ``k`` [rows] int (k >= vocab: no top-k for that row), ``p`` [rows] float in (0, 1]
    (1: no top-p), either None for no row. float32 logits, rows contiguous.
    """
    if k is None and p is None:
        return logits
    if logits.dim() != 2 or logits.stride(1) != 1:
        raise ValueError(
            f"top-k/top-p: logits must be 2-D with contiguous rows, got shape "
            f"{tuple(logits.shape)} strides {tuple(logits.stride())}; pass logits.contiguous()"
        )
    rows, vocab = logits.shape
    if rows == 0:
        return logits
    topk_topp_kernel[(rows,)](
        logits,
        logits.stride(0),
        vocab,
        k if k is not None else logits,
        p if p is not None else logits,
        HAS_K=k is not None,
        HAS_P=p is not None,
        BLOCK=block,
    )
    return logits


def _case(has_k: bool, has_p: bool) -> tuple[str, Any, dict[str, str], dict[str, Any]]:
    signature = {
        "logits_ptr": "*fp32",
        "row_stride": "i32",
        "vocab": "i32",
        "k_ptr": "*i32",
        "p_ptr": "*fp32",
        "HAS_K": "constexpr",
        "HAS_P": "constexpr",
        "BLOCK": "constexpr",
    }
    name = "topk_topp[" + "+".join(n for n, on in (("k", has_k), ("p", has_p)) if on) + "]"
    constants = {"HAS_K": has_k, "HAS_P": has_p, "BLOCK": DEFAULT_BLOCK}
    return name, topk_topp_kernel, signature, constants


# What scripts/kernels_check.py lowers: (case name, kernel, signature, constexprs).
LOWERING_CASES = [_case(True, True), _case(True, False), _case(False, True)]
