"""The memory budget against hand-computed numbers."""

from __future__ import annotations

import pytest

from ascend_core.deployment import MlaShape, ModelFacts
from ascend_core.errors import ConfigError
from ascend_core.memory_budget import (
    GIB,
    MIB,
    Accounting,
    BudgetFlag,
    FixKind,
    KvCacheTooSmallError,
    KvLayout,
    MemoryDemand,
    Scaling,
    dtype_bytes,
    estimate_reserve,
    format_bytes,
    kv_bytes_per_token,
    kv_cache_shortfall,
    lora_slot_bytes,
    plan_budget,
    weights_size,
)
from ports.model_files import TensorHeader

LLAMA_70B = ModelFacts(
    architecture="LlamaForCausalLM",
    model_type="llama",
    hidden_size=8192,
    num_layers=80,
    num_attention_heads=64,
    num_kv_heads=8,
    head_size=128,
    max_model_len=131072,
)
DEEPSEEK_V3 = ModelFacts(
    architecture="DeepseekV3ForCausalLM",
    model_type="deepseek_v3",
    hidden_size=7168,
    num_layers=61,
    num_attention_heads=128,
    num_kv_heads=128,
    head_size=576,
    mla=MlaShape(kv_lora_rank=512, qk_rope_head_dim=64),
    is_moe=True,
)


def test_dtype_bytes_resolves_auto_to_the_model_dtype() -> None:
    assert dtype_bytes("auto", "bfloat16") == 2
    assert dtype_bytes("auto", "torch.float32") == 4
    assert dtype_bytes("fp8_e4m3") == 1
    assert dtype_bytes("int8") == 1


def test_dtype_bytes_rejects_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match="'fp3'"):
        dtype_bytes("fp3")


def test_weights_count_floats_at_the_model_dtype_and_integers_as_stored() -> None:
    headers = (
        TensorHeader("embed", "F32", (1000, 64)),  # cast to bf16: 128,000 B
        TensorHeader("q_proj.weight", "I8", (64, 64)),  # 4,096 B
        TensorHeader("q_proj.scale", "F32", (64,)),  # cast to bf16: 128 B
        TensorHeader("packed", "I4", (3,)),  # 12 bits -> 2 B
    )
    size = weights_size(headers, "bfloat16")
    assert size.total_bytes == 128_000 + 4_096 + 128 + 2
    assert size.tensors == 4
    assert size.quantized  # an 8-bit matrix is there


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16", "float32"])
def test_quantization_scales_count_at_float32_as_they_are_held(model_dtype: str) -> None:
    names = ("weight_scale", "weight_offset", "input_scale", "input_offset", "deq_scale")
    headers = [TensorHeader(f"layers.0.mlp.down_proj.{n}", "BF16", (64, 1)) for n in names]
    headers.append(TensorHeader("layers.0.mlp.experts.3.up_proj.weight_scale", "F16", (32, 1)))
    headers.append(TensorHeader("layers.0.mlp.down_proj.bias", "BF16", (64,)))  # a float
    size = weights_size(headers, model_dtype)
    assert size.total_bytes == 5 * 64 * 4 + 32 * 4 + 64 * dtype_bytes(model_dtype)


@pytest.mark.parametrize("model_dtype", ["bfloat16", "float16", "float32"])
def test_w4a8_experts_scale_bias_counts_at_float32_as_held(model_dtype: str) -> None:
    # ModelSlim W4A8_DYNAMIC experts: int4 pairs in int8, float32 scale / offset, and
    # scale_bias [out, 1] (gate/up) or [out, 16] (down), all float32 parameters after load.
    prefix = "model.layers.0.mlp.experts.0"
    headers = [
        TensorHeader(f"{prefix}.gate_proj.weight", "I8", (32, 128)),
        TensorHeader(f"{prefix}.gate_proj.weight_scale", "F32", (64, 1)),
        TensorHeader(f"{prefix}.gate_proj.weight_offset", "F32", (64, 1)),
        TensorHeader(f"{prefix}.gate_proj.scale_bias", "F32", (64, 1)),
        TensorHeader(f"{prefix}.down_proj.scale_bias", "F32", (128, 16)),
    ]
    size = weights_size(headers, model_dtype)
    assert size.total_bytes == 32 * 128 + 3 * 64 * 4 + 128 * 16 * 4
    assert size.routed_expert_bytes == size.total_bytes
    assert "4 quantization scales at float32" in size.detail


