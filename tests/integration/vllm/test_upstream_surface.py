"""Every vLLM internal the adapter leans on, checked against the installed vLLM.

An upgrade that renames or removes one of these fails here, naming the symbol, before
anything fails at serving time. What can be read from the code is derived from it, so the
list cannot drift from what the code does:

- every vLLM name the adapters' source imports or reads off an imported name (their AST);
- every symbol of the core's patch registry (ascend_core.patches.entries);
- every hook our vLLM subclasses define: a method or attribute a vLLM base class declares
  (found by walking the classes of adapters.vllm), and the KV-cache layouts our backends
  declare. A hook vLLM drops or renames becomes a name no vLLM class declares: every such
  name must be one of ours, listed in OWN, so the rename fails here.

What the code reaches without naming it (vLLM methods called on instances, config fields
read, vLLM's side of a hook we rely on) is listed by hand in NOT_NAMED.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

import adapters

ADAPTERS = Path(adapters.__file__).resolve().parent
ROOT_PACKAGE = "vllm"

# (symbol "module:Attr.sub", how the adapter relies on it) for what the code reaches
# without naming it in an import.
NOT_NAMED: tuple[tuple[str, str], ...] = (
    # Platform and config: read on instances vLLM hands us.
    ("vllm.platforms.interface:Platform._find_non_ssm_backends", "private: backends in use"),
    ("vllm.platforms.interface:Platform.is_unspecified", "nothing served: repeat our reason"),
    ("vllm.platforms:_current_platform",
     "private: the declined plugin's exit hook reads which platform served"),
    ("vllm.utils.torch_utils:current_stream", "asks Platform.current_stream off CUDA/CPU"),
    ("vllm.config:VllmConfig.lora_config", "the LoRA switch for the support matrix"),
    # LoRA: vLLM asks Platform.get_punica_wrapper for our wrapper class by its path; the
    # wrapper writes and reads the base's mapping buffers (_token_lora_indices,
    # _sampler_indices, _sampler_indices_padded, _embeddings_indices and indices_len, set
    # in its __init__; vLLM's embedding layer reads _embeddings_indices: checked by
    # tests/integration/vllm/test_lora_generate.py and unit/vllm/test_punica_metadata.py).
    ("vllm.lora.punica_wrapper.punica_selector:get_punica_wrapper",
     "builds the class Platform.get_punica_wrapper names"),
    ("vllm.lora.punica_wrapper.punica_base:PunicaWrapperBase.update_metadata",
     "overridden: vLLM's LoRA model manager hands it each step's mapping"),
    ("vllm.lora.punica_wrapper.punica_base:PunicaWrapperBase._select_full_linear_output",
     "private: apply_lora_full_linear's row selection"),
    ("vllm.config:VllmConfig.speculative_config", "MLA: are the host seq lens exact"),
    ("vllm.config:ModelConfig.is_multimodal_model", "model facts: multimodal"),
    ("vllm.config:ModelConfig.multimodal_config", "which towers take inputs (mm_off)"),
    ("vllm.config.multimodal:MultiModalConfig.get_limit_per_prompt",
     "a modality limited to 0 leaves its tower idle"),
    ("vllm.config:ModelConfig.is_encoder_decoder", "model facts: encoder-decoder"),
    ("vllm.config:ParallelConfig.local_world_size", "host default: workers sharing the RAM"),
    ("vllm.config:ParallelConfig.use_ray",
     "the Ray executor: the patch plan's Feature.RAY, a worker's device from Ray"),
    ("vllm.config:CacheConfig.gpu_memory_utilization",
     "its default counts as not given (VLLM_DEFAULT_UTILIZATION)"),
    # Worker and model runner: called on the runner and the KV spec.
    ("vllm.v1.worker.gpu_worker:Worker.randomize_dummy_inputs", "profile_run argument"),
    # Profiling: vLLM's worker drives the profiler our worker sets (adapters/vllm/
    # profiling.py; its lifecycle checked in tests/integration/vllm/test_profiler_binding.py).
    ("vllm.v1.worker.gpu_worker:Worker.profile",
     "/start_profile, /stop_profile: set_output_name, set_profiler_kwargs, start, stop"),
    ("vllm.v1.worker.gpu_worker:Worker.annotate_profile",
     "each step: step, should_annotate, annotate_context_manager"),
    ("vllm.profiler.wrapper:validate_worker_profiler_config",
     "Worker.__init__ calls it: it refuses the npu device type, so it is skipped there"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.get_kv_cache_spec", "KV bytes/seq"),
    ("vllm.v1.kv_cache_interface:KVCacheSpec.max_memory_usage_bytes", "KV bytes/seq"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.capture_model",
     "the worker lets vLLM capture the plan's graphs"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.profile_cudagraph_memory",
     "graph memory in the KV budget"),
    # Sleep mode (the runner's kv_caches and the worker's _sleep_saved_buffers are set in
    # __init__, so instance data: tests/integration/npu/test_sleep_on_emulated_npu.py).
    ("vllm.config:ModelConfig.sleep_preserve_parameter_names", "refused at level 2"),
    ("vllm.compilation.cuda_graph:CUDAGraphWrapper.clear_all_graphs",
     "sleep drops the graphs, waking captures them again"),
    ("vllm.v1.worker.gpu.cudagraph_utils:CudaGraphManager.release_graphs",
     "sleep drops V2's FULL graphs (its graph manager's), waking captures them again"),
    ("vllm.v1.worker.gpu_worker:Worker.reload_weights", "RL weight updates (collective_rpc)"),
    ("vllm.v1.worker.gpu_worker:Worker.discard",
     "release_kv_cache_memory reaches it: our worker serves it through the sleep port"),
    ("vllm.distributed.kv_transfer.kv_connector.v1.base:KVConnectorBase_V1.unregister_kv_caches",
     "a discarded KV cache is unregistered, and restored (restore_kv_caches) on waking"),
    ("vllm.platforms.interface:Platform.get_global_graph_pool",
     "CUDAGraphWrapper's pool, from our graph_pool_handle"),
    # KV transfer: what the plan reads off kv_transfer_config, and vLLM's side of our
    # MooncakeConnectorV1 (adapters/vllm/kv_transfer/connector.py).
    ("vllm.config:VllmConfig.kv_transfer_config", "P/D: the connector and its options"),
    ("vllm.config:KVTransferConfig.kv_connector_extra_config", "the reference's keys"),
    ("vllm.config:KVTransferConfig.kv_connector_module_path", "where MooncakeConnectorV1 is"),
    ("vllm.v1.outputs:KVConnectorOutput.finished_recving", "per-request received-KV log"),
    ("vllm.v1.outputs:KVConnectorOutput.failed_recving", "per-request failed-load log"),
    ("vllm.v1.outputs:KVConnectorOutput.invalid_block_ids", "per-request failed-load log"),
    ("vllm.v1.core.kv_cache_manager:KVCacheBlocks.get_block_ids", "a request's local blocks"),
    ("vllm.config:KVTransferConfig.kv_load_failure_policy", "logged with a failed load"),
    ("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector:"
     "MooncakeConnector.request_finished_all_groups", "the scheduler calls it (HMA)"),
    ("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector:"
     "MooncakeConnectorWorker._build_transfer_params",
     "private: the prefill side drops requests past their hold before a write"),
    ("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector:"
     "SendBlockMeta.expire_time", "the end of a request's hold on the prefill side"),
    ("vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector:"
     "MooncakeConnectorWorker.receive_kv_from_single_worker",
     "its pull socket's receive timeout, from the worker's zmq context, is the deadline"),
    ("vllm.config:CompilationConfig.static_forward_context",
     "P/D: the layers our MLA backends read as two planes (adapters/vllm/kv_transfer/layout.py)"),
    ("vllm.forward_context:ForwardContext.attn_metadata",
     "a FULL graph's replay updates the attention ops' host lengths from the step's plans"),
    ("vllm.config:SchedulerConfig.max_num_batched_tokens",
     "the paged builder's persistent slot buffer"),
    # Attention: read in the metadata builders.
    ("vllm.v1.attention.backend:CommonAttentionMetadata.seq_lens_cpu_upper_bound",
     "host-side seq lens for the NPU step plan and the MLA lengths (exact unless "
     "speculative decoding runs under async scheduling)"),
    ("vllm.v1.attention.backend:AttentionMetadataBuilder._init_reorder_batch_threshold",
     "private: the MLA builder's threshold, 1 + k with speculative decoding"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.calculate_reorder_batch_threshold",
     "reads each builder's reorder_batch_threshold after the KV cache is set up"),
    # Custom ops: vLLM's registration and the private method our rope relies on.
    ("vllm.model_executor.custom_op:CustomOp.register_oot", "our layers replace vLLM's"),
    ("vllm.model_executor.layers.rotary_embedding.base:"
     "RotaryEmbeddingBase._match_cos_sin_cache_dtype", "private: cache in query dtype"),
    # Fused MoE: vLLM's side of our monolithic method.
    ("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method:"
     "UnquantizedFusedMoEMethod.create_weights", "reused: w13 [E, 2I, H], w2 [E, H, I]"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.forward_monolithic",
     "calls apply_monolithic with router logits"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.expert_map",
     "global -> local expert ids under expert parallel"),
    ("vllm.model_executor.layers.fused_moe.runner.moe_runner:MoERunner._apply_quant_method",
     "private: branches on is_monolithic"),
    # MLA: vLLM's MLAAttention layer calls our backend.
    ("vllm.model_executor.layers.attention.mla_attention:MLAAttention.forward_impl",
     "calls forward_mha (prefill rows) and forward_mqa (decode rows first)"),
    ("vllm.model_executor.layers.attention.mla_attention:MLAAttention.update_kv_cache",
     "calls do_kv_cache_update before attention"),
    ("vllm.model_executor.layers.attention.mla_attention:MLAAttention.get_kv_cache_spec",
     "the latent spec: one slot of kv_lora_rank + rope per token"),
    # Sparse MLA (DSA): the backend takes over vLLM's DeepSeek-V3.2 indexer module.
    ("vllm.model_executor.layers.mla:MultiHeadLatentAttentionWrapper.forward",
     "calls the indexer module, then impl.record_logical_topk_ready, then the MLA layer"),
    ("vllm.model_executor.layers.attention.sparse_mla_attention:"
     "SparseMLACommonImpl.record_logical_topk_ready", "the hook ours answers"),
    ("vllm.model_executor.models.deepseek_v2:Indexer.forward",
     "replaced per instance by SparseIndexer (unquantized scoring)"),
    ("vllm.model_executor.models.deepseek_v2:DeepseekV32IndexerCache.get_kv_cache_spec",
     "built from the head_dim and dtype we set: the indexer keys' own cache"),
    ("vllm.model_executor.models.deepseek_v2:DeepseekV32IndexerCache.bind_kv_cache",
     "gives the indexer module its [blocks, block_size, D] cache"),
    # Quantization: vLLM's loaders call ours.
    ("vllm.model_executor.layers.linear:adjust_scalar_to_fused_array",
     "per-tensor input_scale per shard (param attr needs_scalar_to_array)"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.weight_loader",
     "wrapped: (param, loaded_weight, weight_name, shard_id, expert_id, return_success)"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.load_weights",
     "calls each param's weight_loader per expert"),
    # Qwen3-Next's GDN layer (adapters/vllm/layers/gdn.py): vLLM's op calls our core.
    ("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn:qwen_gdn_attention_core",
     "the custom op forward_cuda calls; it calls the layer's _forward_core"),
    ("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn:"
     "QwenGatedDeltaNetAttention.forward_cuda", "projections, the op, the gated norm"),
    ("vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn:"
     "QwenGatedDeltaNetAttention._forward_core", "private: the core we replace"),
    ("vllm.v1.attention.backends.gdn_attn:GDNAttentionMetadata.prefill_query_start_loc",
     "the prefills' rows (rebased after the decodes)"),
    ("vllm.v1.attention.backends.gdn_attn:GDNAttentionMetadata.prefill_has_initial_state",
     "whether each prefill continues from its state slot"),
    ("vllm.v1.attention.backends.gdn_attn:GDNAttentionMetadata.non_spec_state_indices_tensor",
     "each sequence's state slot, decodes first"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._zero_block_ids",
     "private: the NPU runner zeroes new hybrid blocks without Triton"),
    # A uniform decode step's inputs on the host (adapters/vllm/worker/host_decode_inputs.py): the
    # runner's own helpers and buffers it calls and writes instead of the device way.
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._get_cumsum_and_arange",
     "private: the batch's cumulative token counts"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._compute_prev_positions",
     "private: last step's row of each request"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._prepare_input_ids",
     "private: last step's sampled ids into input_ids"),
    ("vllm.v1.worker.block_table:MultiGroupBlockTable.commit_block_table",
     "the block table to the device"),
    # The FULL decode graph's sampling tail (adapters/vllm/worker/npu_model_runner.py):
    # the runner's hooks around it and the sampling facts that say a batch is plain greedy.
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._sample",
     "private: the graph's greedy ids instead of the sampler's"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward",
     "private: the replay waits for the last ids' copy to the host"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner._get_or_create_async_output_copy_stream",
     "private: the async_output_copy_stream attribute the replay waits on"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.synchronize_input_prep",
     "waits for prepare_inputs_event before a step's inputs: the staging arena's copy "
     "records it again (staging_arena.py)"),
    ("vllm.v1.worker.gpu_input_batch:InputBatch.update_async_output_token_ids",
     "called as vLLM's _sample calls it"),
    ("vllm.v1.sample.metadata:SamplingMetadata.all_greedy", "greedy tail: every request"),
    ("vllm.v1.sample.metadata:SamplingMetadata.max_num_logprobs", "greedy tail: no logprobs"),
    ("vllm.v1.sample.metadata:SamplingMetadata.logprob_token_ids", "greedy tail: none"),
    ("vllm.v1.sample.metadata:SamplingMetadata.no_penalties", "greedy tail: no penalties"),
    ("vllm.v1.sample.metadata:SamplingMetadata.allowed_token_ids_mask", "greedy tail: none"),
    ("vllm.v1.sample.metadata:SamplingMetadata.bad_words_token_ids", "greedy tail: none"),
    ("vllm.v1.sample.metadata:SamplingMetadata.logitsprocs", "greedy tail: idle ones only"),
    ("vllm.v1.sample.metadata:SamplingMetadata.thinking_budget_state_holder",
     "greedy tail: no thinking budget"),
    ("vllm.v1.sample.logits_processor.state:LogitsProcessors",
     "greedy tail: its non_argmax_invariant list (set in __init__), what moves an argmax"),
    ("vllm.v1.sample.logits_processor.builtin:LogitBiasLogitsProcessor",
     "greedy tail: idle while its biases are empty"),
    ("vllm.v1.sample.logits_processor.builtin:MinTokensLogitsProcessor",
     "greedy tail: idle while its min_toks are empty"),
    ("vllm.v1.worker.gpu.buffer_utils:is_uva_available",
     "the NPU's V2 runner answers no (no UVA on an NPU): V2's explicit-copy buffers"),
    ("vllm.v1.worker.gpu.buffer_utils:NonUvaBuffer", "what V2 then builds"),
    ("vllm.model_executor.models.config:MambaModelConfig.verify_and_update_config",
     "sets mamba_cache_mode align before the plan turns prefix caching off"),
)

# Methods and attributes our vLLM subclasses define that no vLLM class declares: ours.
# A name missing here is either a new one of ours (add it) or a hook vLLM dropped or
# renamed (follow vLLM: our override is no longer called).
OWN: frozenset[str] = frozenset({
    # DeepSeek-V4's per-layer input cache (adapters/vllm/models/deepseek_v4/input_cache.py).
    "adapters.vllm.models.deepseek_v4.input_cache:InputCache.context",
    "adapters.vllm.models.deepseek_v4.input_cache:InputCache.rows",
    "adapters.vllm.models.deepseek_v4.input_cache:InputCache.store",
    # Expert parallelism's token exchange, set when the unquantized method's weights load.
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.exchange",
    # --enable-eplb: the layer's EplbLayerState (layers/eplb.py) and the host runner's
    # registration of the EPLB state vLLM's CPU runner does not make.
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.eplb",
    "adapters.vllm.worker.host_model_runner:HostModelRunner._register_eplb",
    # vLLM's vllm::qwen_gdn_attention_core op calls the named layer's _forward_core; vLLM
    # declares it on its GDN layer, not on the KDA layer's base.
    "adapters.vllm.layers.kda:AscendKimiDeltaAttention._forward_core",
    # The int8 linear methods' own load hooks (W8A8 and W8A16 share Int8LinearMethod).
    "adapters.vllm.quantization.linear:AscendW8A16LinearMethod.prepare",
    "adapters.vllm.quantization.linear:AscendW8A16LinearMethod.reshape_loaded",
    "adapters.vllm.quantization.linear:AscendW8A16LinearMethod.scheme",
    "adapters.vllm.quantization.linear:Int8LinearMethod.prepare",
    "adapters.vllm.quantization.linear:Int8LinearMethod.reshape_loaded",
    # vLLM's MLA wrapper calls it on every sparse impl (NOT_NAMED); declared only on
    # vLLM's own sparse impls, none of them our base.
    "adapters.vllm.attention.sparse_mla:SparseMlaAttentionImpl.record_logical_topk_ready",
    "adapters.vllm.attention.mla_metadata:MlaMetadata.decode",
    # A FULL graph's replay asks each step's metadata for its ops' host-side arguments.
    "adapters.vllm.attention.metadata:PagedMetadata.graph_host_arguments",
    "adapters.vllm.attention.mla_metadata:MlaMetadata.graph_host_arguments",
    "adapters.vllm.attention.sparse_mla:SparseMlaMetadata.graph_host_arguments",
    "adapters.vllm.attention.mla_metadata:MlaMetadata.prefill",
    "adapters.vllm.attention.mla_metadata:MlaMetadata.prefill_has_context",
    "adapters.vllm.attention.metadata:PagedMetadataBuilder._writable_slots",
    "adapters.vllm.attention.mla_metadata:MlaMetadataBuilder._rows_table",
    "adapters.vllm.worker.npu_model_runner:NpuGraphWrapper._attention_layers",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._host_decode_serves",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._positions_staging",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._padding_written",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._host_slots_pending",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._host_positions",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._host_decode_served",
    "adapters.vllm.worker.communicator:NpuDeviceCommunicator._staged",
    "adapters.vllm.kv_transfer.connector:MooncakeConnectorV1._forget",
    "adapters.vllm.kv_transfer.connector:MooncakeConnectorV1._say_load_failed",
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.routed_experts",
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.exchanged",
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.routing_rule",
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.expert_mlp",
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.run_experts",
    "adapters.vllm.layers.fused_moe:AscendMoeMethod.traced_in_graph",
    "adapters.vllm.layers.fused_moe:AscendUnquantizedFusedMoEMethod.routed_experts",
    "adapters.vllm.worker.npu_model_runner:NpuGraphWrapper._weak",
    "adapters.vllm.worker.npu_model_runner:NpuGraphWrapper._capture",
    "adapters.vllm.worker.npu_model_runner:NpuModelRunner._bind_sampled_tail",
    # The model's logits, those of the FULL graph just replayed when they are its rows.
    "adapters.vllm.worker.npu_model_runner:NpuGraphWrapper.compute_logits",
    "adapters.vllm.engine.platform:AscendHostPlatform.device_kind",
    "adapters.vllm.worker.profiling:PortProfiler.request",
    "adapters.vllm.engine.platform:AscendNpuPlatform.chip_family",
    "adapters.vllm.engine.platform:AscendNpuPlatform.device_kind",
    # vLLM calls these by name without declaring them (Platform.__getattr__ would hand
    # it torch.npu's; the graph role of the runtime port answers instead).
    "adapters.vllm.engine.platform:AscendNpuPlatform.current_stream",
    "adapters.vllm.engine.platform:AscendNpuPlatform.graph_pool_handle",
    "adapters.vllm.engine.platform:AscendPlatformBase.apply_deployment_patches",
    "adapters.vllm.engine.platform:AscendPlatformBase.chip_family",
    "adapters.vllm.engine.platform:AscendPlatformBase.config_ports",
    # vLLM calls it by name without declaring it (NOT_NAMED: torch_utils.current_stream).
    "adapters.vllm.engine.platform:AscendPlatformBase.current_stream",
    "adapters.vllm.engine.platform:AscendPlatformBase.runtime",
    "adapters.vllm.engine.platform:AscendPlatformBase.tensors_on_host",
    "adapters.vllm.quantization.config:AscendQuantConfig.fused_shards",
    "adapters.vllm.quantization.linear:AscendW8A8DynamicLinearMethod.finish",
    "adapters.vllm.quantization.linear:AscendW8A8DynamicLinearMethod.scheme",
    "adapters.vllm.quantization.linear:AscendW8A8LinearMethod.finish",
    "adapters.vllm.quantization.linear:AscendW8A8LinearMethod.scheme",
    "adapters.vllm.quantization.linear:Int8LinearMethod._checked",
    "adapters.vllm.quantization.linear:Int8LinearMethod._checkpoint_name",
    "adapters.vllm.quantization.linear:Int8LinearMethod.finish",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod._check_scale_bias",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod._check_shape",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod._checked",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod._refuse_sizes",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod.finish",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod.prepare",
    "adapters.vllm.quantization.linear_w4a8:AscendW4A8DynamicLinearMethod.scheme",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod._checked",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod._checkpoint_name",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod._require_loaded",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod._check_loaded",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod._check_shape",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod._param_shape",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod.held_experts",
    # W4A8_DYNAMIC experts: the int4 layout's shapes and its scale_bias check.
    "adapters.vllm.quantization.moe_w4a8:AscendW4A8DynamicMoeMethod._check_scale_bias",
    "adapters.vllm.quantization.moe_w4a8:AscendW4A8DynamicMoeMethod._check_shape",
    "adapters.vllm.quantization.moe_w4a8:AscendW4A8DynamicMoeMethod._param_shape",
    "adapters.vllm.quantization.moe_w4a8:AscendW4A8DynamicMoeMethod.run_experts",
    "adapters.vllm.quantization.moe_w4a8:AscendW4A8DynamicMoeMethod.scheme",
    # compressed-tensors W4A16 experts (patch ct-wna16-moe-int4): the port's layout.
    "adapters.vllm.quantization.moe_w4a16:AscendW4A16MoeMethod._refuse_unservable",
    "adapters.vllm.quantization.moe_w4a16:AscendW4A16MoeMethod.routed_experts",
    "adapters.vllm.quantization.moe_w4a16:AscendW4A16MoeMethod.run_experts",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod.exchanged",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod.run_experts",
    "adapters.vllm.quantization.moe:AscendW8A8DynamicMoeMethod.scheme",
    "adapters.vllm.worker.worker:DeviceWorker._announce_compile",
    "adapters.vllm.worker.worker:DeviceWorker.device_index",
    "adapters.vllm.worker.worker:DeviceWorker._drop_graphs_if_moved",
    "adapters.vllm.worker.worker:DeviceWorker._track",
    "adapters.vllm.worker.worker:DeviceWorker._graph_memory_estimate",
    "adapters.vllm.worker.worker:DeviceWorker._graphs_captured",
    "adapters.vllm.worker.worker:DeviceWorker._host_workers",
    "adapters.vllm.worker.worker:DeviceWorker._kv_cache_tensors",
    "adapters.vllm.worker.worker:DeviceWorker._log_release",
    "adapters.vllm.worker.worker:DeviceWorker._one_sequence_bytes",
    "adapters.vllm.worker.worker:DeviceWorker._profile_memory",
    "adapters.vllm.worker.worker:HostWorker.runner_path",
    "adapters.vllm.worker.worker:NpuWorker.runner_path",
    "adapters.vllm.worker.worker:DeviceWorker.runner_v2_path",
    "adapters.vllm.worker.worker:NpuWorker.runner_v2_path",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._scope",
    # Sleep level 2 on V2: only the model loader's call runs in the weights' pool.
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2.weights_pool",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._model_loads_in",
    # V2's FULL decode graphs record their rows' logits; the runner samples from them.
    "adapters.vllm.worker.npu_graphs_v2:NpuCudaGraphManager._capture_logits",
    "adapters.vllm.worker.npu_graphs_v2:NpuCudaGraphManager._records_logits",
    "adapters.vllm.worker.npu_graphs_v2:NpuCudaGraphManager.last_logits",
    "adapters.vllm.worker.npu_graphs_v2:NpuCudaGraphManager.logits",
    "adapters.vllm.worker.npu_graphs_v2:NpuCudaGraphManager.logits_graphs",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._graph_logits",
    # V2's FULL decode graphs record a greedy tail (v2_decode_tail.py): its ids and update.
    "adapters.vllm.worker.npu_graphs_v2:NpuCudaGraphManager.tail",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._bind_tail",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._staging_tail",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._tail_sample",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._tail_serves",
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._host_inputs_serve",
    # ... its attention builders stage in the tail's arena (v2_host_block_tables.py too).
    "adapters.vllm.worker.npu_model_runner_v2:NpuModelRunnerV2._arena_builders",
    # This wave: the staging arena's runner state and builders' opt-in, hybrid MLA's
    # block-local planes, the encoder attention's host lengths.
    "adapters.vllm.attention.metadata:PagedMetadataBuilder.use_arena",
    "adapters.vllm.attention.mla:MlaAttentionImpl._planes",
    "adapters.vllm.attention.mla_metadata:MlaMetadataBuilder.use_arena",
    "adapters.vllm.layers.vision:AscendMMEncoderAttention._lengths",
    "adapters.vllm.layers.vision:AscendMMEncoderAttention._offsets",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._arena",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._arena_refusal",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._arena_reqs_padded",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._arena_seq_lens",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._arena_slot_block",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._sampling_stage",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._sampled_step",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._stage_sampling",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._bind_staging_arena",
    "adapters.vllm.worker.host_decode_inputs:HostDecodeInputsMixin._staging_arena_bytes",
})


def _is_vllm(module: str | None) -> bool:
    return (module or "").split(".")[0] == ROOT_PACKAGE


def _named_in_source(root: Path = ADAPTERS) -> dict[str, str]:
    """vLLM symbols the adapters' source names -> where first named (file:line).

    Imports from vLLM, attribute chains read off an imported vLLM name
    (`KVCacheLayout.LHBNC`, `envs.environment_variables`) and `getattr(name, "literal")`.
    """
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(root.parent)
        bound: dict[str, str] = {}  # local name -> "module:Attr" (or "module:" for a module)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_vllm(node.module):
                for alias in node.names:
                    bound[alias.asname or alias.name] = f"{node.module}:{alias.name}"
                    found.setdefault(f"{node.module}:{alias.name}", f"{where}:{node.lineno}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_vllm(alias.name):
                        name = alias.asname or alias.name.split(".")[0]
                        bound[name] = f"{alias.name if alias.asname else ROOT_PACKAGE}:"

        def join(base: str, attrs: list[str]) -> str:
            return base + ("" if base.endswith(":") else ".") + ".".join(attrs)

        for node in ast.walk(tree):
            symbol = None
            if isinstance(node, ast.Attribute):
                attrs: list[str] = []
                current: ast.expr = node
                while isinstance(current, ast.Attribute):
                    attrs.insert(0, current.attr)
                    current = current.value
                if isinstance(current, ast.Name) and current.id in bound:
                    symbol = join(bound[current.id], attrs)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in bound
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                symbol = join(bound[node.args[0].id], [node.args[1].value])
            if symbol is not None:
                found.setdefault(symbol, f"{where}:{node.lineno}")
    return found


def _declares(cls: type, name: str) -> bool:
    return name in vars(cls) or name in vars(cls).get("__annotations__", {})


def _our_vllm_subclasses() -> Iterator[tuple[type, list[type]]]:
    """Each class adapters.vllm defines with a vLLM class among its bases, and those bases."""
    import adapters.vllm as package

    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                bases = [b for b in cls.__mro__[1:] if _is_vllm(b.__module__)]
                if bases:
                    yield cls, bases


def _defined(cls: type) -> list[str]:
    return [n for n in vars(cls) if not n.startswith("__") and n != "_abc_impl"]


def _hooks_and_own() -> tuple[dict[str, str], set[str]]:
    """(vLLM symbol of each hook we define -> the class defining it, names of our own)."""
    hooks: dict[str, str] = {}
    own: set[str] = set()
    for cls, bases in _our_vllm_subclasses():
        for name in _defined(cls):
            base = next((b for b in bases if _declares(b, name)), None)
            if base is None:
                own.add(f"{cls.__module__}:{cls.__qualname__}.{name}")
            else:
                hooks.setdefault(f"{base.__module__}:{base.__qualname__}.{name}", cls.__name__)
    return hooks, own


def _resolve(symbol: str) -> object:
    """The object `module:Attr.sub` names. Submodules are imported; a class's fields count
    (dataclass, pydantic, annotations); past an instance the rest is its data, not checked."""
    module_name, _, path = symbol.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in filter(None, path.split(".")):
        if isinstance(obj, types.ModuleType):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
        elif inspect.isclass(obj):
            if hasattr(obj, part):
                obj = getattr(obj, part)
            elif any(
                part in getattr(k, "__dataclass_fields__", {})
                or part in vars(k).get("__annotations__", {})
                or part in (getattr(k, "model_fields", None) or {})
                for k in obj.__mro__
            ):
                return obj
            else:
                raise AttributeError(f"{obj.__qualname__} has no attribute {part!r}")
        else:
            return obj
    return obj


def _check(symbol: str, use: str) -> None:
    try:
        _resolve(symbol)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{symbol} ({use}) is gone from the installed vLLM: {exc}")


NAMED = _named_in_source()


@pytest.mark.parametrize(("symbol", "where"), sorted(NAMED.items()), ids=sorted(NAMED))
def test_what_the_adapters_name_exists(symbol: str, where: str) -> None:
    _check(symbol, f"named in {where}")


@pytest.mark.parametrize(("symbol", "use"), NOT_NAMED, ids=[s for s, _ in NOT_NAMED])
def test_what_the_adapters_reach_without_naming_exists(symbol: str, use: str) -> None:
    _check(symbol, use)


def test_every_patch_registry_symbol_exists() -> None:
    from ascend_core.patches import REGISTRY

    for spec in REGISTRY:
        for symbol in spec.symbols():
            _check(symbol, f"patch {spec.id}")


def test_the_source_scan_sees_imports_attributes_and_getattr() -> None:
    """Guards the derivation: names known to be in the adapters' source are found."""
    for symbol in (
        "vllm.v1.attention.backend:AttentionBackend",  # an import
        "vllm.platforms.interface:PlatformEnum.OOT",  # an attribute of an imported name
        "vllm:envs.environment_variables",  # an attribute of an imported module
    ):
        assert symbol in NAMED, symbol


