"""Rules between additional_config keys, and against the parallel layout; both keys named."""

from __future__ import annotations

import pytest

from ascend_core.ascend_config import (
    AscendConfig,
    FinegrainedTPConfig,
    ParallelSizes,
    parse_ascend_config,
    validate_against_parallel,
)
from ascend_core.errors import ConfigError, PlanErrors

COMPILE = "additional_config.ascend_compilation_config"
FINE = "additional_config.finegrained_tp_config"


def test_static_kernel_requires_npugraph_ex_naming_both_keys():
    with pytest.raises(ConfigError) as err:
        parse_ascend_config(
            {
                "ascend_compilation_config": {
                    "enable_static_kernel": True,
                    "enable_npugraph_ex": False,
                }
            }
        )
    assert f"{COMPILE}.enable_static_kernel=true" in err.value.what
    assert f"{COMPILE}.enable_npugraph_ex=true" in err.value.what
    assert "enable_npugraph_ex to true" in err.value.hint


def test_static_kernel_alone_is_accepted_as_in_the_reference():
    """vllm_ascend/ascend_config.py AscendCompilationConfig: enable_npugraph_ex defaults to
    true, so enable_static_kernel alone passes its static_kernel -> npugraph_ex check."""
    config = parse_ascend_config({"ascend_compilation_config": {"enable_static_kernel": True}})
    assert config.ascend_compilation_config.enable_static_kernel
    assert config.ascend_compilation_config.enable_npugraph_ex


def test_static_kernel_with_npugraph_ex_is_accepted():
    config = parse_ascend_config(
        {"ascend_compilation_config": {"enable_static_kernel": True, "enable_npugraph_ex": True}}
    )
    assert config.ascend_compilation_config.enable_static_kernel


@pytest.mark.parametrize(
    ("key", "value"), [("expert_heat_collection_interval", 50), ("algorithm_execution_interval", 5)]
)
def test_dynamic_eplb_intervals_without_dynamic_eplb_are_an_error(key, value):
    with pytest.raises(ConfigError) as err:
        parse_ascend_config({"eplb_config": {key: value}})
    assert f"additional_config.eplb_config.{key}" in err.value.what
    assert "additional_config.eplb_config.dynamic_eplb is false" in err.value.what
    assert "dynamic_eplb to true" in err.value.hint


def test_dynamic_eplb_intervals_with_dynamic_eplb_and_a_map_are_accepted():
    config = parse_ascend_config(
        {
            "eplb_config": {
                "dynamic_eplb": True,
                "expert_map_path": "map.json",
                "expert_heat_collection_interval": 50,
                "num_redundant_experts": 8,
            }
        }
    )
    assert config.eplb_config.expert_heat_collection_interval == 50


def test_interval_written_at_its_default_is_not_an_error():
    config = parse_ascend_config({"eplb_config": {"expert_heat_collection_interval": 600}})
    assert config.eplb_config.expert_heat_collection_interval == 600


def test_decode_max_num_seqs_requires_pd_transfer_naming_both_keys():
    with pytest.raises(ConfigError) as err:
        parse_ascend_config({"scheduler_config": {"decode_max_num_seqs": 32}})
    assert "additional_config.scheduler_config.decode_max_num_seqs=32" in err.value.what
    assert "additional_config.scheduler_config.enable_pd_transfer is false" in err.value.what
    assert err.value.hint


# --- against the parallel layout -----------------------------------------------------------


def fine(**sizes: int) -> AscendConfig:
    return AscendConfig(finegrained_tp_config=FinegrainedTPConfig(**sizes))


def test_no_finegrained_tp_fits_any_layout():
    assert validate_against_parallel(AscendConfig(), ParallelSizes(3, 8)) == []


def test_sizes_dividing_dp_with_tp_1_are_accepted():
    config = fine(lmhead_tensor_parallel_size=4, oproj_tensor_parallel_size=2)
    assert validate_against_parallel(config, ParallelSizes(8, 1)) == []


def test_size_not_dividing_dp_names_the_key_and_dp_and_lists_divisors():
    (error,) = validate_against_parallel(fine(oproj_tensor_parallel_size=3), ParallelSizes(4, 1))
    assert error.what == (
        f"{FINE}.oproj_tensor_parallel_size=3 does not divide data_parallel_size=4."
    )
    assert "(1, 2, 4)" in error.hint
    assert "0 to turn it off" in error.hint


def test_finegrained_tp_alongside_plain_tp_is_accepted_when_it_divides_dp():
    # The feature guide limits sizes only by DP; plain TP > 1 is not a conflict.
    assert validate_against_parallel(fine(mlp_tensor_parallel_size=2), ParallelSizes(4, 2)) == []


def test_every_bad_size_is_reported():
    errors = validate_against_parallel(
        fine(lmhead_tensor_parallel_size=3, embedding_tensor_parallel_size=5), ParallelSizes(4, 1)
    )
    assert [e.what.split("=")[0] for e in errors] == [
        f"{FINE}.lmhead_tensor_parallel_size",
        f"{FINE}.embedding_tensor_parallel_size",
    ]


def test_parse_with_parallel_sizes_runs_the_layout_checks_with_the_others():
    raw = {
        "finegrained_tp_config": {"lmhead_tensor_parallel_size": 3},
        "enable_kv_nz": "false",
    }
    assert (
        parse_ascend_config(
            {"finegrained_tp_config": {"lmhead_tensor_parallel_size": 3}}
        ).finegrained_tp_config.lmhead_tensor_parallel_size
        == 3
    )
    with pytest.raises(PlanErrors) as err:
        parse_ascend_config(raw, ParallelSizes(data_parallel_size=4, tensor_parallel_size=1))
    assert len(err.value.errors) == 2
    assert "does not divide data_parallel_size=4" in str(err.value)
    assert "additional_config.enable_kv_nz" in str(err.value)
