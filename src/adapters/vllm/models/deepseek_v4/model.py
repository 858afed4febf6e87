"""DeepSeek-V4 (DeepseekV4ForCausalLM) as the plugin serves it on the host.

vLLM 0.33 picks its V4 class by platform (vllm/models/deepseek_v4/__init__.py): an
out-of-tree platform gets the NVIDIA class (TileLang hyper-connections, DeepGEMM MegaMoE,
FlashMLA, FlashInfer sparse attention, torch.cuda streams) and its CPU class needs vllm._C
CPU kernels and an fp8_ds_mla cache for head_dim 512. This class is the plugin's own: the
V4 math in this room's modules (checked against transformers' on the host), its norms,
rope, lightning indexer, attention and routed experts through the device's ports (the host's plain
torch or the NPU's torch_npu ops), the rest torch on the device; each attention layer's
per-token inputs in a paged cache of its own (input_cache.py). Eager: no
@support_torch_compile, so vLLM never traces it. One device (no tensor parallelism), no
MTP layers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import (
    ParallelLMHead,
    VocabParallelEmbedding,
)
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

from adapters.container import container
from adapters.vllm.models.deepseek_v4.attention import Norm
from adapters.vllm.models.deepseek_v4.hyper_connections import HyperHead
from adapters.vllm.models.deepseek_v4.input_cache import InputCache, InputCacheMetadata
from adapters.vllm.models.deepseek_v4.layers import DecoderLayer
from adapters.vllm.models.deepseek_v4.norms import rms_norm
from adapters.vllm.models.deepseek_v4.weight_names import checkpoint_name, expert_weight


class DeepseekV4Body(nn.Module):
    def __init__(self, config: Any, cache_dtype: torch.dtype, prefix: str) -> None:
        super().__init__()
        self.hc_mult, self.eps = config.hc_mult, float(config.rms_norm_eps)
        hidden, layers = config.hidden_size, range(config.num_hidden_layers)
        self.embed_tokens = VocabParallelEmbedding(
            config.vocab_size, hidden, prefix=f"{prefix}.embed_tokens"
        )
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in layers)
        self.caches = nn.ModuleList(
            InputCache(hidden, cache_dtype, f"{prefix}.layers.{i}.attn.input_cache")
            for i in layers
        )
        self.norm = Norm(hidden)
        self.ops = container().ops()
        self.hc_head = HyperHead(self.ops, config.hc_mult, hidden, float(config.hc_eps),
                                 self.eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids)
        streams = embeds.unsqueeze(1).expand(-1, self.hc_mult, -1).contiguous()
        meta = get_forward_context().attn_metadata
        for layer, cache in zip(self.layers, self.caches, strict=True):
            step = meta.get(cache.prefix) if isinstance(meta, dict) else None
            streams = layer(streams, input_ids, _attend(layer, cache, step))
        return rms_norm(self.ops, self.hc_head(streams), self.norm.weight, self.eps)


def _attend(
    layer: DecoderLayer, cache: InputCache, meta: InputCacheMetadata | None
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The layer's attention over this step: store the new rows, then each request's."""

    def attend(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        if meta is None:  # vLLM's profiling and dummy runs: no requests, no cache
            return out
        cache.store(x, meta)
        for request in range(len(meta.seq_lens)):
            context, new = cache.context(meta, request)
            start = meta.query_starts[request]
            out[start:start + new] = layer.attn(context.to(x.dtype), new)
        return out

    return attend


class AscendDeepseekV4ForCausalLM(nn.Module):
    """The plugin's DeepSeek-V4 class (registered for DeepseekV4ForCausalLM)."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        cache_dtype = vllm_config.model_config.dtype
        named = vllm_config.cache_config.cache_dtype
        if named != "auto":  # the plan allows bfloat16 and float16 besides
            cache_dtype = STR_DTYPE_TO_TORCH_DTYPE[named]
        self.model = DeepseekV4Body(config, cache_dtype, f"{prefix}.model" if prefix else "model")
        self.head = ParallelLMHead(config.vocab_size, config.hidden_size, prefix="head")
        self.logits_processor = LogitsProcessor(config.vocab_size)

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor,
                intermediate_tensors: object = None, inputs_embeds: torch.Tensor | None = None,
                **_: object) -> torch.Tensor:
        if input_ids is None:
            raise ValueError(
                "the plugin's DeepSeek-V4 class needs token ids (its first MoE layers route "
                "by token id): prompt embeddings are not served"
            )
        return self.model(input_ids)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        return self.logits_processor(self.head, hidden_states)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        buffers = dict(self.named_buffers())
        loaded: set[str] = set()
        for raw, tensor in weights:
            name = checkpoint_name(raw)
            if name is None:
                continue
            expert = expert_weight(name)
            if expert is not None:
                stacked, index, part = expert
                self.get_submodule(stacked).load_expert(index, part, tensor)
                loaded.add(f"{stacked}.{'w2' if part == 'w2' else 'w13'}")
                continue
            if name in params:
                param = params[name]
                loader = getattr(param, "weight_loader", default_weight_loader)
                loader(param, tensor)
            elif name in buffers:
                buffers[name].copy_(tensor)
            else:
                raise KeyError(f"DeepSeek-V4 checkpoint weight {raw!r} has no place in the model")
            loaded.add(name)
        return loaded
