"""The dotted paths a plan's Change may name; the vLLM adapter maps each one back.

Paths under `env.` are environment variables for the worker processes; paths under
`additional_config.` are keys of vLLM's additional_config; the rest are VllmConfig paths.
"""

from __future__ import annotations

CUSTOM_ALL_REDUCE = "parallel_config.disable_custom_all_reduce"
# vLLM 0.33 has no sequence-parallel switch of its own; on Ascend it is FlashComm1.
SEQUENCE_PARALLEL = "env.VLLM_ASCEND_ENABLE_FLASHCOMM1"  # see Deployment.parallel
# The same switch written in additional_config (it wins over the variable).
SEQUENCE_PARALLEL_KEY = "additional_config.enable_flashcomm1"
COMPILE_MODE = "compilation_config.mode"
GRAPH_MODE = "compilation_config.cudagraph_mode"
CAPTURE_SIZES = "compilation_config.cudagraph_capture_sizes"
CUSTOM_OPS = "compilation_config.custom_ops"
# vLLM's CUDA graphs of a vision tower (plan/encoder_graphs.py turns them off).
ENCODER_GRAPHS = "compilation_config.cudagraph_mm_encoder"
# vLLM's RMSNorm/SiluMul + fp8 quant fusion passes (CUDA kernels only).
FUSE_NORM_QUANT = "compilation_config.pass_config.fuse_norm_quant"
FUSE_ACT_QUANT = "compilation_config.pass_config.fuse_act_quant"
BLOCK_SIZE = "cache_config.block_size"
KV_CACHE_DTYPE = "cache_config.cache_dtype"
PREFIX_CACHING = "cache_config.enable_prefix_caching"
MAMBA_CACHE_MODE = "cache_config.mamba_cache_mode"
MAMBA_BLOCK_SIZE = "cache_config.mamba_block_size"
QUANTIZATION = "model_config.quantization"
NPU_ALLOC_CONF = "env.PYTORCH_NPU_ALLOC_CONF"
OMP_NUM_THREADS = "env.OMP_NUM_THREADS"
# vLLM's runner switch: the plan writes it so vLLM's engine believes the runner the
# worker builds (ascend_core.plan.model_runner).
V2_MODEL_RUNNER = "env.VLLM_USE_V2_MODEL_RUNNER"
# Where vLLM's connector factory finds MooncakeConnectorV1 (adapters/vllm/kv_transfer/connector.py).
KV_CONNECTOR_MODULE = "kv_transfer_config.kv_connector_module_path"
# vLLM's EPLB (ascend_core/moe/eplb.py).
ENABLE_EPLB = "parallel_config.enable_eplb"
EPLB_REDUNDANT = "parallel_config.eplb_config.num_redundant_experts"
EPLB_WINDOW = "parallel_config.eplb_config.window_size"
EPLB_STEP = "parallel_config.eplb_config.step_interval"
EPLB_ASYNC = "parallel_config.eplb_config.use_async"
EPLB_COMMUNICATOR = "parallel_config.eplb_config.communicator"

ALL = frozenset(
    {
        CUSTOM_ALL_REDUCE,
        SEQUENCE_PARALLEL,
        SEQUENCE_PARALLEL_KEY,
        COMPILE_MODE,
        GRAPH_MODE,
        CAPTURE_SIZES,
        CUSTOM_OPS,
        ENCODER_GRAPHS,
        FUSE_NORM_QUANT,
        FUSE_ACT_QUANT,
        BLOCK_SIZE,
        KV_CACHE_DTYPE,
        PREFIX_CACHING,
        MAMBA_CACHE_MODE,
        MAMBA_BLOCK_SIZE,
        QUANTIZATION,
        NPU_ALLOC_CONF,
        OMP_NUM_THREADS,
        KV_CONNECTOR_MODULE,
        V2_MODEL_RUNNER,
        ENABLE_EPLB,
        EPLB_REDUNDANT,
        EPLB_WINDOW,
        EPLB_STEP,
        EPLB_ASYNC,
        EPLB_COMMUNICATOR,
    }
)