def test_every_hook_we_define_is_declared_by_vllm_or_is_ours() -> None:
    hooks, own = _hooks_and_own()
    # The derivation sees the hooks of the attention backend and the platform.
    assert {
        "vllm.v1.attention.backend:AttentionBackend.customize_spec",
        "vllm.v1.attention.backend:AttentionBackend.supported_kv_cache_layouts",
        "vllm.platforms.interface:Platform.check_and_update_config",
    } <= set(hooks)
    for symbol, cls in hooks.items():
        _check(symbol, f"hook {cls} overrides")
    unknown = sorted(own - OWN)
    assert not unknown, (
        "no vLLM class declares these names our vLLM subclasses define: if vLLM dropped or "
        "renamed the hook, follow it; if the name is ours, add it to OWN: " + ", ".join(unknown)
    )
    stale = sorted(OWN - own)
    assert not stale, f"OWN lists names no longer ours (gone, or now a vLLM hook): {stale}"


def test_the_kv_cache_layouts_our_backends_declare_are_vllms() -> None:
    from vllm.v1.attention.backend import AttentionBackend
    from vllm.v1.kv_cache_layout import KVCacheLayout

    declared = {
        cls.__name__: cls.supported_kv_cache_layouts() or ()  # None: vLLM's default
        for cls, _ in _our_vllm_subclasses()
        if issubclass(cls, AttentionBackend)
    }
    assert any(declared.values()), f"no attention backend declares a layout: {declared}"
    for name, layouts in declared.items():
        for layout in layouts:
            assert KVCacheLayout[layout.name] is layout, (name, layout)


