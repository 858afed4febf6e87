"""The MLA role on torch_npu: the paged latent planes, TND prefill, absorbed paged decode.

Every torch_npu call goes through `self._torch_npu` (injected; the emulator in tests),
checked against the 2.14.0 schemas by tests/unit/npu/test_npu_contract.py. Facts and
limits are from the docs of npu_fused_infer_attention_score in the wheel
(torch_npu/_op_plugin_docs.py); the layout assumptions are listed in docs/npu-ops.md.
"""

from __future__ import annotations

from itertools import accumulate
from types import ModuleType
from typing import Any

import torch

from adapters.torch.paged_rows import gather_planes, padding_to_null_block
from ascend_core.errors import UnsupportedFeatureError
from ascend_core.op_limits import mla_shape_problems
from ports.mla import LatentCache, MlaOps
from ports.ops import AttentionPart, AttentionPlan

RIGHT_DOWN_CAUSAL, NO_MASK = 3, 0
MASK_SIZE = 2048


class NpuMlaOps(MlaOps):
    """MLA through npu_scatter_nd_update_ and npu_fused_infer_attention_score."""

    def __init__(self, torch_npu: ModuleType) -> None:
        self._torch_npu = torch_npu
        self._masks: dict[torch.device, torch.Tensor] = {}

    def check(
        self,
        num_heads: int,
        latent_dim: int,
        rope_dim: int,
        qk_dim: int,
        v_dim: int,
        block_size: int,
        dtype_name: str,
    ) -> None:
        problems = mla_shape_problems(
            num_heads, latent_dim, rope_dim, qk_dim, v_dim, block_size, dtype_name
        )
        if problems:
            raise UnsupportedFeatureError(
                "The NPU MLA ops cannot run this model: " + "; ".join(problems) + ".",
                "serve it on the host device (VLLM_ASCEND_DEVICE=cpu)",
            )

    def write_latent_cache(
        self,
        latent: torch.Tensor,
        rope_key: torch.Tensor,
        cache: LatentCache,
        slot_mapping: torch.Tensor,
    ) -> None:
        """npu_scatter_nd_update_ into each plane, seen as rows [blocks * block_size, D]
        (the planes are contiguous, as the attention op takes them), one slot per row.

        Every row is written, a padding row (slot -1) into vLLM's reserved padding block
        (paged_rows.PAD_BLOCK): the shapes are the slot mapping's and nothing is read
        back, so the write fits in an NPU graph. Value rows past len(slot_mapping) are
        padding, dropped."""
        n = slot_mapping.numel()
        if n == 0:
            return
        indices = padding_to_null_block(slot_mapping).unsqueeze(1)
        for plane, values in ((cache.latent, latent), (cache.rope, rope_key)):
            rows = plane.view(-1, plane.shape[-1])
            update = values[:n].reshape(n, -1).to(plane.dtype)
            self._torch_npu.npu_scatter_nd_update_(rows, indices, update)

    def gather_latent(self, cache: LatentCache, part: AttentionPart) -> torch.Tensor:
        """Index ops on the device (no torch_npu op needed): rows of each plane, side by side."""
        return gather_planes((cache.latent, cache.rope), part)

    def prefill_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """npu_fused_infer_attention_score in TND with rightDownCausal (sparse_mode 3):
        the plan's host lengths go as running sums, as TND takes them."""
        heads = query.shape[1]
        out, _ = self._torch_npu.npu_fused_infer_attention_score(
            query.contiguous(),
            key.contiguous(),
            value.contiguous(),
            atten_mask=self._causal_mask(query.device),
            actual_seq_lengths=list(accumulate(part.actual_query_lens)),
            actual_seq_lengths_kv=list(accumulate(part.actual_seq_lens)),
            num_heads=heads,
            scale=float(scale),
            input_layout="TND",
            num_key_value_heads=heads,
            sparse_mode=RIGHT_DOWN_CAUSAL,
        )
        result: torch.Tensor = out
        return result

    def latent_decode(
        self,
        query_latent: torch.Tensor,
        query_rope: torch.Tensor,
        cache: LatentCache,
        part: AttentionPart,
        scale: float,
    ) -> torch.Tensor:
        """npu_fused_infer_attention_score, BSND with S = 1, query_rope/key_rope, paged:
        the latent plane is key and value (one KV head), the rope plane key_rope."""
        batch, heads, latent_dim = query_latent.shape
        latent, rope, block_table = paged_planes(cache, part.block_table)
        out, _ = self._torch_npu.npu_fused_infer_attention_score(
            query_latent.contiguous().view(batch, 1, heads, latent_dim),
            latent,
            latent,
            query_rope=query_rope.contiguous().view(batch, 1, heads, query_rope.shape[-1]),
            key_rope=rope,
            block_table=block_table,
            actual_seq_lengths_kv=list(part.actual_seq_lens),
            num_heads=heads,
            scale=float(scale),
            input_layout="BSND",
            num_key_value_heads=1,
            sparse_mode=NO_MASK,
            block_size=cache.latent.shape[1],
        )
        result: torch.Tensor = out.view(batch, heads, latent_dim)
        return result

    def graph_host_arguments(self, plan: AttentionPlan) -> list[dict[str, Any]]:
        """The lengths lists of the npu_fused_infer_attention_score calls one MLA layer
        makes for `plan`, as prefill_attention and latent_decode pass them (vLLM's layer
        runs the prefill part first): a captured graph replays each with the lists it was
        captured with unless NPUGraph.update gives it these."""
        arguments: list[dict[str, Any]] = []
        if plan.prefill is not None:
            arguments.append({
                "actual_seq_lengths": list(accumulate(plan.prefill.actual_query_lens)),
                "actual_seq_lengths_kv": list(accumulate(plan.prefill.actual_seq_lens)),
            })
        if plan.decode is not None:
            arguments.append({"actual_seq_lengths_kv": list(plan.decode.actual_seq_lens)})
        return arguments

    def _causal_mask(self, device: torch.device) -> torch.Tensor:
        mask = self._masks.get(device)
        if mask is None:
            mask = torch.ones(MASK_SIZE, MASK_SIZE, dtype=torch.bool, device=device).triu_(1)
            self._masks[device] = mask
        return mask


def paged_planes(
    cache: LatentCache, block_table: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The latent and rope planes as npu_fused_infer_attention_score's paged key and
    key_rope (contiguous [blocks, block_size, D]), and the block table that indexes them.

    Split planes (every model but a hybrid one) are contiguous and pass as they are. A
    hybrid model's planes are block-local (adapters/vllm/attention/mla.latent_planes:
    strided views of each row's [L | R], the page shared with the linear-attention
    states), which the op cannot page through: the blocks the batch's table names are
    gathered into contiguous planes on the device (fixed shapes, nothing read back, so
    a decode graph captures it) and the table renumbered to them. Entries past a
    sequence's blocks (vLLM pads with the null block 0) are gathered too and never read.
    """
    if cache.latent.is_contiguous() and cache.rope.is_contiguous():
        return cache.latent, cache.rope, block_table
    ids = block_table.reshape(-1).long().clamp(min=0)
    table = torch.arange(ids.numel(), dtype=block_table.dtype, device=block_table.device)
    return (
        cache.latent.index_select(0, ids),
        cache.rope.index_select(0, ids),
        table.view(block_table.shape),
    )
