"""Weights per device: every weight over tp x pp, the routed experts over the EP group
(tp x dp under --enable-expert-parallel) instead; shared experts stay with the rest."""

from __future__ import annotations

from ascend_core.memory_budget.sizes import weights_size
from ports.model_files import TensorHeader


def _moe_headers() -> list[TensorHeader]:
    # bf16: attention 2 x 64x64 (16 KiB), 8 routed experts x 3 x 16x64 (48 KiB), a shared
    # expert 3 x 16x64 (6 KiB).
    headers = [TensorHeader(f"model.layers.0.self_attn.{n}.weight", "BF16", (64, 64))
               for n in ("q_proj", "o_proj")]
    headers += [TensorHeader(f"model.layers.0.mlp.experts.{e}.{n}.weight", "BF16", (16, 64))
                for e in range(8) for n in ("gate_proj", "up_proj", "down_proj")]
    headers += [TensorHeader(f"model.layers.0.mlp.shared_experts.{n}.weight", "BF16", (16, 64))
                for n in ("gate_proj", "up_proj", "down_proj")]
    return headers


def test_routed_experts_are_counted_apart_from_shared_ones() -> None:
    size = weights_size(_moe_headers(), "bfloat16")
    assert size.total_bytes == 2 * 64 * 64 * 2 + 8 * 3 * 16 * 64 * 2 + 3 * 16 * 64 * 2
    assert size.routed_expert_bytes == 8 * 3 * 16 * 64 * 2  # 49152


def test_expert_parallel_spreads_the_routed_experts_over_the_ep_group() -> None:
    size = weights_size(_moe_headers(), "bfloat16")
    rest = size.total_bytes - size.routed_expert_bytes  # 16384 + 6144 = 22528
    assert size.per_device(tp=2, pp=1) == size.total_bytes // 2  # no EP: all over TP
    # TP=2 x DP=4 with EP: the rest / 2 = 11264, the routed experts / 8 = 6144.
    assert size.per_device(tp=2, pp=1, ep=8) == rest // 2 + 49152 // 8 == 17408
    assert size.per_device(tp=1, pp=2, ep=4) == rest // 2 + 49152 // 8


def test_a_dense_model_is_unchanged_by_ep() -> None:
    dense = [TensorHeader("model.layers.0.mlp.up_proj.weight", "BF16", (64, 64))]
    size = weights_size(dense, "bfloat16")
    assert size.routed_expert_bytes == 0 and size.per_device(2, 1, 4) == size.total_bytes // 2