def test_weights_of_a_bf16_checkpoint_are_not_quantized() -> None:
    size = weights_size((TensorHeader("w", "BF16", (8, 8)),))
    assert (size.total_bytes, size.quantized) == (128, False)


def test_weights_reject_an_unknown_dtype() -> None:
    with pytest.raises(ConfigError, match="X9"):
        weights_size((TensorHeader("w", "X9", (2,)),))


def test_gqa_kv_per_token_splits_kv_heads_over_tp() -> None:
    # 2 (K and V) * 80 layers * 8 heads * 128 dims * 2 bytes = 327,680 B = 320 KiB.
    assert kv_bytes_per_token(LLAMA_70B, 2).bytes == 327_680
    # tp=4: 2 KV heads per device.
    four = kv_bytes_per_token(LLAMA_70B, 2, tp=4)
    assert four.bytes == 2 * 80 * 2 * 128 * 2 == 81_920
    assert four.layout is KvLayout.STANDARD
    assert "2 KV heads/device" in four.formula


def test_kv_heads_are_replicated_when_fewer_than_tp_ranks() -> None:
    # tp=16 > 8 KV heads: each device still holds one whole head.
    sixteen = kv_bytes_per_token(LLAMA_70B, 2, tp=16)
    assert sixteen.bytes == 2 * 80 * 1 * 128 * 2 == 40_960
    assert "replicated" in sixteen.formula


def test_pipeline_parallel_splits_layers() -> None:
    assert kv_bytes_per_token(LLAMA_70B, 2, pp=3).bytes == 2 * 27 * 8 * 128 * 2


def test_mla_caches_one_latent_not_split_by_tp() -> None:
    # 61 layers * (512 + 64) * 2 bytes = 70,272 B per token, on every TP rank.
    one = kv_bytes_per_token(DEEPSEEK_V3, 2)
    assert one.bytes == 61 * 576 * 2 == 70_272
    assert one.layout is KvLayout.MLA
    assert kv_bytes_per_token(DEEPSEEK_V3, 2, tp=16).bytes == 70_272


def test_compressed_mla_counts_each_layers_cached_attention_input() -> None:
    v4 = ModelFacts(
        architecture="DeepseekV4ForCausalLM", model_type="deepseek_v4", hidden_size=4096,
        num_layers=43, num_attention_heads=64, num_kv_heads=1, head_size=512,
        mla=MlaShape(kv_lora_rank=448, qk_rope_head_dim=64), index_topk=512,
        compressed_attention=True,
    )
    kv = kv_bytes_per_token(v4, 2)
    assert kv.bytes == 43 * 4096 * 2  # the plugin's V4 class caches the attention input
    assert "hidden_size" in kv.formula and "DeepSeek-V4 class" in kv.formula
    assert kv_bytes_per_token(v4, 2, tp=4).bytes == kv.bytes


def test_reserve_estimate_states_its_parts() -> None:
    reserve = estimate_reserve(LLAMA_70B, max_num_batched_tokens=8192, activation_dtype_bytes=2)
    # 8192 tokens * 12 * 8192 hidden * 2 bytes = 1.5 GiB, plus the 2 GiB runtime reserve.
    assert reserve.activation_bytes == 8192 * 12 * 8192 * 2 == 3 * GIB // 2
    assert reserve.total_bytes == 2 * GIB + 3 * GIB // 2
    assert "runtime" in reserve.describe()


