"""The NPU adapter's MoE layer (route, permute, grouped MLP, combine; softmax, grouped
sigmoid, expert parallel, W8A8 experts), MLA latent-cache write and MLA latent decode
(its lengths through the graph update) captured in NPU graphs on the emulated device:
each check of moe_mla_graph_checks.py, in one fresh process."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.check_script import run_checks

CHECKS = Path(__file__).with_name("moe_mla_graph_checks.py")
NAMES = (
    "a_softmax_moe_layer_is_captured_and_replays_the_eager_result",
    "a_grouped_sigmoid_moe_layer_is_captured_and_replays_the_eager_result",
    "an_expert_parallel_moe_layer_with_padding_rows_is_captured",
    "the_quantized_experts_are_captured",
    "the_mla_latent_write_with_padding_slots_is_captured",
    "the_mla_latent_decode_takes_new_lengths_only_through_the_update",
)


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return run_checks(CHECKS, timeout=900)


def test_every_check_ran(results: dict[str, str]) -> None:
    assert sorted(results) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_moe_and_mla_in_npu_graphs(results: dict[str, str], name: str) -> None:
    assert results[name] == "ok", results[name]
