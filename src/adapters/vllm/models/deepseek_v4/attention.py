"""DeepSeek-V4's attention for one request, from its per-token inputs.

Queries: low-rank (wq_a, q_norm, wq_b), each head RMS-normed, rope on its trailing slice.
Keys = values: one shared head (wkv, norm, rope), seen through a sliding window of
`sliding_window` tokens; a compressed layer also sees compressed rows (compressor.py): all
its visible rows at rate 128, the indexer's top-k of them at rate 4. A learned sink logit
per head joins the softmax. The output's rope slice is rotated back by the query position,
then the grouped low-rank output projection (wo_a per group of heads, wo_b) mixes heads.

Norms and rope through the device's ops port; the indexer's top-k and the attention itself
(window rows and compressed rows in one call, the sinks folded in) through its sparse-MLA
port (SparseMlaOps.index_topk in compressor.py, SparseMlaOps.sink_attention here): on the
NPU npu_lightning_indexer, then npu_sparse_flash_attention over the rows with its softmax
LSE and npu_attention_update for the sinks (adapters/npu/sparse_mla.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from adapters.container import container
from adapters.vllm.models.deepseek_v4.compressor import (
    compressed_rows,
    indexer_top_k,
    visible_rows,
)
from adapters.vllm.models.deepseek_v4.norms import rms_norm
from adapters.vllm.models.deepseek_v4.rope import rope_table, rotate
from ports.ops import Ops

SLIDING, CSA, HCA = (
    "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
)


class Norm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class Compressor(nn.Module):
    """Projections and pooling bias of one compressed series (checkpoint: wkv, wgate, ape,
    norm)."""

    def __init__(self, hidden: int, dim: int, rate: int, overlap: bool) -> None:
        super().__init__()
        width = 2 * dim if overlap else dim
        self.wkv = nn.Linear(hidden, width, bias=False)
        self.wgate = nn.Linear(hidden, width, bias=False)
        self.ape = nn.Parameter(torch.empty(rate, width))
        self.norm = Norm(dim)
        self.rate, self.overlap = rate, overlap

    def rows(self, ops: Ops, x: torch.Tensor, eps: float, freqs: torch.Tensor,
             scale: float) -> torch.Tensor:
        return compressed_rows(ops, self.wkv(x), self.wgate(x), self.ape, self.norm.weight,
                               eps, self.rate, self.overlap, freqs, scale)


class Indexer(nn.Module):
    """The lightning indexer of a rate-4 layer (checkpoint: wq_b, weights_proj, compressor)."""

    def __init__(self, config: Any, rate: int) -> None:
        super().__init__()
        self.heads, self.dim = config.index_n_heads, config.index_head_dim
        self.top_k = config.index_topk
        self.wq_b = nn.Linear(config.q_lora_rank, self.heads * self.dim, bias=False)
        self.weights_proj = nn.Linear(config.hidden_size, self.heads, bias=False)
        self.compressor = Compressor(config.hidden_size, self.dim, rate, overlap=True)
        self.sparse_ops = container().sparse_mla_ops()


class V4Attention(nn.Module):
    def __init__(self, config: Any, layer_type: str) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.heads, self.dim = config.num_attention_heads, config.head_dim
        self.layer_type, self.window = layer_type, int(config.sliding_window)
        self.eps = float(config.rms_norm_eps)
        self.groups = int(config.o_groups)
        self.ops: Ops = container().ops()
        self.sparse_ops = container().sparse_mla_ops()
        self.wq_a = nn.Linear(hidden, config.q_lora_rank, bias=False)
        self.q_norm = Norm(config.q_lora_rank)
        self.wq_b = nn.Linear(config.q_lora_rank, self.heads * self.dim, bias=False)
        self.wkv = nn.Linear(hidden, self.dim, bias=False)
        self.norm = Norm(self.dim)
        self.wo_a = nn.Linear(self.heads * self.dim // self.groups,
                              self.groups * config.o_lora_rank, bias=False)
        self.wo_b = nn.Linear(self.groups * config.o_lora_rank, hidden, bias=False)
        self.attn_sink = nn.Parameter(torch.empty(self.heads))
        self.rate = 0
        if layer_type != SLIDING:
            self.rate = int(config.compress_rates[layer_type])
            self.compressor = Compressor(hidden, self.dim, self.rate, overlap=layer_type == CSA)
        if layer_type == CSA:
            self.indexer = Indexer(config, self.rate)
        freqs, self.rope_scale = rope_table(config, "main" if layer_type == SLIDING
                                            else "compress")
        compress_freqs, self.compress_scale = rope_table(config, "compress")
        self.register_buffer("freqs", freqs, persistent=False)
        self.register_buffer("compress_freqs", compress_freqs, persistent=False)

    def forward(self, context: torch.Tensor, new: int) -> torch.Tensor:
        """context [L, hidden]: the request's attention inputs at positions 0..L-1, its last
        `new` rows this step's tokens; their attention outputs [new, hidden]."""
        length = context.shape[0]
        positions = torch.arange(length - new, length, device=context.device)
        x = context[length - new:]
        ops = self.ops
        q_res = rms_norm(ops, self.wq_a(x), self.q_norm.weight, self.eps)
        q = rms_norm(ops, self.wq_b(q_res).view(new, self.heads, self.dim), None, self.eps)
        q = rotate(ops, q, positions, self.freqs, scale=self.rope_scale)

        first = max(0, length - new - (self.window - 1))
        kv = rms_norm(ops, self.wkv(context[first:]), self.norm.weight, self.eps)
        kv = rotate(ops, kv.unsqueeze(1), torch.arange(first, length, device=x.device),
                    self.freqs, scale=self.rope_scale).squeeze(1)
        keys = torch.arange(first, length, device=x.device)
        in_window = (keys[None, :] <= positions[:, None]) & (
            keys[None, :] > positions[:, None] - self.window
        )
        masks, values = [in_window], [kv]
        if self.rate:
            rows = self.compressor.rows(ops, context, self.eps, self.compress_freqs,
                                        self.compress_scale)
            if self.layer_type == CSA:
                masks.append(self._indexer_choice(context, x, q_res, positions))
            else:
                seen = visible_rows(positions, self.rate)
                masks.append(torch.arange(rows.shape[0], device=x.device)[None, :] < seen[:, None])
            values.append(rows)
        kv_all, mask = torch.cat(values, dim=0), torch.cat(masks, dim=1)
        out = self.sparse_ops.sink_attention(q, kv_all, mask, self.attn_sink.float(),
                                             self.dim**-0.5)
        out = rotate(ops, out, positions, self.freqs, sign=-1.0, scale=self.rope_scale)
        return self._project_out(out)

    def _indexer_choice(self, context: torch.Tensor, x: torch.Tensor, q_res: torch.Tensor,
                        positions: torch.Tensor) -> torch.Tensor:
        ix = self.indexer
        keys = ix.compressor.rows(self.ops, context, self.eps, self.compress_freqs,
                                  self.compress_scale)
        q = ix.wq_b(q_res).view(x.shape[0], ix.heads, ix.dim)
        q = rotate(self.ops, q, positions, self.compress_freqs, scale=self.compress_scale)
        weights = ix.weights_proj(x) * ix.heads**-0.5
        return indexer_top_k(ix.sparse_ops, q, keys, weights, positions, self.rate, ix.top_k)

    def _project_out(self, out: torch.Tensor) -> torch.Tensor:
        tokens = out.shape[0]
        grouped = out.reshape(tokens, self.groups, -1)
        per_group = self.wo_a.weight.view(self.groups, -1, grouped.shape[-1])
        mixed = torch.einsum("tgi,gri->tgr", grouped, per_group).reshape(tokens, -1)
        return self.wo_b(mixed)
