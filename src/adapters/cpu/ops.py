"""The ops port on the host, accelerated: native kernels where they build, else the reference.

bf16 and float32 attention run in a native kernel (adapters/cpu/native) that keeps the
reference's precision contract and reads K/V in place: decodes a row a sequence,
prefills of up to _NATIVE_MAX_QUERY new tokens a row a token (its context: the cache up
to itself); the KV write is a native copy. Longer prefills, other dtypes and builds
without the kernels take ReferenceOps' torch path (SDPA's flash kernel, index_put_).
"""

from __future__ import annotations

import torch

from adapters.cpu import native
from adapters.cpu.reference_ops import ReferenceOps, swiglu
from ports.ops import AttentionPart, AttentionPlan, AttentionPlanNeeds, IndexDtype

__all__ = ["CpuOps", "swiglu"]

_NATIVE_DTYPES = (torch.bfloat16, torch.float32)  # the native attention kernel's dtypes
# Steps whose prefills have at most this many new tokens a sequence attend in the native
# kernel, a row a token; longer ones through SDPA's flash kernel, whose GEMMs reuse each
# K/V row across query rows (per call, 1 thread: 16 x 64 tokens 1.65-1.75x faster, 1 x
# 1024 1.24x, 1 x 2048 0.83x; docs/benchmarks.md, Round 7).
_NATIVE_MAX_QUERY = 1024


class CpuOps(ReferenceOps):
    """The host's ops: ReferenceOps with the native attention and KV write in front.

    `native_attention`: bf16/float32 attention (decodes, and prefills of up to
    _NATIVE_MAX_QUERY new tokens) through the native kernel when it builds (False:
    always the reference's torch path).
    `native_write`: the KV write through the native copy when it builds (False: the
    reference's two index_put_ calls; both give the same bits).
    `native_max_query`: the longest prefill (new tokens of one sequence) the native kernel
    takes; longer ones go to the reference's SDPA.
    """

    # The native kernel takes int64 block tables, and every new token as a row.
    plan_needs = AttentionPlanNeeds(block_table_dtype=IndexDtype.INT64, token_rows=True)

    def __init__(
        self,
        native_attention: bool = True,
        native_write: bool = True,
        native_max_query: int = _NATIVE_MAX_QUERY,
    ) -> None:
        super().__init__()
        self._native_max_query = native_max_query
        self._native_wanted = native_attention
        self._native: native.DecodeKernel | None = None
        self._native_checked = False
        self._write_wanted = native_write
        self._native_write: native.KvWriteKernel | None = None
        self._write_checked = False

    def write_kv_cache(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        kernel = self._write_kernel()
        if kernel is not None and kernel(key, value, key_cache, value_cache, slot_mapping):
            return  # copied natively (same dtype, contiguous head dims); else index_put_
        super().write_kv_cache(key, value, key_cache, value_cache, slot_mapping)

    def paged_attention(
        self,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        plan: AttentionPlan,
        scale: float,
        out: torch.Tensor,
        *,
        window: int | None = None,
        sinks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Where the native kernel applies, one call for the whole step: every new token
        one row with its own context length (decodes, fresh and chunked prefills and
        mixed batches alike), prefills up to _NATIVE_MAX_QUERY new tokens. Otherwise the
        reference's path, with the decodes of a mixed batch still in the kernel."""
        n_tok = plan.num_actual_tokens
        decode = plan.decode
        if not plan.parts or n_tok == 0:
            return out
        if window is not None or sinks is not None:  # the native kernel has neither
            return super().paged_attention(
                query, key_cache, value_cache, plan, scale, out, window=window, sinks=sinks
            )
        kernel = self._native_kernel(query, (key_cache, value_cache))
        decode_only = plan.prefill is None and decode is not None and decode.num_seqs == (
            plan.num_seqs
        )
        if kernel is None or not (decode_only or plan.max_query_len <= self._native_max_query):
            return super().paged_attention(query, key_cache, value_cache, plan, scale, out)
        if decode is not None and decode_only:
            table, lens = decode.block_table, decode.seq_lens
        elif plan.token_block_table is None or plan.token_seq_lens is None:
            raise ValueError(
                "CpuOps.paged_attention was given an AttentionPlan without token rows; "
                "build the step's plan with CpuOps.plan_needs (adapters.torch.attention_plan)."
            )
        else:
            table, lens = plan.token_block_table, plan.token_seq_lens
        if query.shape[0] != n_tok:
            query = query[:n_tok]
        rows = out if out.shape[0] == n_tok else out[:n_tok]
        dst = rows if rows.dtype == query.dtype and rows.stride(-1) == 1 else None
        dst = torch.empty_like(query) if dst is None else dst
        kernel(dst, query, key_cache, value_cache, table, lens, scale)
        if dst is not rows:
            rows.copy_(dst)
        return out

    def _attend(
        self,
        part: AttentionPart,
        query: torch.Tensor,
        caches: tuple[torch.Tensor, torch.Tensor],
        plan: AttentionPlan,
        scale: float,
    ) -> torch.Tensor:
        kernel = self._native_kernel(query, caches) if part.is_decode else None
        if kernel is None:
            return super()._attend(part, query, caches, plan, scale)
        rows = torch.empty_like(query)
        kernel(rows, query, caches[0], caches[1], part.block_table, part.seq_lens, scale)
        return rows

    def _write_kernel(self) -> native.KvWriteKernel | None:
        """The native KV write, or None: the index_put_ path. The kernel itself checks
        each call's dtypes and layouts, and returns False where it does not apply."""
        if not self._write_checked:
            self._write_checked = True
            self._native_write = native.write_kv_cache() if self._write_wanted else None
        return self._native_write

    def _native_kernel(
        self, query: torch.Tensor, caches: tuple[torch.Tensor, torch.Tensor]
    ) -> native.DecodeKernel | None:
        """The native decode kernel for these inputs, or None: the torch path."""
        if not self._native_checked:
            self._native_checked = True
            self._native = native.decode_attention() if self._native_wanted else None
        if self._native is None or query.dim() != 3 or query.stride(-1) != 1:
            return None
        dtype = query.dtype
        if dtype not in _NATIVE_DTYPES or caches[0].dtype != dtype or caches[1].dtype != dtype:
            return None
        if caches[0].stride(-1) != 1 or caches[1].stride(-1) != 1:
            return None
        return self._native
