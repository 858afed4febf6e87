"""Builders of Deployments for the config-plan tests, and hypothesis strategies for them."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import strategies as st

from ascend_core.deployment import (
    CacheSettings,
    CompilationSettings,
    CompileMode,
    Deployment,
    GraphMode,
    KvTransferRole,
    MlaShape,
    ModelFacts,
    ParallelSettings,
    SpeculativeSettings,
)
from ascend_core.quantization import QuantMethod
from ports.device import ChipFamily, DeviceKind


def dense_model(**overrides: Any) -> ModelFacts:
    """A small dense GQA model (Qwen3-0.6B's shape)."""
    base = ModelFacts(
        architecture="Qwen3ForCausalLM",
        model_type="qwen3",
        hidden_size=1024,
        num_layers=28,
        num_attention_heads=16,
        num_kv_heads=8,
        head_size=128,
    )
    return attrs.evolve(base, **overrides)


def mla_model(**overrides: Any) -> ModelFacts:
    """A DeepSeek-V3-like MoE model with MLA."""
    base = ModelFacts(
        architecture="DeepseekV3ForCausalLM",
        model_type="deepseek_v3",
        hidden_size=7168,
        num_layers=61,
        num_attention_heads=128,
        num_kv_heads=128,
        head_size=192,
        mla=MlaShape(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
        is_moe=True,
    )
    return attrs.evolve(base, **overrides)


def dsa_model(**overrides: Any) -> ModelFacts:
    """A DeepSeek-V3.2-like model: MLA plus the DSA indexer."""
    return mla_model(architecture="DeepseekV32ForCausalLM", index_topk=2048, **overrides)


def npu(
    model: ModelFacts | None = None,
    *,
    chip: ChipFamily = ChipFamily.A2,
    parallel: dict[str, Any] | None = None,
    compilation: dict[str, Any] | None = None,
    cache: dict[str, Any] | None = None,
    speculative: dict[str, Any] | None = None,
    **top: Any,
) -> Deployment:
    """A deployment on an NPU; sub-records are given as keyword dicts of their fields."""
    return Deployment(
        model=model or dense_model(),
        chip_family=chip,
        device_kind=DeviceKind.NPU,
        parallel=ParallelSettings(**(parallel or {})),
        compilation=CompilationSettings(**(compilation or {})),
        cache=CacheSettings(**(cache or {})),
        speculative=SpeculativeSettings(**(speculative or {})),
        **top,
    )


def host(model: ModelFacts | None = None, **kwargs: Any) -> Deployment:
    """The same, on the host device (no NPU)."""
    return attrs.evolve(npu(model, chip=ChipFamily.HOST, **kwargs), device_kind=DeviceKind.CPU)


# --- hypothesis strategies --------------------------------------------------------------

_small = st.integers(min_value=1, max_value=16)
_optional_str = st.none() | st.sampled_from(["ascend", "FP8", "awq", "compressed-tensors", ""])

models = st.builds(
    ModelFacts,
    architecture=st.text(min_size=1, max_size=20),
    model_type=st.text(max_size=10),
    hidden_size=st.integers(1, 16384),
    num_layers=st.integers(1, 128),
    num_attention_heads=st.integers(1, 128),
    num_kv_heads=st.integers(1, 128),
    head_size=st.integers(1, 512),
    dtype=st.sampled_from(["bfloat16", "float16", "float32"]),
    max_model_len=st.integers(1, 1 << 20),
    mla=st.none() | st.builds(MlaShape, kv_lora_rank=st.integers(1, 1024)),
    index_topk=st.none() | st.integers(1, 4096),
    compressed_attention=st.booleans(),
    hybrid=st.booleans(),
    is_moe=st.booleans(),
    sliding_window=st.booleans(),
    vision=st.booleans(),
    video=st.booleans(),
    audio=st.booleans(),
)

parallels = st.builds(
    ParallelSettings,
    tp=_small,
    pp=_small,
    dp=_small,
    pcp=_small,
    dcp=_small,
    expert_parallel=st.booleans(),
    sequence_parallel=st.booleans(),
    disable_custom_all_reduce=st.booleans(),
)

compilations = st.builds(
    CompilationSettings,
    enforce_eager=st.booleans(),
    mode=st.none() | st.sampled_from(CompileMode),
    graph_mode=st.none() | st.sampled_from(GraphMode),
    capture_sizes=st.none() | st.lists(st.integers(1, 1024), max_size=12),
    custom_ops=st.lists(st.sampled_from(["all", "none", "+rms_norm", "-silu_and_mul"])),
)

caches = st.builds(
    CacheSettings,
    block_size=st.none() | st.integers(1, 1024),
    enable_prefix_caching=st.booleans(),
    kv_cache_dtype=st.sampled_from(["auto", "bfloat16", "float16", "fp8", "fp8_e5m2", ""]),
    enable_sleep_mode=st.booleans(),
)

_json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
additional_configs = st.dictionaries(
    st.sampled_from(
        ["enable_kv_nz", "finegrained_tp_config", "ascend_compilation_config", "typo_key"]
    ),
    _json_scalars
    | st.dictionaries(
        st.sampled_from(
            [
                "enable_npugraph_ex",
                "enable_static_kernel",
                "oproj_tensor_parallel_size",
                "lmhead_tensor_parallel_size",
            ]
        ),
        _json_scalars,
        max_size=3,
    ),
    max_size=4,
)

deployments = st.builds(
    Deployment,
    model=models,
    chip_family=st.sampled_from(ChipFamily),
    device_kind=st.sampled_from(DeviceKind),
    parallel=parallels,
    speculative=st.builds(
        SpeculativeSettings,
        method=st.none() | st.sampled_from(["mtp", "eagle3", "ngram"]),
        num_speculative_tokens=st.integers(0, 8),
    ),
    compilation=compilations,
    cache=caches,
    kv_transfer_role=st.none() | st.sampled_from(KvTransferRole),
    additional_config=additional_configs,
    user_quantization=_optional_str,
    detected_quantization=st.sampled_from(QuantMethod),
    outside_env=st.sampled_from([{}, {"ASCEND_LAUNCH_BLOCKING": "1"}, {"HCCL_BUFFSIZE": "x"}])
    | st.dictionaries(
        st.sampled_from(["ASCEND_LAUNCH_BLOCKING", "HCCL_BUFFSIZE"]), st.text(max_size=6)
    ),
    npu_alloc_conf=st.none()
    | st.sampled_from(["", "expandable_segments:True", "max_split_size_mb:64", "garbage"])
    | st.text(max_size=20),
    omp_num_threads=st.none() | st.sampled_from(["1", "4", "", "x"]),
    v2_model_runner=st.none() | st.sampled_from(["0", "1", ""]),
    host_cpus=st.none() | st.integers(1, 256),
    lora=st.booleans(),
    training_consistency=st.booleans(),
)


def step_errors(plan: Any) -> tuple[Any, ...]:
    """The plan's errors besides the support matrix's refusals: for tests of other steps
    on models this build does not serve yet (MLA, DSA, compressed MLA)."""
    from ascend_core.errors import UnsupportedFeatureError

    return tuple(e for e in plan.errors if not isinstance(e, UnsupportedFeatureError))