def test_lora_slots_are_a_and_b_per_wrapped_linear_and_adapter_slot() -> None:
    headers = [
        TensorHeader("model.layers.0.self_attn.q_proj.weight", "BF16", (64, 32)),  # column
        TensorHeader("model.layers.0.self_attn.o_proj.weight", "BF16", (32, 64)),  # row
        TensorHeader("model.layers.0.mlp.down_proj.weight", "BF16", (32, 96)),  # row
        TensorHeader("model.layers.0.input_layernorm.weight", "BF16", (32,)),  # not wrapped
        TensorHeader("model.embed_tokens.weight", "BF16", (1000, 32)),  # vocab parallel
        TensorHeader("model.layers.0.mlp.down_proj.bias", "BF16", (32,)),  # not wrapped
    ]
    # rank 8 x (in + out) per linear, x 3 slots x 2 bytes
    one = 8 * ((32 + 64) + (64 + 32) + (96 + 32) + (1000 + 32)) * 3 * 2
    assert lora_slot_bytes(headers, max_loras=3, max_lora_rank=8, dtype_bytes=2) == one
    # TP 2 splits a column linear's output, a row linear's input and the vocabulary.
    split = 8 * ((32 + 32) + (32 + 32) + (48 + 32) + (500 + 32)) * 3 * 2
    assert lora_slot_bytes(headers, 3, 8, 2, tp=2) == split
    reserve = estimate_reserve(LLAMA_70B, 8192, 2, lora_bytes=one)
    assert reserve.total_bytes == 2 * GIB + 3 * GIB // 2 + one
    assert "LoRA slots" in reserve.describe()


def _short_demand() -> MemoryDemand:
    # 100 GiB * 0.5 = 50 GiB usable; 50 - 40 - 2 = 8 GiB for KV. One block is
    # 128 tokens * 320 KiB = 40 MiB, so 8 GiB holds 204 blocks = 26,112 tokens,
    # short of one 32,768-token sequence (256 blocks = 10 GiB).
    return MemoryDemand(
        device_memory_bytes=100 * GIB,
        memory_utilization=0.5,
        weights_bytes=40 * GIB,
        reserve_bytes=2 * GIB,
        kv_bytes_per_token=327_680,
        max_model_len=32_768,
        block_size=128,
    )


def test_a_short_budget_counts_blocks_and_tokens() -> None:
    demand = _short_demand()
    assert demand.kv_bytes_available == 8 * GIB
    assert demand.num_blocks == 204
    assert demand.tokens == 26_112
    assert demand.sequence_bytes == 10 * GIB
    assert not demand.fits


def test_every_single_fix_comes_with_its_numbers() -> None:
    budget = plan_budget(_short_demand(), Scaling(LLAMA_70B, kv_dtype_bytes=2, tp=1))
    by_kind = {fix.kind: fix for fix in budget.fixes}
    # 40 + 2 + 10 GiB needed of 100 GiB: 0.52.
    assert by_kind[FixKind.MEMORY_UTILIZATION].value == 0.52
    assert by_kind[FixKind.MEMORY_UTILIZATION].argument == "--gpu-memory-utilization 0.52"
    assert by_kind[FixKind.MAX_MODEL_LEN].value == 26_112
    # tp=2: 20 GiB weights and 160 KiB/token leave 28 GiB: 28 GiB / 20 MiB per block.
    assert by_kind[FixKind.TENSOR_PARALLEL].value == 2
    assert f"{28 * GIB // (20 * MIB) * 128} tokens" in by_kind[FixKind.TENSOR_PARALLEL].detail
    # W8A8 halves 40 GiB to 20 GiB.
    assert "20.00 GiB" in by_kind[FixKind.QUANTIZATION].detail
    # Preferred order: utilization, length, TP, quantization (explicit bytes not set here).
    assert [f.kind for f in budget.fixes] == [
        FixKind.MEMORY_UTILIZATION,
        FixKind.MAX_MODEL_LEN,
        FixKind.TENSOR_PARALLEL,
        FixKind.QUANTIZATION,
    ]


def test_utilization_above_the_cap_is_not_suggested() -> None:
    demand = MemoryDemand(
        device_memory_bytes=64 * GIB,
        memory_utilization=0.9,
        weights_bytes=55 * GIB,
        reserve_bytes=2 * GIB,
        kv_bytes_per_token=327_680,
        max_model_len=32_768,
    )
    kinds = {fix.kind for fix in plan_budget(demand).fixes}
    assert FixKind.MEMORY_UTILIZATION not in kinds  # (55 + 2 + 10) / 64 = 1.05


