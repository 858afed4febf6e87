"""The MLA backend: vLLM's MLAAttention layer with the paged latent cache and the math
through the device's MlaOps.

vLLM's layer does the projections (the absorbed W_UK before decode, W_UV after it);
this backend stores each token's latent and rope key, runs prefill over keys and
values expanded by the layer's kv_b_proj (gathering the cached context for chunked
prefill and prefix hits), and the latent decode.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from attrs import frozen
from vllm.v1.attention.backend import AttentionBackend, AttentionLayer, MLAAttentionImpl
from vllm.v1.attention.backends.mla.prefill.base import MLAPrefillBackend

from adapters.container import container
from adapters.vllm.attention.mla_metadata import MlaMetadata, MlaMetadataBuilder
from adapters.vllm.attention.names import MLA_BACKEND_NAME
from ascend_core.errors import BackendSelectionError, ConfigError, refuse_unsupported
from ports.mla import LatentCache

if TYPE_CHECKING:
    from vllm.model_executor.layers.linear import ColumnParallelLinear

class MlaAttentionBackend(AttentionBackend):
    """vLLM's MLAAttentionSpec as it stands (one KV head, head_size L + R, no separate V),
    so KV bytes per token per layer = (L + R) x dtype size; the impl reads each layer's
    allocation as two planes (latent_planes)."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]  # type: ignore[type-arg]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        return MLA_BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type[MlaAttentionImpl]:
        return MlaAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[MlaMetadataBuilder]:
        return MlaMetadataBuilder

    @classmethod
    def is_mla(cls) -> bool:
        return True


def latent_planes(
    kv_cache: torch.Tensor, latent_dim: int, *, block_local: bool = False
) -> LatentCache:
    """A layer's [num_blocks, block_size, L + R] allocation as the ops port's two planes.

    The first num_blocks * block_size * L elements are the latent plane
    [num_blocks, block_size, L], the rest the rope plane [num_blocks, block_size, R]: each
    contiguous, as torch_npu's MLA attention takes them, and each block still its own
    rows in both. vLLM itself only sizes the allocation; a KV connector, which moves
    blocks by address, learns the planes from plane_block_spans.

    block_local: the planes as strided views of each row's [L | R] (vLLM's own layout), so
    block b's rows stay inside block b's page. A hybrid model (Kimi-Linear: KDA layers
    beside an MLA layer) needs this: vLLM's hybrid allocator lets one layer of each KV
    cache group share one allocation, page by page, so block b of the MLA layer and the
    linear-attention state in slot b' of a KDA layer are the same tensor's pages b and b';
    the split planes would write block b's latent and rope rows into other pages (other
    requests' recurrent and conv states).
    """
    blocks, block_size, width = kv_cache.shape
    if block_local:
        return LatentCache(kv_cache[..., :latent_dim], kv_cache[..., latent_dim:])
    if not kv_cache.is_contiguous():
        raise ConfigError(
            f"The MLA backend needs each layer's latent cache contiguous; got shape "
            f"{tuple(kv_cache.shape)} with strides {kv_cache.stride()}.",
            "serve without a KV cache layout that interleaves layers",
        )
    flat = kv_cache.view(-1)
    split = blocks * block_size * latent_dim
    return LatentCache(
        flat[:split].view(blocks, block_size, latent_dim),
        flat[split:].view(blocks, block_size, width - latent_dim),
    )


@frozen
class BlockSpan:
    """Where one plane of a layer's latent cache keeps block b: the bytes
    [base_addr + b * stride, base_addr + b * stride + length)."""

    base_addr: int
    stride: int
    length: int


def plane_block_spans(kv_cache: torch.Tensor, latent_dim: int) -> tuple[BlockSpan, BlockSpan]:
    """The latent plane's and the rope plane's block spans, as latent_planes reads them.

    A block's rows are not one run of bytes here (latent rows in the first plane, rope rows
    in the second), so a connector that moves block b must move both spans."""
    planes = latent_planes(kv_cache, latent_dim)
    spans = [
        BlockSpan(plane.data_ptr(), plane.stride(0) * plane.element_size(), plane[0].nbytes)
        for plane in (planes.latent, planes.rope)
    ]
    return spans[0], spans[1]


