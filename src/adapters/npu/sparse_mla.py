"""The sparse-MLA role on torch_npu: npu_scatter_nd_update_ for the indexer's keys,
npu_lightning_indexer for the top-k, npu_sparse_flash_attention over the chosen rows;
DeepSeek-V4's sink attention through npu_sparse_flash_attention and npu_attention_update.

Every torch_npu call goes through `self._torch_npu` (injected; the emulator in tests),
checked against the 2.14.0 schemas by tests/unit/npu/test_npu_contract.py. Facts and
limits are from the wheel's docs of the two ops (torch_npu/_op_plugin_docs.py). Each
token is a batch of its own (TND query of one token, running sums 1, 2, .. T; its
sequence's block-table row and context length, the plan's token rows), so the ops'
rightDownCausal mask (sparse_mode 3) ends each token's view at its own position. The
lengths stay device tensors: nothing is read back.
"""

from __future__ import annotations

from types import ModuleType

import torch

from adapters.torch.paged_rows import padding_to_null_block
from ascend_core.errors import UnsupportedFeatureError
from ascend_core.op_limits import sparse_mla_shape_problems
from ports.mla import LatentCache
from ports.ops import AttentionPlanNeeds, IndexDtype
from ports.sparse_mla import SparseMlaOps

RIGHT_DOWN_CAUSAL = 3
ALL_KEYS = 0  # sparse_mode 0: no mask beyond the indices
ROPE_DIM = 64  # query_rope / key_rope width the op documents (Dr)
MLA_ABSORB = 2  # attention_mode: the only one the op takes (ops-transformer's docs)