def test_slot_mapping_override_takes_the_kernel_arguments_by_name() -> None:
    from adapters.vllm.patches.kernel_bindings import slot_mapping_kernel

    kernel = _resolve("vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel")
    names = getattr(kernel, "arg_names", None) or tuple(
        inspect.signature(getattr(kernel, "fn", kernel)).parameters
    )
    compute_slot_mapping = slot_mapping_kernel(None)  # type: ignore[arg-type]
    assert tuple(inspect.signature(compute_slot_mapping).parameters) == tuple(names)


_SPEC_UTILS = "vllm.v1.spec_decode.utils"


@pytest.mark.parametrize(
    ("kernel", "binding"),
    [
        (f"{_SPEC_UTILS}:eagle_step_slot_mapping_metadata_kernel", "eagle_step_kernel"),
        (f"{_SPEC_UTILS}:eagle_prepare_inputs_padded_kernel", "eagle_prepare_inputs_kernel"),
        (f"{_SPEC_UTILS}:eagle_prepare_next_token_padded_kernel", "eagle_next_token_kernel"),
        (f"{_SPEC_UTILS}:copy_and_expand_eagle_inputs_kernel", "eagle_expand_inputs_kernel"),
        ("vllm.v1.sample.rejection_sampler:expand_kernel", "expand_kernel"),
    ],
)
def test_kernel_overrides_take_the_kernel_arguments_by_name(kernel: str, binding: str) -> None:
    """vLLM's KernelOverride forwards by name only when the names are the kernel's."""
    from adapters.vllm.patches import kernel_bindings

    original = _resolve(kernel)
    names = getattr(original, "arg_names", None) or tuple(
        inspect.signature(getattr(original, "fn", original)).parameters
    )
    ours = getattr(kernel_bindings, binding)(None)
    assert ours.__name__ == kernel.rpartition(":")[2]
    assert tuple(inspect.signature(ours).parameters) == tuple(names)


