"""The sparse MLA backend (DeepSeek sparse attention, DSA): vLLM's MLAAttention layer with
the lightning indexer's top-k and attention over the selected latent rows, through the
device's SparseMlaOps.

Every token, prefill or decode, attends in latent space (vLLM's MQA path: q_nope is
multiplied by W_UK before the call) over the positions its layer's indexer chose; the
impl declares no dense prefill, so vLLM sends all tokens that way.

The indexer: vLLM's DeepSeek model builds it (projections, key norm, rope) with a
quantized (fp8) key cache and CUDA scoring kernels. The impl takes over the indexer it is
handed when built: its key cache holds the keys in the model's dtype (index_head_dim
values a token, its own paged cache beside the latent one), and its forward computes the
scores through SparseMlaOps. Unquantized, the selection is transformers' own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from vllm.forward_context import get_forward_context
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionLayer,
    AttentionMetadata,
    AttentionMetadataBuilder,
    CommonAttentionMetadata,
    MLAAttentionImpl,
)

from adapters.container import container
from adapters.vllm.attention.metadata import host_lens_exact, staging_size, step_plan
from adapters.vllm.attention.mla import latent_planes
from adapters.vllm.attention.names import (
    SPARSE_INDEXER_NAME,
    SPARSE_INDEXER_OP,
    SPARSE_MLA_BACKEND_NAME,
)
from ascend_core.errors import BackendSelectionError, refuse_unsupported
from ports.ops import AttentionPlan, AttentionPlanNeeds

if TYPE_CHECKING:
    from vllm.model_executor.layers.linear import ColumnParallelLinear

    from ports.sparse_mla import SparseMlaOps


@dataclass
class SparseMlaMetadata(AttentionMetadata):
    """What vLLM's MLAAttention.forward_impl reads (every token an MQA row), and the plan.
    The indexer's key-cache layer gets the same value from its own builder."""

    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    slot_mapping: torch.Tensor
    plan: AttentionPlan

    def graph_host_arguments(self) -> list[dict[str, Any]]:
        """None: the sparse ops take every length as a device tensor (the plan's token
        rows, in the builder's persistent buffers), so a FULL graph replays as captured."""
        return []


class SparseMlaMetadataBuilder(AttentionMetadataBuilder[SparseMlaMetadata]):
    """The step's AttentionPlan with every new token as a row of its own (token_rows).

    Full graphs of single-token decode steps (UNIFORM_SINGLE_TOKEN_DECODE): each token's
    row is its sequence's row of vLLM's persistent block table, and the lengths go into
    this builder's persistent staging buffer, so a captured step reads the same memory
    each step; the indexer's key write sends padding slots (-1) to the null block and a
    padding sequence has length 0 (nothing read back, tests/integration/npu)."""

    _cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(  # type: ignore[no-untyped-def]
        self, kv_cache_spec, layer_names, vllm_config, device, ops=None
    ):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # vLLM constructs the builder with this fixed signature: the ops port resolved here.
        ops = ops if ops is not None else container().sparse_mla_ops()
        self.needs: AttentionPlanNeeds = ops.plan_needs
        self._host_lens_exact = host_lens_exact(vllm_config)
        self._staging: torch.Tensor | None = None
        if torch.device(device).type != "cpu":  # the host captures no graphs
            self._staging = torch.zeros(
                staging_size(vllm_config), dtype=torch.int64, device=device
            )

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> SparseMlaMetadata:
        cm = common_attn_metadata
        plan = step_plan(cm, self.needs, self._host_lens_exact, staging=self._staging)
        assert plan.slot_mapping is not None and plan.token_seq_lens is not None
        return SparseMlaMetadata(
            num_actual_tokens=plan.num_actual_tokens,
            num_decodes=cm.num_reqs,
            num_decode_tokens=plan.num_actual_tokens,
            num_prefills=0,
            slot_mapping=plan.slot_mapping,
            plan=plan,
        )