class NpuSparseMlaOps(SparseMlaOps):
    """DSA through npu_lightning_indexer and npu_sparse_flash_attention."""

    plan_needs = AttentionPlanNeeds(block_table_dtype=IndexDtype.INT32, token_rows=True)

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu

    def check(self, num_heads: int, latent_dim: int, rope_dim: int, index_heads: int,
              index_dim: int, topk: int, block_size: int, dtype_name: str) -> None:
        problems = sparse_mla_shape_problems(topk, dtype_name)
        if problems:
            raise UnsupportedFeatureError(
                "The NPU sparse MLA ops cannot run this model: " + "; ".join(problems) + ".",
                "serve it on the host device (VLLM_ASCEND_DEVICE=cpu)",
            )

    def write_index_keys(
        self, keys: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        """One row per slot as NpuMlaOps writes the latent planes: padding (slot -1)
        into vLLM's reserved padding block, nothing read back."""
        n = slot_mapping.numel()
        if n == 0:
            return
        indices = padding_to_null_block(slot_mapping).unsqueeze(1)
        rows = cache.view(-1, cache.shape[-1])
        self._torch_npu.npu_scatter_nd_update_(rows, indices, keys[:n].to(cache.dtype))

    def index_topk(
        self,
        query: torch.Tensor,
        weights: torch.Tensor,
        cache: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        max_seq_len: int,
        topk: int,
    ) -> torch.Tensor:
        """TND query [T, H, D] against the paged keys as PA_BSND [blocks, bs, 1, D]."""
        tokens = query.shape[0]
        picked, _ = self._torch_npu.npu_lightning_indexer(
            query.contiguous(),
            cache.unsqueeze(2),
            weights.to(query.dtype).contiguous(),
            actual_seq_lengths_query=_running_ones(tokens, query.device),
            actual_seq_lengths_key=seq_lens.to(torch.int32),
            block_table=block_table,
            layout_query="TND",
            layout_key="PA_BSND",
            sparse_count=topk,
            sparse_mode=RIGHT_DOWN_CAUSAL,
        )
        result: torch.Tensor = picked.view(tokens, topk)
        return result

    def sparse_attention(
        self,
        query_latent: torch.Tensor,
        query_rope: torch.Tensor,
        cache: LatentCache,
        indices: torch.Tensor,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """The latent plane as key and value (one KV head), the rope plane key_rope."""
        tokens = query_latent.shape[0]
        latent = cache.latent.unsqueeze(2)
        lens = seq_lens.to(torch.int32)
        out, _, _ = self._torch_npu.npu_sparse_flash_attention(
            query_latent.contiguous(),
            latent,
            latent,
            indices.view(tokens, 1, -1).contiguous(),
            float(scale),
            block_table=block_table,
            actual_seq_lengths_query=_running_ones(tokens, query_latent.device),
            actual_seq_lengths_kv=lens,
            query_rope=query_rope.contiguous(),
            key_rope=cache.rope.unsqueeze(2),
            sparse_block_size=1,
            layout_query="TND",
            layout_kv="PA_BSND",
            sparse_mode=RIGHT_DOWN_CAUSAL,
            attention_mode=MLA_ABSORB,
        )
        result: torch.Tensor = out
        return result

    def sink_attention(
        self,
        query: torch.Tensor,
        rows: torch.Tensor,
        visible: torch.Tensor,
        sinks: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        """One npu_sparse_flash_attention over the rows as TND keys (one batch; the rows
        are not paged, V4 rebuilds them each step), each token's visible rows as its
        indices (valid first: a stable sort, on the device), returning its softmax max and
        sum; then npu_attention_update folds the sinks in as a second partial attention
        whose LSE is the sink logit and whose output is zero. The op's own `sinks` input
        is Ascend 950 only and its LSE is refused with paged keys on A2/A3 (ops-transformer's
        SparseFlashAttention docs), so this form runs on all three. The rope inputs the op
        requires are zeros of the documented width (the rows' rope is already in D)."""
        if query.dtype not in (torch.float16, torch.bfloat16):
            raise UnsupportedFeatureError(
                f"DeepSeek-V4's attention on the NPU (npu_sparse_flash_attention) takes "
                f"float16 or bfloat16, not {query.dtype}.",
                "serve it with --dtype bfloat16, or on the host device (VLLM_ASCEND_DEVICE=cpu)",
            )
        tokens, heads, dim = query.shape
        count = rows.shape[0]
        order = torch.argsort((~visible).to(torch.int8), dim=1, stable=True)
        picks = torch.where(torch.gather(visible, 1, order), order, -1).to(torch.int32)
        key = rows.to(query.dtype).unsqueeze(1).contiguous()
        device = query.device
        out, top, total = self._torch_npu.npu_sparse_flash_attention(
            query.contiguous(),
            key,
            key,
            picks.view(tokens, 1, count).contiguous(),
            float(scale),
            actual_seq_lengths_query=torch.full((1,), tokens, dtype=torch.int32, device=device),
            actual_seq_lengths_kv=torch.full((1,), count, dtype=torch.int32, device=device),
            query_rope=query.new_zeros((tokens, heads, ROPE_DIM)),
            key_rope=key.new_zeros((count, 1, ROPE_DIM)),
            sparse_block_size=1,
            layout_query="TND",
            layout_kv="TND",
            sparse_mode=ALL_KEYS,
            attention_mode=MLA_ABSORB,
            return_softmax_lse=True,
        )
        lse = (top + torch.log(total)).reshape(tokens * heads)  # (1, T, N): natural log
        sink_lse = sinks.float().view(1, heads).expand(tokens, heads).reshape(-1).contiguous()
        local = out.reshape(tokens * heads, dim)
        merged, _ = self._torch_npu.npu_attention_update(
            [lse.contiguous(), sink_lse], [local, torch.zeros_like(local)], 0
        )
        result: torch.Tensor = merged.view(tokens, heads, dim)
        return result


def _running_ones(tokens: int, device: torch.device) -> torch.Tensor:
    """TND's running sums of one query token per batch: 1, 2, .., T (int32)."""
    return torch.arange(1, tokens + 1, dtype=torch.int32, device=device)