def _heads(attention: int) -> ModelFacts:
    return ModelFacts(
        architecture="X",
        model_type="x",
        hidden_size=1536,
        num_layers=10,
        num_attention_heads=attention,
        num_kv_heads=2,
        head_size=128,
    )


def test_tp_fix_skips_sizes_that_do_not_divide_the_heads() -> None:
    # 9 GiB usable. At tp=4: 32/4 = 8 GiB weights + 0.5 GiB reserve leave 0.5 GiB, short
    # of one 131,072-token sequence at 2*10*1*128*2 = 5 KiB/token (640 MiB). tp=8 fits
    # (4 GiB weights), but only when 8 divides the attention heads.
    demand = MemoryDemand(
        device_memory_bytes=10 * GIB,
        memory_utilization=0.9,
        weights_bytes=32 * GIB,
        reserve_bytes=GIB // 2,
        kv_bytes_per_token=2 * 10 * 2 * 128 * 2,
        max_model_len=131_072,
    )
    twelve = plan_budget(demand, Scaling(_heads(12), kv_dtype_bytes=2, tp=1))
    assert FixKind.TENSOR_PARALLEL not in {f.kind for f in twelve.fixes}
    sixteen = plan_budget(demand, Scaling(_heads(16), kv_dtype_bytes=2, tp=1))
    tp_fix = next(f for f in sixteen.fixes if f.kind is FixKind.TENSOR_PARALLEL)
    assert tp_fix.value == 8
    assert "needs 8 devices" in tp_fix.detail


def test_a_quantized_checkpoint_gets_no_quantization_fix() -> None:
    scaling = Scaling(LLAMA_70B, kv_dtype_bytes=2, tp=1, weights_quantized=True)
    kinds = {fix.kind for fix in plan_budget(_short_demand(), scaling).fixes}
    assert FixKind.QUANTIZATION not in kinds


def test_when_it_fits_there_are_no_fixes_and_sequences_are_counted() -> None:
    demand = MemoryDemand(
        device_memory_bytes=64 * GIB,
        memory_utilization=0.5,
        weights_bytes=10 * GIB,
        reserve_bytes=2 * GIB,
        kv_bytes_per_token=327_680,
        max_model_len=8192,
    )
    budget = plan_budget(demand)
    # 32 - 12 = 20 GiB; 20 GiB / 40 MiB per block = 512 blocks = 65,536 tokens = 8 x 8192.
    assert budget.fits
    assert (budget.tokens, budget.sequences, budget.fixes) == (65_536, 8, ())
    assert "8 sequence(s)" in budget.what()
    assert budget.hint() == ""


def test_weights_alone_overflowing_says_so() -> None:
    demand = MemoryDemand(
        device_memory_bytes=64 * GIB,
        memory_utilization=0.9,
        weights_bytes=131 * GIB,
        reserve_bytes=2 * GIB,
        kv_bytes_per_token=327_680,
        max_model_len=8192,
    )
    budget = plan_budget(demand, Scaling(LLAMA_70B, kv_dtype_bytes=2))
    assert "leave no memory for the KV cache" in budget.what()
    assert FixKind.MAX_MODEL_LEN not in {f.kind for f in budget.fixes}
    assert budget.fixes[0].kind is FixKind.TENSOR_PARALLEL
    assert budget.fixes[0].value == 4  # 131/2 = 65.5 GiB still too big; /4 = 32.75 fits


def test_kv_cache_shortfall_is_the_worker_message() -> None:
    error = kv_cache_shortfall(_short_demand())
    assert isinstance(error, KvCacheTooSmallError) and isinstance(error, ConfigError)
    assert error.what.startswith("KV cache cannot hold one sequence of max_model_len=32768")
    assert "10.00 GiB" in error.what and "26112 tokens" in error.what
    # The raw byte counts, and the flag that set the budget.
    assert f"needs {10 * GIB} B" in error.what and f"= {8 * GIB} B" in error.what
    assert "x 0.50 (--gpu-memory-utilization)" in error.what
    assert "40.00 GiB weights - 2.00 GiB reserve" in error.what
    assert error.hint.startswith("--gpu-memory-utilization 0.52")
    assert "--max-model-len 26112" in error.hint
    assert kv_cache_shortfall(MemoryDemand(64 * GIB, 0.9, 0, 0, 1024, 4096)) is None


