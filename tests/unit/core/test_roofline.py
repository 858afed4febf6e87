"""The roofline's arithmetic against hand counts: a Llama-3-8B-shaped dense model in bf16
on one A2 device, and DeepSeek-V3 W8A8 on A3 dies at the reference's DP32/TP1 + EP
decode shape. Every number below is worked out in the comments beside it."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from ascend_core.memory_budget import kv_bytes_per_token
from ascend_core.model_facts import model_facts_from_config
from ascend_core.quantization import QuantMethod, QuantScheme
from ascend_core.roofline import (
    CHIPS,
    Resource,
    Setup,
    decode_row,
    experts_touched,
    model_shape,
    prefill_bound,
    weight_format,
)
from ports.device import ChipFamily

LLAMA_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
    "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 163840,
    "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16",
}  # fmt: skip
A2, A3 = CHIPS[ChipFamily.A2], CHIPS[ChipFamily.A3]
EXACT = {"rel": 1e-9}


def test_llama_8b_shape_by_hand() -> None:
    s = model_shape(LLAMA_8B)
    assert s.attention_sharded == 33_554_432  # q and o: 2 x 4096 x (32 x 128)
    assert s.attention_kv == 8_388_608  # k and v: 2 x 4096 x (8 x 128)
    assert s.dense_mlp == 176_160_768  # gate, up, down: 3 x 4096 x 14336
    assert (s.dense_layers, s.moe_layers) == (32, 0)
    # 32 x (33,554,432 + 8,388,608 + 176,160,768) = 6,979,321,856; lm_head 128256 x 4096
    # = 525,336,576; 7,504,658,432 in all (the embedding is read a row per token).
    assert s.per_token_params == 7_504_658_432
    assert s.attention_flops_decode == 16_384  # QK and PV: 2 x 2 x 32 heads x 128


def test_llama_8b_bf16_decode_on_one_a2_by_hand() -> None:
    facts = model_facts_from_config(LLAMA_8B)
    kv = kv_bytes_per_token(facts, 2)
    assert kv.bytes == 131_072  # 2 (K, V) x 32 layers x 8 heads x 128 x 2 B
    setup = Setup(kv_bytes_per_token=kv.bytes, context=4096)
    row = decode_row(model_shape(LLAMA_8B), A2, setup, batch=1)
    # Weights: 7,504,658,432 x 2 B = 15,009,316,864, plus one embedding row 4096 x 2 B.
    assert row.weight_bytes == 15_009_325_056
    assert row.kv_bytes == 536_870_912  # 1 sequence x 4096 tokens x 131,072 B
    # (15,009,325,056 + 536,870,912) B / 1.6 TB/s (the A2's assumed HBM bandwidth)
    assert row.hbm_s == pytest.approx(15_546_195_968 / 1.6e12, **EXACT)
    # Matmuls 2 x 7,504,658,432 and attention 4096 x 16,384 x 32 = 2,147,483,648 FLOPs,
    # both at 320 TFLOPS bf16: 17,156,800,512 / 320e12 = 53.6 us; no link at tp=1.
    assert row.compute_s == pytest.approx(17_156_800_512 / 320e12, **EXACT)
    assert (row.link_bytes, row.link_s) == (0, 0)
    assert row.binds is Resource.HBM
    assert row.tokens_per_s == pytest.approx(1.6e12 / 15_546_195_968, **EXACT)  # ~102.9
    assert row.fits

    row = decode_row(model_shape(LLAMA_8B), A2, setup, batch=64)
    # 15,009,316,864 + 64 rows x 8192 B, and 64 x 536,870,912 B of KV: 49,369,579,520 B
    # in 30.86 ms: 2074 tok/s. Held: 15.0 GB of layers and lm_head, 1.05 GB embedding,
    # 34.4 GB KV: 50.4 GB fit in 64 GB.
    assert row.tokens_per_s == pytest.approx(64 * 1.6e12 / 49_369_579_520, **EXACT)
    assert row.fits
    # 256 sequences hold 137 GB of KV alone: the row says it does not fit.
    assert not decode_row(model_shape(LLAMA_8B), A2, setup, batch=256).fits


def test_llama_8b_tp8_all_reduces_by_hand() -> None:
    setup = Setup(tp=8, kv_bytes_per_token=16_384, context=4096)
    row = decode_row(model_shape(LLAMA_8B), A2, setup, batch=1)
    # Two all-reduces per layer (attention out, MLP out), 64 in all, each a ring over 8
    # ranks: 2 x 7/8 x 1 token x 4096 x 2 B = 14,336 B sent; 917,504 B over HCCS.
    assert row.link_bytes == 917_504
    assert row.link == "HCCS"
    assert row.link_s == pytest.approx(917_504 / 196e9, **EXACT)


def test_deepseek_v3_shape_by_hand() -> None:
    s = model_shape(DEEPSEEK_V3)
    # q_a 7168 x 1536 = 11,010,048 and kv_a 7168 x (512 + 64) = 4,128,768 on every rank.
    assert s.attention_replicated == 15_138_816
    # q_b 1536 x 128 x 192 = 37,748,736; kv_b 512 x 128 x 256 = 16,777,216;
    # o 128 x 128 x 7168 = 117,440,512.
    assert s.attention_sharded == 171_966_464
    assert (s.dense_layers, s.moe_layers) == (3, 58)  # first_k_dense_replace 3
    assert s.expert == s.shared == 44_040_192  # 3 x 7168 x 2048
    assert s.router == 1_835_008  # 256 x 7168
    # 61 x 187,105,280 + 3 x 396,361,728 + 58 x (8 x 44,040,192 + 44,040,192 + 1,835,008)
    # + 129280 x 7168 = 11,413,422,080 + 1,189,085,184 + 23,095,410,688 + 926,679,040:
    # 36.6 B active parameters a token (DeepSeek publishes 37 B).
    assert s.per_token_params == 36_624_596_992
    assert s.attention_flops_decode == 278_528  # 2 x 128 x (512 + 64 + 512), absorbed
    assert s.mtp_layers == 1


def test_experts_touched_grow_with_the_tokens_up_to_all() -> None:
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    # Two tokens: 256 x (1 - (248/256)^2) = 15.75 (a quarter expert shared on average).
    assert experts_touched(256, 8, 2) == pytest.approx(256 * (1 - (248 / 256) ** 2))
    assert experts_touched(256, 8, 1024) == pytest.approx(256)


def test_deepseek_v3_w8a8_dp32_ep_decode_on_a3_by_hand() -> None:
    facts = model_facts_from_config(DEEPSEEK_V3)
    kv = kv_bytes_per_token(facts, 2)
    assert kv.bytes == 70_272  # 61 layers x (512 + 64) x 2 B, one latent per rank
    fmt = weight_format(QuantMethod.ASCEND, QuantScheme.W8A8_DYNAMIC, 2)
    assert (fmt.bytes_per_weight, fmt.int8_compute) == (1, True)
    setup = Setup(
        dp=32, expert_parallel=True, weight_bytes=1, int8_compute=True,
        kv_bytes_per_token=kv.bytes, context=4096,
    )  # fmt: skip
    row = decode_row(model_shape(DEEPSEEK_V3), A3, setup, batch=32)
    # 32 x 32 = 1024 tokens route: all 256 experts touched (256 x (1 - (31/32)^1024)),
    # 8 on each rank: 8 x 44,040,192 = 352,321,536 B a MoE layer at 1 B a weight.
    # Attention and dense: 61 x 187,105,280 + 3 x 396,361,728 = 12,602,507,264 B.
    # MoE layers: 58 x (352,321,536 + 44,040,192 shared) + 58 x 1,835,008 x 2 B router
    # = 22,988,980,224 + 212,860,928 = 23,201,841,152 B. lm_head bf16: 1,853,358,080 B.
    # Embedding rows: 32 x 7168 x 2 = 458,752 B. In all 37,658,165,248 B.
    assert row.weight_bytes == pytest.approx(37_658_165_248, **EXACT)
    assert row.kv_bytes == 9_210_691_584  # 32 x 4096 x 70,272
    assert row.hbm_s == pytest.approx(46_868_856_832 / 1.6e12, **EXACT)  # 29.3 ms
    # EP over 32 ranks: each sends its 32 tokens to 8 experts, 31/32 of them remote:
    # 248 x (7168 int8 + 4 B scale) = 1,778,656 B out, 248 x 7168 x 2 B = 3,555,328 back;
    # x 58 MoE layers = 309,371,072 B over HCCS at 196 GB/s (1.58 ms).
    assert row.link_bytes == pytest.approx(309_371_072, **EXACT)
    assert row.link_s == pytest.approx(309_371_072 / 196e9, **EXACT)
    # Matmuls 2 x 32 x 36,624,596,992 = 2,343,974,207,488 at 752 TOPS int8, attention
    # 32 x 4096 x 278,528 x 61 = 2,226,940,542,976 FLOPs at 376 TFLOPS bf16: 9.04 ms.
    expected_compute = 2_343_974_207_488 / 752e12 + 2_226_940_542_976 / 376e12
    assert row.compute_s == pytest.approx(expected_compute, **EXACT)
    assert row.binds is Resource.HBM
    # 1024 tokens a step of 29.3 ms: 34,957 tok/s for the 32 dies, 1092 a die.
    assert row.tokens_per_s == pytest.approx(1024 * 1.6e12 / 46_868_856_832, **EXACT)
    assert row.tokens_per_s_per_device == pytest.approx(row.tokens_per_s / 32, **EXACT)
    # Held: 12.6 GB + 58 x 8 experts (20.4 GB) + shared and router 2.8 GB + embedding and
    # lm_head 3.7 GB + 9.2 GB KV = 48.7 GB of 64 GB.
    assert row.fits


def test_ep_beyond_one_a2_server_crosses_roce() -> None:
    setup = Setup(
        tp=8, dp=2, expert_parallel=True, weight_bytes=1, int8_compute=True,
        kv_bytes_per_token=70_272, context=4096,
    )  # fmt: skip
    row = decode_row(model_shape(DEEPSEEK_V3), A2, setup, batch=1)
    # 16 ranks: two 8-NPU servers. Each rank dispatches 1/8 token to 8 experts, 15/16
    # remote: 0.9375 x (7172 + 14336) B x 58 = 1,169,490 B over RoCE at 25 GB/s; the TP
    # all-reduces (61 attention + 3 dense + 58 shared, each 2 x 7/8 x 7168 x 2 B = 25,088
    # B) take 3,060,736 B over HCCS at 196 GB/s, side by side: RoCE is the longer.
    assert row.link == "RoCE"
    assert row.link_bytes == pytest.approx(0.9375 * 21_508 * 58 + 122 * 25_088, **EXACT)
    assert row.link_s == pytest.approx(0.9375 * 21_508 * 58 / 25e9, **EXACT)


def test_mtp_adds_its_layer_and_counts_every_draft_accepted() -> None:
    facts = model_facts_from_config(DEEPSEEK_V3)
    base = Setup(
        dp=32, expert_parallel=True, weight_bytes=1, int8_compute=True,
        kv_bytes_per_token=kv_bytes_per_token(facts, 2).bytes, context=4096,
    )  # fmt: skip
    plain = decode_row(model_shape(DEEPSEEK_V3), A3, base, batch=32)
    mtp = decode_row(model_shape(DEEPSEEK_V3), A3, attrs.evolve(base, draft_tokens=1), 32)
    # The MTP layer (attention 187,105,280 + 8 local experts + shared + eh_proj 2 x 7168^2,
    # at 1 B; router and lm_head at 2 B) is read once more per step.
    extra = 187_105_280 + 352_321_536 + 44_040_192 + 2 * 7168 * 7168
    extra += 1_835_008 * 2 + 926_679_040 * 2
    # the verify step's 64 embedding rows instead of 32: 32 x 7168 x 2 B more.
    extra += 32 * 7168 * 2
    assert mtp.weight_bytes - plain.weight_bytes == pytest.approx(extra, **EXACT)
    assert mtp.tokens_per_s > plain.tokens_per_s  # two tokens a sequence per step


def test_prefill_bound_is_flops_against_every_cube() -> None:
    s = Setup(kv_bytes_per_token=131_072, context=2048)
    bound = prefill_bound(model_shape(LLAMA_8B), A2, s)
    # 2 x 7,504,658,432 matmul FLOPs + 1024 (half the prompt) x 16,384 x 32 attention.
    flops = 2 * 7_504_658_432 + 1024 * 16_384 * 32
    assert bound.flops_per_token == flops
    assert bound.tokens_per_s == pytest.approx(320e12 / flops, **EXACT)  # ~20.6 k tok/s
    assert bound.binds is Resource.COMPUTE


def test_every_chip_figure_names_its_source() -> None:
    for chip in CHIPS.values():
        for name, figure in chip.figures().items():
            assert figure.value > 0, (chip.family, name)
            assert len(figure.source) > 20, (chip.family, name)
            if not figure.published:
                assert "assum" in figure.source, (chip.family, name)