def test_the_rejection_samplers_expand_kernel_is_one_vllm_lets_a_platform_replace() -> None:
    """spec-expand-kernel-torch uses vLLM's kernel-override registry, not a rebind: the
    registry's own platform (CPU) names this kernel, so the seam is vLLM's to keep."""
    from vllm.platforms.cpu import CpuPlatform

    source = inspect.getsource(CpuPlatform.register_triton_kernel_overrides)
    assert '"vllm.v1.sample.rejection_sampler.expand_kernel"' in source


def test_the_registered_method_name_is_the_cores() -> None:
    from adapters.vllm.quantization.config import METHOD_NAME, AscendQuantConfig
    from ascend_core.quantization import QuantMethod

    assert QuantMethod.ASCEND.value == METHOD_NAME
    assert AscendQuantConfig.get_config_filenames() == ["quant_model_description.json"]


def test_core_graph_and_compile_enums_mirror_vllm() -> None:
    from vllm.config import CompilationMode, CUDAGraphMode

    from ascend_core.deployment import CompileMode, GraphMode

    assert set(CompileMode.__members__) <= set(CompilationMode.__members__)
    assert set(GraphMode.__members__) <= set(CUDAGraphMode.__members__)


def test_selector_config_has_the_fields_we_read() -> None:
    from vllm.v1.attention.selector import AttentionSelectorConfig

    fields = set(inspect.signature(AttentionSelectorConfig).parameters)
    assert {"use_mla", "use_sparse", "has_sink", "has_sliding_window"} <= fields


