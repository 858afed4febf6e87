"""Every vLLM internal the adapter leans on, checked against the installed vLLM.

An upgrade that renames or removes one of these fails here, naming the symbol, before
anything fails at serving time. Upstream patches are data in the core's registry
(ascend_core.patches.entries); their targets are listed here too.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

# (symbol "module:Attr.sub", how the adapter uses it)
SURFACE: tuple[tuple[str, str], ...] = (
    # Platform: subclassed; the hooks we override or call.
    ("vllm.platforms.interface:Platform", "AscendPlatformBase subclasses it"),
    ("vllm.platforms.interface:PlatformEnum.OOT", "our platform's _enum"),
    ("vllm.platforms.interface:Platform.check_and_update_config", "hook: apply the plan"),
    ("vllm.platforms.interface:Platform.get_attn_backend_cls", "hook: core's backend kind"),
    ("vllm.platforms.interface:Platform.register_triton_kernel_overrides", "hook: patches"),
    ("vllm.platforms.interface:Platform.import_kernels", "hook: no compiled vLLM ops"),
    ("vllm.platforms.interface:Platform.update_block_size_for_backend", "keep plan's size"),
    ("vllm.platforms.interface:Platform._find_non_ssm_backends", "private: backends in use"),
    ("vllm.platforms.interface:Platform.validate_environ", "VLLM_ASCEND_* are ours"),
    ("vllm.platforms.interface:Platform.get_device_total_memory", "runtime port"),
    ("vllm.platforms.interface:Platform.get_current_memory_usage", "runtime port"),
    ("vllm.platforms.interface:Platform.manual_seed_all", "runtime port"),
    ("vllm.platforms.interface:Platform.check_runner_kv_caches_multi_layer", "host runner"),
    ("vllm.envs:environment_variables", "validate_environ: vLLM's own names"),
    ("vllm.platforms.interface:Platform.apply_config_platform_defaults",
     "hook: the compilation settings as given, before vLLM resolves them"),
    ("vllm.platforms.interface:Platform.use_custom_allreduce", "hook: no CUDA IPC all-reduce"),
    ("vllm.platforms.interface:Platform.opaque_attention_op", "host: attention opaque to Dynamo"),
    ("vllm.config:get_current_vllm_config", "attention selection: the model being served"),
    ("vllm.config:VllmConfig.lora_config", "the LoRA switch for the support matrix"),
    ("vllm.config:ModelConfig.is_multimodal_model", "model facts: multimodal"),
    ("vllm.config:ModelConfig.is_encoder_decoder", "model facts: encoder-decoder"),
    # Worker and model runner: reused by subclassing.
    ("vllm.v1.worker.gpu_worker:Worker", "HostWorker subclasses it"),
    ("vllm.v1.worker.gpu_worker:Worker.init_device", "overridden: host device"),
    ("vllm.v1.worker.gpu_worker:Worker._maybe_get_memory_pool_context",
     "private, overridden: the CuMem pool is skipped only for built-in platforms"),
    ("vllm.v1.worker.gpu_worker:Worker.determine_available_memory", "overridden: port"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.profile_run", "called: memory profiling pass"),
    ("vllm.v1.worker.gpu_worker:Worker.randomize_dummy_inputs", "profile_run argument"),
    ("vllm.config:set_current_vllm_config", "profiling pass context"),
    ("vllm.v1.worker.gpu_worker:Worker.compile_or_warm_up_model", "overridden: eager host"),
    ("vllm.v1.worker.gpu_worker:init_worker_distributed_environment", "called: gloo"),
    ("vllm.v1.worker.worker_base:CompilationTimes", "returned by warm-up"),
    ("vllm.v1.worker.cpu_model_runner:CPUModelRunner", "HostModelRunner subclasses it"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner", "NpuModelRunner subclasses it"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.execute_model", "NPU: in runner_scope"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.sample_tokens", "NPU: in runner_scope"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.capture_model", "NPU: in runner_scope"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.initialize_kv_cache",
     "NPU: in runner_scope"),
    ("vllm.utils.torch_utils:current_stream", "asks Platform.current_stream off CUDA/CPU"),
    ("vllm.platforms.interface:Platform.get_device_communicator_cls", "NPU: ours"),
    ("vllm.distributed.device_communicators.base_device_communicator:DeviceCommunicatorBase",
     "NpuDeviceCommunicator subclasses it (host staging over gloo)"),
    ("vllm.v1.worker.gpu_model_runner:GPUModelRunner.get_kv_cache_spec", "KV bytes/seq"),
    ("vllm.v1.kv_cache_interface:KVCacheSpec.max_memory_usage_bytes", "KV bytes/seq"),
    ("vllm.utils.torch_utils:set_random_seed", "worker seeding"),
    # Attention backend interface.
    ("vllm.v1.attention.backend:AttentionBackend", "PagedAttentionBackend"),
    ("vllm.v1.attention.backend:AttentionBackend.supported_kv_cache_layouts",
     "declares LBNHC so the layer cache is a plain [block, token, head, K|V] view"),
    ("vllm.v1.attention.backend:AttentionImpl", "PagedAttentionImpl"),
    ("vllm.v1.attention.backend:AttentionMetadata", "PagedMetadata"),
    ("vllm.v1.attention.backend:AttentionMetadataBuilder", "PagedMetadataBuilder"),
    ("vllm.v1.attention.backend:AttentionCGSupport.NEVER", "no graphs on the host"),
    ("vllm.v1.attention.backend:AttentionType.DECODER", "the one type we serve"),
    ("vllm.v1.attention.backend:CommonAttentionMetadata", "read in build()"),
    ("vllm.v1.attention.backend:CommonAttentionMetadata.seq_lens_cpu_upper_bound",
     "host-side seq lens for the NPU step plan and the MLA lengths (exact without "
     "speculative decoding)"),
    ("vllm.config:VllmConfig.speculative_config", "MLA: are the host seq lens exact"),
    ("vllm.v1.kv_cache_layout:KVCacheLayout.LBNHC", "the layout we declare"),
    ("vllm.v1.attention.backends.registry:AttentionBackendEnum.register",
     "Attention looks backends up by get_name() in this enum"),
    ("vllm.v1.attention.selector:AttentionSelectorConfig", "fields read in selection"),
    # Custom ops.
    ("vllm.model_executor.custom_op:CustomOp.register_oot", "our layers replace vLLM's"),
    ("vllm.model_executor.custom_op:CustomOp.forward_oot", "dispatch on OOT platforms"),
    ("vllm.model_executor.custom_op:op_registry_oot", "re-entrant registration"),
    ("vllm.model_executor.layers.layernorm:RMSNorm", "AscendRMSNorm"),
    ("vllm.model_executor.layers.activation:SiluAndMul", "AscendSiluAndMul"),
    ("vllm.model_executor.layers.rotary_embedding.base:RotaryEmbedding", "rope"),
    ("vllm.model_executor.layers.rotary_embedding.base:"
     "RotaryEmbeddingBase._match_cos_sin_cache_dtype", "private: cache in query dtype"),
    # Fused MoE: our monolithic method in place of vLLM's unquantized one.
    ("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method:"
     "UnquantizedFusedMoEMethod", "register_oot: AscendUnquantizedFusedMoEMethod"),
    ("vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method:"
     "UnquantizedFusedMoEMethod.create_weights", "reused: w13 [E, 2I, H], w2 [E, H, I]"),
    ("vllm.model_executor.layers.fused_moe.fused_moe_method_base:FusedMoEMethodBase",
     "AscendMoeMethod subclasses it"),
    ("vllm.model_executor.layers.fused_moe.fused_moe_method_base:"
     "FusedMoEMethodBase.is_monolithic", "overridden: True, we route"),
    ("vllm.model_executor.layers.fused_moe.fused_moe_method_base:"
     "FusedMoEMethodBase.apply_monolithic", "overridden: our MoE ops"),
    ("vllm.model_executor.layers.fused_moe.fused_moe_method_base:"
     "FusedMoEMethodBase.maybe_roundup_sizes", "called: no kernel padding"),
    ("vllm.model_executor.layers.fused_moe.config:FusedMoEConfig", "the method's argument"),
    ("vllm.model_executor.layers.fused_moe.config:FusedMoEQuantConfig", "annotation"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.forward_monolithic",
     "calls apply_monolithic with router logits"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.expert_map",
     "global -> local expert ids under expert parallel"),
    ("vllm.model_executor.layers.fused_moe.runner.moe_runner:MoERunner._apply_quant_method",
     "private: branches on is_monolithic"),
    # MLA: our backend under vLLM's MLAAttention layer.
    ("vllm.model_executor.layers.attention.mla_attention:MLAAttention.forward_impl",
     "calls forward_mha (prefill rows) and forward_mqa (decode rows first)"),
    ("vllm.model_executor.layers.attention.mla_attention:MLAAttention.update_kv_cache",
     "calls do_kv_cache_update before attention"),
    ("vllm.model_executor.layers.attention.mla_attention:MLAAttention.get_kv_cache_spec",
     "the latent spec: one slot of kv_lora_rank + rope per token"),
    ("vllm.v1.attention.backend:MLAAttentionImpl", "MlaAttentionImpl subclasses it"),
    ("vllm.v1.attention.backend:AttentionBackend.is_mla", "MlaAttentionBackend: True"),
    ("vllm.v1.attention.backend:AttentionMetadataBuilder.reorder_batch_threshold",
     "1: one-token requests first"),
    ("vllm.v1.attention.backends.utils:split_decodes_and_prefills", "MlaMetadataBuilder"),
    ("vllm.v1.attention.backends.mla.prefill.base:MLAPrefillBackend", "MlaPrefillQuery"),
    ("vllm.platforms.interface:Platform.get_mla_prefill_backend_cls",
     "hook: MLAAttention asks for a prefill class when built"),
    # Kernel overrides and patches (targets of the core's patch registry).
    ("vllm.triton_utils.dispatcher:KernelOverride", "the wrapper our kernel overrides install"),
    ("vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel", "patch target"),
    ("vllm.v1.sample.ops.topk_topp_sampler:apply_top_k_top_p", "NPU patch target"),
    ("vllm.v1.sample.ops.topk_topp_sampler:apply_top_k_top_p_pytorch", "its replacement"),
    ("vllm.v1.sample.rejection_sampler:apply_top_k_top_p", "NPU patch copy"),
    ("vllm.v1.worker.gpu.sample.states:apply_top_k_top_p", "NPU patch copy"),
    ("vllm.v1.worker.gpu.sample.sampler:apply_top_k_top_p", "NPU patch copy"),
    ("vllm.v1.watermarking.gpu_sampler:apply_top_k_top_p", "NPU patch copy"),
    ("vllm.distributed.parallel_state:cleanup_dist_env_and_memory", "patch target"),
    ("vllm.distributed:cleanup_dist_env_and_memory", "patch: rebound re-export"),
    ("vllm.v1.engine.core:cleanup_dist_env_and_memory", "patch: rebound copy"),
    # Quantization: `ascend` registered out of tree, its linear methods on vLLM's layers.
    ("vllm.platforms.interface:Platform.pre_register_and_update", "hook: register ascend"),
    ("vllm.model_executor.layers.quantization:register_quantization_config", "ascend"),
    ("vllm.model_executor.layers.quantization:QUANTIZATION_METHODS", "re-entrant registration"),
    ("vllm.model_executor.layers.quantization.base_config:QuantizationConfig",
     "AscendQuantConfig subclasses it"),
    ("vllm.config:VllmConfig.get_quantization_config", "rebuilt after the plan picks ascend"),
    ("vllm.model_executor.layers.linear:LinearMethodBase", "our int8 linear methods"),
    ("vllm.model_executor.layers.linear:LinearBase", "layers get_quant_method serves"),
    ("vllm.model_executor.layers.linear:UnquantizedLinearMethod", "FLOAT layers"),
    ("vllm.model_executor.layers.linear:QKVParallelLinear", "shard ids q, k, v"),
    ("vllm.model_executor.layers.linear:RowParallelLinear", "quant_bias on rank 0 only"),
    ("vllm.model_executor.layers.linear:adjust_scalar_to_fused_array",
     "per-tensor input_scale per shard (param attr needs_scalar_to_array)"),
    ("vllm.model_executor.layers.fused_moe:RoutedExperts",
     "get_quant_method gives W8A8_DYNAMIC experts our MoE method"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:FusedMoeWeightScaleSupported",
     "CHANNEL: per-channel expert scales / offsets"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.weight_loader",
     "wrapped: (param, loaded_weight, weight_name, shard_id, expert_id, return_success)"),
    ("vllm.model_executor.layers.fused_moe.routed_experts:RoutedExperts.load_weights",
     "calls each param's weight_loader per expert"),
    ("vllm.model_executor.layers.vocab_parallel_embedding:VocabParallelEmbedding",
     "quantized embeddings / lm_head refused"),
    ("vllm.model_executor.utils:set_weight_attrs", "loader attributes on our params"),
    ("vllm.model_executor.kernels.linear:_POSSIBLE_INT8_KERNELS",
     "patch target: our int8 ScaledMM kernel under PlatformEnum.OOT"),
    ("vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel:"
     "Int8ScaledMMLinearKernel", "AscendInt8ScaledMMLinearKernel subclasses it"),
    ("vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel:"
     "Int8ScaledMMLinearLayerConfig", "is_channelwise, is_static_input_scheme, symmetric"),
    ("vllm.model_executor.layers.quantization.utils.w8a8_utils:convert_to_channelwise",
     "per-tensor weight scales of fused layers"),
    # Startup and platform resolution (issue 13).
    ("vllm.platforms:_current_platform",
     "private: the declined plugin's exit hook reads which platform served"),
    ("vllm.platforms.interface:Platform.is_unspecified", "nothing served: repeat our reason"),
    ("vllm.config:get_current_vllm_config_or_none", "backend errors: which executor runs us"),
    ("vllm.config:ParallelConfig.local_world_size", "host default: workers sharing the RAM"),
    ("vllm.config:CacheConfig.gpu_memory_utilization",
     "its default counts as not given (VLLM_DEFAULT_UTILIZATION)"),
    # Config types translated to and from the core.
    ("vllm.config:CompilationMode", "CompileMode mirrors its member names"),
    ("vllm.config:CUDAGraphMode", "GraphMode mirrors its member names"),
)


def _resolve(symbol: str) -> object:
    module_name, _, path = symbol.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("symbol", "use"), SURFACE, ids=[s for s, _ in SURFACE])
def test_symbol_exists(symbol: str, use: str) -> None:
    try:
        _resolve(symbol)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{symbol} ({use}) is gone from the installed vLLM: {exc}")


def test_every_patch_target_is_listed() -> None:
    from ascend_core.patches import REGISTRY

    listed = {s for s, _ in SURFACE}
    applied_here = {"adapters.vllm.patches.torch_kernels:override",
                    "adapters.vllm.patches.shutdown:skip_accelerator_cache_release",
                    "adapters.vllm.patches.npu_sampler:use_torch_top_k_top_p"}
    for spec in REGISTRY:
        if spec.apply in applied_here:
            assert set(spec.symbols()) <= listed, spec.id


def test_slot_mapping_override_takes_the_kernel_arguments_by_name() -> None:
    from adapters.vllm.kernels import slot_mapping_kernel

    kernel = _resolve("vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel")
    names = getattr(kernel, "arg_names", None) or tuple(
        inspect.signature(getattr(kernel, "fn", kernel)).parameters
    )
    compute_slot_mapping = slot_mapping_kernel(None)  # type: ignore[arg-type]
    assert tuple(inspect.signature(compute_slot_mapping).parameters) == tuple(names)


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