class MlaAttentionImpl(MLAAttentionImpl[MlaMetadata]):
    """forward_mha (prefill rows) and forward_mqa (decode rows) of vLLM's MLA layer."""

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: list[float] | None,
        sliding_window: int | None,
        kv_cache_dtype: str,
        logits_soft_cap: float | None,
        attn_type: str,
        kv_sharing_target_layer_name: str | None,
        q_lora_rank: int | None,
        kv_lora_rank: int,
        qk_nope_head_dim: int,
        qk_rope_head_dim: int,
        qk_head_dim: int,
        v_head_dim: int,
        kv_b_proj: ColumnParallelLinear,
        indexer: object | None = None,
        q_pad_num_heads: int | None = None,
        **_: Any,
    ) -> None:
        unsupported = {
            "a sparse indexer (DSA)": indexer is not None,
            "sliding window": sliding_window is not None,
            "alibi": alibi_slopes is not None,
            "logits soft cap": bool(logits_soft_cap),
            "KV sharing": kv_sharing_target_layer_name is not None,
            f"kv_cache_dtype={kv_cache_dtype}": kv_cache_dtype != "auto",
            "decode context parallel": self.dcp_world_size > 1,
        }
        refuse_unsupported(
            unsupported,
            "The Ascend MLA backend does not support",
            "serve a dense MLA model (DeepSeek-V2/V3 style) without these features",
            BackendSelectionError,
        )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.qk_rope_head_dim = qk_rope_head_dim
        self.v_head_dim = v_head_dim
        self.kv_b_proj = kv_b_proj
        self.q_pad_num_heads = None  # MLAAttention pads queries for kernels that need it
        self.ops = container().mla_ops()
        from vllm.config import get_current_vllm_config

        config = get_current_vllm_config()
        # A hybrid model's layers share their allocations page by page (latent_planes).
        self.block_local = bool(config.model_config is not None and config.model_config.is_hybrid)
        self.ops.check(
            num_heads, kv_lora_rank, qk_rope_head_dim, qk_head_dim, v_head_dim,
            int(config.cache_config.block_size or 0),
            str(config.model_config.dtype).removeprefix("torch.") if config.model_config else "",
        )

    def _planes(self, kv_cache: torch.Tensor) -> LatentCache:
        return latent_planes(kv_cache, self.kv_lora_rank, block_local=self.block_local)

    def do_kv_cache_update(
        self,
        kv_c_normed: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        k_scale: torch.Tensor,
        skip_scale: bool = False,
    ) -> None:
        if kv_cache.numel() == 0:
            return  # profiling run: no cache yet
        self.ops.write_latent_cache(
            kv_c_normed, k_pe, self._planes(kv_cache), slot_mapping
        )

    def forward_mha(
        self,
        q: torch.Tensor,
        kv_c_normed: torch.Tensor,
        k_pe: torch.Tensor,
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: MlaMetadata,
        k_scale: torch.Tensor,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
    ) -> None:
        """Prefill rows: q [T, N, nope + rope]; writes [T, N * v_head_dim] into output.

        With cached context (chunked prefill, prefix hits) the whole sequence's latent
        rows are gathered from the cache (this step's were written just before) and
        expanded once; a fresh prefill expands this step's rows directly.
        """
        prefill = attn_metadata.prefill
        assert prefill is not None and output_scale is None
        if attn_metadata.prefill_has_context:
            rows = self.ops.gather_latent(
                self._planes(kv_c_and_k_pe_cache), prefill
            )
            kv_c_normed = rows[:, : self.kv_lora_rank]
            k_pe = rows[:, self.kv_lora_rank :]
        kv_nope = self.kv_b_proj(kv_c_normed.to(q.dtype))[0]
        kv_nope = kv_nope.view(-1, self.num_heads, self.qk_nope_head_dim + self.v_head_dim)
        k_nope, v = kv_nope.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k_rope = k_pe.to(q.dtype).reshape(-1, 1, self.qk_rope_head_dim)
        k = torch.cat((k_nope, k_rope.expand(-1, self.num_heads, -1)), dim=-1)
        out = self.ops.prefill_attention(q, k, v, prefill, self.scale)
        output.copy_(out.reshape(output.shape))

    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: MlaMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Decode rows: (q_nope W_UK [B, N, L], q_pe [B, N, R]) -> [B, N, L], no LSE."""
        decode = attn_metadata.decode
        assert decode is not None
        if isinstance(q, tuple):
            q_latent, q_rope = q
        else:
            q_latent, q_rope = q.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        cache = self._planes(kv_c_and_k_pe_cache)
        out = self.ops.latent_decode(q_latent, q_rope, cache, decode, self.scale)
        return out, None


class MlaPrefillQuery(MLAPrefillBackend):
    """The answer to vLLM's question "which MLA prefill kernel runs on this platform".

    vLLM's MLAAttention asks the platform for one while it is built, and its common
    MLA impl would call it. Our impl computes prefill in forward_mha through MlaOps
    and never calls this class; it accepts every dtype so the question never fails.
    """

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]

    @staticmethod
    def get_name() -> str:
        return "ASCEND_MLA_PREFILL"

    def run_prefill_new_tokens(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Ascend MLA backend computes prefill in forward_mha")

    def run_prefill_context_chunk(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Ascend MLA backend computes prefill in forward_mha")