def test_mla_impl_methods_take_vllms_arguments() -> None:
    """forward_impl and update_kv_cache call our impl by keyword: same parameter names."""
    from vllm.v1.attention.backend import MLAAttentionImpl

    from adapters.vllm.attention.mla import MlaAttentionImpl

    for name in ("forward_mha", "forward_mqa", "do_kv_cache_update"):
        ours = list(inspect.signature(getattr(MlaAttentionImpl, name)).parameters)
        theirs = list(inspect.signature(getattr(MLAAttentionImpl, name)).parameters)
        assert ours == theirs, name


def test_routed_experts_sets_the_attributes_our_moe_method_reads() -> None:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    source = inspect.getsource(RoutedExperts.__init__)
    for attr in ("top_k", "renormalize", "use_grouped_topk", "num_expert_group", "topk_group",
                 "scoring_func", "routed_scaling_factor", "e_score_correction_bias",
                 "custom_routing_function", "apply_router_weight_on_input", "activation",
                 "local_num_experts", "layer_name", "ckpt_gate_proj_name",
                 "ckpt_up_proj_name", "ckpt_down_proj_name", "global_num_experts"):
        assert f"self.{attr} =" in source, attr
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig

    # The quantized MoE method reads the logical expert count the description names.
    assert "num_logical_experts" in FusedMoEConfig.__dataclass_fields__