def test_explicit_kv_bytes_name_their_flag_and_the_bytes_one_sequence_needs() -> None:
    # 4 KiB at 128 B/token hold 32 tokens; one 512-token sequence needs 64 KiB.
    demand = MemoryDemand.explicit(4096, kv_bytes_per_token=128, max_model_len=512, block_size=16)
    assert demand.budget_flag is BudgetFlag.KV_CACHE_MEMORY_BYTES
    assert (demand.kv_bytes_available, demand.tokens, demand.sequence_bytes) == (4096, 32, 65536)
    error = kv_cache_shortfall(demand)
    assert error is not None
    assert "needs 65536 B (64.0 KiB)" in error.what
    assert "--kv-cache-memory-bytes=4096 gives 4096 B" in error.what
    assert "weights" not in error.what  # nothing is taken off an explicit budget
    assert error.hint.startswith("--kv-cache-memory-bytes 65536 ")
    assert "--max-model-len 32 " in error.hint
    assert "--gpu-memory-utilization" not in error.hint
    assert [f.kind for f in error.budget.fixes] == [
        FixKind.KV_CACHE_MEMORY_BYTES,
        FixKind.MAX_MODEL_LEN,
    ]


def _measured(held: int, not_free: int, utilization: float = 0.5) -> MemoryDemand:
    return MemoryDemand(
        device_memory_bytes=24 * GIB,
        memory_utilization=utilization,
        weights_bytes=held,
        reserve_bytes=not_free,
        kv_bytes_per_token=8 * MIB,
        max_model_len=512,
        block_size=16,
        accounting=Accounting.MEASURED,
    )


def test_measured_parts_are_named_for_what_the_worker_measures() -> None:
    # 12 GiB - 2 GiB held - 9 GiB not free = 1 GiB = 128 tokens at 8 MiB/token < 512.
    error = kv_cache_shortfall(_measured(2 * GIB, 9 * GIB))
    assert error is not None
    assert "2.00 GiB held by this process at its peak (weights and working memory" in error.what
    assert "9.00 GiB not free on the device" in error.what and "reserve" not in error.what
    assert f"= {GIB} B (1.00 GiB) for the KV cache, which holds 128 tokens" in error.what
    # A larger share of memory the device lacks would not be free either.
    assert [f.kind for f in error.budget.fixes] == [FixKind.MAX_MODEL_LEN]


def test_measured_with_enough_free_memory_suggests_the_utilization_and_hides_a_zero() -> None:
    # 24 GiB x 0.05 = 1.2 GiB - 2 GiB held: nothing left. 2 GiB held + 4 GiB for 512
    # tokens at 8 MiB = 6 GiB of 24 GiB: 0.25.
    error = kv_cache_shortfall(_measured(2 * GIB, 0, utilization=0.05))
    assert error is not None
    assert error.what.startswith("What this process holds leaves no memory for the KV cache")
    assert "not free" not in error.what
    assert error.hint.startswith("--gpu-memory-utilization 0.25 (4.00 GiB for the KV cache")


def test_nothing_fits_says_to_combine_changes() -> None:
    demand = MemoryDemand(
        device_memory_bytes=GIB,
        memory_utilization=0.9,
        weights_bytes=10 * GIB,
        reserve_bytes=0,
        kv_bytes_per_token=1024,
        max_model_len=4096,
    )
    budget = plan_budget(demand)
    assert budget.fixes == ()
    assert "no single change fits" in budget.hint()
    assert "raise --gpu-memory-utilization" in budget.hint()


def test_format_bytes() -> None:
    assert format_bytes(3 * GIB // 2) == "1.50 GiB"
    assert format_bytes(320 * 1024) == "320.0 KiB"
    assert format_bytes(-2 * GIB) == "-2.00 GiB"
    assert format_bytes(12) == "12 B"