class SparseMlaAttentionBackend(AttentionBackend):
    """The latent cache as the MLA backend keeps it ((L + R) values a token and layer);
    the indexer's keys are a second cache of the layer (SparseIndexerBackend)."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]  # type: ignore[type-arg]
    forward_includes_kv_cache_update = True

    @staticmethod
    def get_name() -> str:
        return SPARSE_MLA_BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type[SparseMlaAttentionImpl]:
        return SparseMlaAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[SparseMlaMetadataBuilder]:
        return SparseMlaMetadataBuilder

    @classmethod
    def is_mla(cls) -> bool:
        return True

    @classmethod
    def is_sparse(cls) -> bool:
        return True


class SparseIndexerBackend(AttentionBackend):
    """The indexer's key cache: [num_blocks, block_size, index_head_dim] in the model's
    dtype; no impl (the indexer's forward computes), the same plan as the MLA layer."""

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto"]  # type: ignore[type-arg]

    @staticmethod
    def get_name() -> str:
        return SPARSE_INDEXER_NAME

    @staticmethod
    def get_impl_cls() -> Any:
        raise AssertionError("the indexer's key cache has no attention impl")

    @staticmethod
    def get_builder_cls() -> type[SparseMlaMetadataBuilder]:
        return SparseMlaMetadataBuilder

    @classmethod
    def is_mla(cls) -> bool:
        return True


class SparseIndexer:
    """The forward of vLLM's DeepSeek-V3.2 indexer module, unquantized, through the ops.

    Same projections and rope as vLLM's (its weights, its rotary embedding), traced with
    the model; what reads the step (the keys into the layer's indexer cache at the step's
    slots, the top-k positions into the model's shared top-k buffer, which the layer's
    sparse attention then reads) is one opaque op, SPARSE_INDEXER_OP: Dynamo records the
    call, and a compiled model or a captured graph runs it with each step's metadata.
    """

    def __init__(self, indexer: Any, topk_buffer: torch.Tensor, ops: SparseMlaOps) -> None:
        self.indexer = indexer
        self.topk_buffer = topk_buffer
        self.ops = ops
        self.weight_scale = float(indexer.softmax_scale) * float(indexer.n_head) ** -0.5

    def __call__(
        self, hidden_states: torch.Tensor, qr: torch.Tensor, positions: torch.Tensor,
        rotary_emb: Any,
    ) -> torch.Tensor:
        idx = self.indexer
        heads, dim, rope = idx.n_head, idx.head_dim, idx.rope_dim
        q = idx.wq_b(qr)[0].view(-1, heads, dim)
        kw = idx.wk_weights_proj(hidden_states)[0]
        k = idx.k_norm(kw[:, :dim]).to(q.dtype)
        weights = kw[:, dim:]
        q_pe, q_nope = q.split([rope, dim - rope], dim=-1)
        k_pe, k_nope = k.split([rope, dim - rope], dim=-1)
        q_pe, k_pe = rotary_emb(positions, q_pe.contiguous(), k_pe.unsqueeze(1).contiguous())
        q = torch.cat((q_pe.reshape(-1, heads, rope), q_nope), dim=-1)
        k = torch.cat((k_pe.reshape(-1, rope), k_nope), dim=-1)
        # The scaled weights in the query's dtype, as torch_npu's indexer takes them.
        scaled = (weights.float() * self.weight_scale).to(q.dtype)
        _indexer_op()(q, k, scaled, self.topk_buffer, idx.k_cache.prefix)
        return self.topk_buffer

    def select(
        self, q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor,
        topk_buffer: torch.Tensor, layer_name: str,
    ) -> None:
        """The opaque op's body: this step's keys into the cache, the top-k into
        `topk_buffer` (the op's mutated argument: the model's buffer, as the graph hands
        it); nothing on the profiling run, which has no cache and no plan."""
        context = get_forward_context()
        metadata = _layer_metadata(context.attn_metadata, layer_name)
        cache = context.no_compile_layers[layer_name].kv_cache
        if metadata is None or cache.numel() == 0:
            return
        plan = metadata.plan
        tokens = plan.num_actual_tokens
        self.ops.write_index_keys(k[:tokens], cache, metadata.slot_mapping)
        assert plan.token_block_table is not None and plan.token_seq_lens is not None
        picked = self.ops.index_topk(
            q[:tokens], weights[:tokens], cache,
            plan.token_block_table, plan.token_seq_lens, plan.max_seq_len,
            self.indexer.topk_tokens,
        )
        topk_buffer[:tokens].copy_(picked)


def _layer_metadata(metadata: Any, layer_name: str) -> SparseMlaMetadata | None:
    if isinstance(metadata, list):
        metadata = metadata[0]
    if isinstance(metadata, dict):
        metadata = metadata.get(layer_name)
    assert metadata is None or isinstance(metadata, SparseMlaMetadata)
    return metadata


def _select_topk(
    q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, topk_buffer: torch.Tensor,
    layer_name: str,
) -> None:
    """SPARSE_INDEXER_OP: the named indexer-cache layer's indexer selects (in place)."""
    layer = get_forward_context().no_compile_layers[layer_name]
    indexer = getattr(layer, "sparse_indexer", None)
    assert isinstance(indexer, SparseIndexer), f"{layer_name}: not our indexer's cache"
    indexer.select(q, k, weights, topk_buffer, layer_name)


def _select_topk_fake(
    q: torch.Tensor, k: torch.Tensor, weights: torch.Tensor, topk_buffer: torch.Tensor,
    layer_name: str,
) -> None:
    return None


def _indexer_op() -> Callable[..., None]:
    """torch.ops.vllm.<SPARSE_INDEXER_OP>, registered on first use (once per process) for
    the serving platform's dispatch key, as vLLM registers its attention ops."""
    namespace = torch.ops.vllm
    if not hasattr(namespace, SPARSE_INDEXER_OP):
        from vllm.utils.torch_utils import direct_register_custom_op

        direct_register_custom_op(
            op_name=SPARSE_INDEXER_OP,
            op_func=_select_topk,
            mutates_args=["topk_buffer"],
            fake_impl=_select_topk_fake,
        )
    op: Callable[..., None] = getattr(namespace, SPARSE_INDEXER_OP)
    return op


def take_over_indexer(
    indexer: Any, topk_buffer: torch.Tensor, dtype: torch.dtype, ops: SparseMlaOps
) -> None:
    """Point vLLM's indexer module at our cache layout and forward (once per module).

    Its key-cache layer then asks vLLM for index_head_dim values a token in the model's
    dtype (the spec is built from these two attributes) under SparseIndexerBackend.
    """
    if isinstance(indexer.__dict__.get("forward"), SparseIndexer):
        return
    cache = indexer.k_cache
    cache.head_dim = indexer.head_dim
    cache.dtype = dtype
    cache.get_attn_backend = lambda: SparseIndexerBackend
    indexer.forward = cache.sparse_indexer = SparseIndexer(indexer, topk_buffer, ops)
    _indexer_op()  # registered before Dynamo meets the call


class SparseMlaAttentionImpl(MLAAttentionImpl[SparseMlaMetadata]):
    """forward_mqa for every token, over the rows the indexer picked."""

    is_sparse: ClassVar[bool] = True
    supports_dense_mha_prefill = False

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
        indexer: Any | None = None,
        topk_indices_buffer: torch.Tensor | None = None,
        **_: Any,
    ) -> None:
        unsupported = {
            "a sparse MLA layer without the model's top-k buffer": topk_indices_buffer is None,
            "sliding window": sliding_window is not None,
            "alibi": alibi_slopes is not None,
            "logits soft cap": bool(logits_soft_cap),
            "KV sharing": kv_sharing_target_layer_name is not None,
            f"kv_cache_dtype={kv_cache_dtype}": kv_cache_dtype != "auto",
            "decode context parallel": self.dcp_world_size > 1,
        }
        refuse_unsupported(
            unsupported,
            "The Ascend sparse MLA backend does not support",
            "serve a DeepSeek-V3.2 style model (MLA with the lightning indexer) without them",
            BackendSelectionError,
        )
        assert topk_indices_buffer is not None
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim
        self.topk_indices_buffer = topk_indices_buffer
        self.q_pad_num_heads = None
        ports = container()
        self.mla_ops = ports.mla_ops()
        self.ops = ports.sparse_mla_ops()
        from vllm.config import get_current_vllm_config

        config = get_current_vllm_config()
        model_dtype = config.model_config.dtype if config.model_config else torch.float32
        if indexer is not None:  # layers that reuse an earlier layer's top-k have none
            take_over_indexer(indexer, topk_indices_buffer, model_dtype, self.ops)
            self.ops.check(
                num_heads, kv_lora_rank, qk_rope_head_dim, indexer.n_head, indexer.head_dim,
                indexer.topk_tokens, int(config.cache_config.block_size or 0),
                str(model_dtype).removeprefix("torch."),
            )

    def record_logical_topk_ready(self) -> None:
        """vLLM's index-group hook after the indexer ran; the buffer is ready as written."""

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
        self.mla_ops.write_latent_cache(
            kv_c_normed, k_pe, latent_planes(kv_cache, self.kv_lora_rank), slot_mapping
        )

    def forward_mha(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the sparse MLA backend runs every token through forward_mqa")

    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: SparseMlaMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(q_nope W_UK [T, N, L], q_pe [T, N, R]) -> [T, N, L] over the top-k rows."""
        if isinstance(q, tuple):
            q_latent, q_rope = q
        else:
            q_latent, q_rope = q.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        plan = attn_metadata.plan
        assert plan.token_block_table is not None and plan.token_seq_lens is not None
        tokens = q_latent.shape[0]
        out = self.ops.sparse_attention(
            q_latent, q_rope, latent_planes(kv_c_and_k_pe_cache, self.kv_lora_rank),
            self.topk_indices_buffer[:tokens], plan.token_block_table[:tokens],
            plan.token_seq_lens[:tokens], self.scale,
        )
        return out, None