def test_the_expert_weight_loader_takes_what_our_checked_loader_passes() -> None:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    params = list(inspect.signature(RoutedExperts.weight_loader).parameters)
    assert params == ["self", "param", "loaded_weight", "weight_name", "shard_id", "expert_id",
                      "return_success"]


def test_the_core_knows_vllms_default_memory_utilization() -> None:
    from vllm.config import CacheConfig
    from vllm.engine.arg_utils import EngineArgs

    from ascend_core.memory_budget import VLLM_DEFAULT_UTILIZATION

    assert CacheConfig.gpu_memory_utilization == VLLM_DEFAULT_UTILIZATION
    assert EngineArgs.gpu_memory_utilization == VLLM_DEFAULT_UTILIZATION


def test_parallel_config_has_the_fields_the_worker_reads() -> None:
    from vllm.config import ParallelConfig

    fields = set(ParallelConfig.__dataclass_fields__)
    assert {"data_parallel_size_local", "distributed_executor_backend"} <= fields


def test_gpt_oss_reaches_our_backend_and_moe_method_as_we_read_it() -> None:
    """gpt-oss: its attention layers pass `sinks` and a per-layer window to the impl (as
    PagedAttentionImpl takes them), its experts ask for swigluoai with biases (registered
    as w13_bias / w2_bias by vLLM's unquantized method, read by ours)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import FusedMoEConfig
    from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
        UnquantizedFusedMoEMethod,
    )
    from vllm.model_executor.models import gpt_oss

    model_source = inspect.getsource(gpt_oss)
    for passed in ("sinks=self.sinks", "per_layer_sliding_window=", 'activation="swigluoai"',
                   "has_bias=True"):
        assert passed in model_source, passed
    assert MoEActivation.from_str("swigluoai").name.lower() == "swigluoai"
    assert "has_bias" in FusedMoEConfig.__dataclass_fields__
    weights = inspect.getsource(UnquantizedFusedMoEMethod.create_weights)
    assert '"w13_bias"' in weights and '"w2_bias"' in weights


def test_vllm_still_turns_breakable_cuda_graphs_on_by_the_variable_we_preset() -> None:
    """The platform presets VLLM_USE_BREAKABLE_CUDAGRAPH=0 (configure.BREAKABLE_GRAPHS):
    vLLM reads that name, sets it for the architectures it picks (DeepSeek-V3.2 among
    them) only when it is unset, and then turns compilation off."""
    import inspect

    from vllm.config import VllmConfig
    from vllm.config.vllm import default_breakable_cudagraph_architectures

    from adapters.vllm.engine.configure import BREAKABLE_GRAPHS

    source = inspect.getsource(VllmConfig._maybe_enable_breakable_cudagraph)
    assert f'"{BREAKABLE_GRAPHS}" not in os.environ' in source
    assert "DeepseekV32ForCausalLM" in default_breakable_cudagraph_architectures()
