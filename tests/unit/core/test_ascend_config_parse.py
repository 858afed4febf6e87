"""additional_config parsing: types, ranges, unknown and retired keys, all problems at once."""

from __future__ import annotations

import pytest

from ascend_core.ascend_config import (
    RETIRED_KEYS,
    AscendCompilationConfig,
    AscendConfig,
    EplbConfig,
    describe_keys,
    parse_ascend_config,
)
from ascend_core.ascend_config.fields import SectionSpec, specs_of
from ascend_core.ascend_config.reference_keys import REFERENCE_KEYS
from ascend_core.errors import ConfigError, PlanErrors


def error_of(raw) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_ascend_config(raw)
    return err.value


def test_none_and_empty_give_the_defaults():
    assert parse_ascend_config(None) == parse_ascend_config({}) == AscendConfig()
    config = AscendConfig()
    assert config.weight_nz_mode == 1
    assert config.pa_shape_list == ()
    assert config.eplb_config.num_redundant_experts == 0
    assert config.ascend_compilation_config.fuse_norm_quant is True


def test_a_full_valid_config_is_read_into_typed_values():
    config = parse_ascend_config(
        {
            "ascend_compilation_config": {
                "enable_npugraph_ex": True,
                "enable_static_kernel": True,
                "fuse_norm_quant": False,
                "fuse_qknorm_rope": False,
                "fuse_allreduce_rms": True,
            },
            "weight_nz_mode": 2,
            "enable_mlapo": True,
            "pa_shape_list": [1, 8, 16],
            "enable_shared_expert_dp": True,
            "multistream_overlap_shared_expert": True,
            "enable_cpu_binding": True,
            "enable_prefill_mc2": True,
            "enable_kv_nz": True,
            "eplb_config": {
                "dynamic_eplb": True,
                "expert_map_path": "/maps/ep16.json",
                "num_redundant_experts": 16,
                "expert_heat_collection_interval": 100,
                "algorithm_execution_interval": 10,
            },
            "finegrained_tp_config": {"oproj_tensor_parallel_size": 2},
            "rl_config": {"weight_refit": True},
            "scheduler_config": {
                "enable_pd_transfer": True,
                "decode_max_num_seqs": 64,
                "recompute_scheduler_enable": True,
            },
        }
    )
    assert config.ascend_compilation_config == AscendCompilationConfig(
        enable_npugraph_ex=True,
        enable_static_kernel=True,
        fuse_norm_quant=False,
        fuse_qknorm_rope=False,
        fuse_allreduce_rms=True,
    )
    assert config.weight_nz_mode == 2
    assert config.pa_shape_list == (1, 8, 16)
    assert config.eplb_config == EplbConfig(True, "/maps/ep16.json", 16, 100, 10)
    assert config.finegrained_tp_config.oproj_tensor_parallel_size == 2
    assert config.finegrained_tp_config.lmhead_tensor_parallel_size == 0
    assert config.rl_config.weight_refit is True
    assert config.scheduler_config.decode_max_num_seqs == 64
    assert config.enable_kv_nz and config.enable_prefill_mc2 and config.enable_cpu_binding


def test_config_is_frozen_hashable_and_dumps_to_plain_dict():
    config = parse_ascend_config({"pa_shape_list": [2, 4]})
    assert hash(config) == hash(parse_ascend_config({"pa_shape_list": [2, 4]}))
    with pytest.raises(AttributeError):
        config.weight_nz_mode = 0  # type: ignore[misc]
    dumped = config.to_dict()
    assert dumped["pa_shape_list"] == [2, 4]
    assert dumped["eplb_config"]["expert_map_path"] is None
    assert dumped["ascend_compilation_config"]["enable_npugraph_ex"] is True  # reference default


def test_a_null_section_means_its_defaults():
    assert parse_ascend_config({"eplb_config": None}) == AscendConfig()


# --- unknown and retired keys --------------------------------------------------------------


def test_unknown_nested_key_names_full_path_and_suggests():
    error = error_of({"eplb_config": {"num_redundant_expert": 2}})
    assert error.what == "Unknown key additional_config.eplb_config.num_redundant_expert."
    assert "Did you mean 'num_redundant_experts'?" in error.hint


def test_unknown_key_with_nothing_close_lists_the_accepted_keys():
    error = error_of({"scheduler_config": {"zzz": 1}})
    assert "additional_config.scheduler_config.zzz" in error.what
    assert "enable_pd_transfer, decode_max_num_seqs" in error.hint


@pytest.mark.parametrize(
    ("key", "replacement"),
    [
        ("torchair_graph_config", "additional_config.ascend_compilation_config"),
        ("dynamic_eplb", "additional_config.eplb_config.dynamic_eplb"),
        (
            "oproj_tensor_parallel_size",
            "additional_config.finegrained_tp_config.oproj_tensor_parallel_size",
        ),
    ],
)
def test_replaced_key_says_what_replaced_it(key, replacement):
    error = error_of({key: {"enabled": True}})
    assert f"additional_config.{key} was replaced by {replacement}" in error.what
    assert replacement in error.hint


@pytest.mark.parametrize(
    "key",
    ["ascend_scheduler_config", "chunked_prefill_for_mla", "expert_tensor_parallel_size"],
)
def test_removed_key_says_it_was_removed(key):
    error = error_of({key: True})
    assert f"additional_config.{key} was removed" in error.what
    assert f"delete {key}" in error.hint


def spec_at(path: str):
    """The spec of dotted `path` under additional_config, None when no such key."""
    schema, spec = AscendConfig, None
    for part in path.split("."):
        if schema is None:
            return None
        spec = specs_of(schema).get(part)
        if spec is None:
            return None
        schema = spec.schema if isinstance(spec, SectionSpec) else None
    return spec


def test_retired_table_never_names_a_live_key_and_points_at_live_ones():
    for path, retired in RETIRED_KEYS.items():
        assert spec_at(path) is None, path
        live = retired.replacement is None or spec_at(retired.replacement) is not None
        assert live or retired.replacement in REFERENCE_KEYS, path
        assert retired.reason


def test_non_text_key_is_an_error_not_a_crash():
    error = error_of({1: True})
    assert "additional_config" in error.what
    assert "1" in error.what


@pytest.mark.parametrize("raw", [[1, 2], "weight_nz_mode=1", 3])
def test_whole_config_that_is_not_a_mapping(raw):
    error = error_of(raw)
    assert error.what.startswith("additional_config must be a mapping")


def test_section_that_is_not_a_mapping_names_it():
    error = error_of({"eplb_config": [1]})
    assert error.what == "additional_config.eplb_config must be a mapping (JSON object), got list."


# --- value types ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "hint_part"),
    [
        ("true", "write true without quotes"),
        ("False", "write false without quotes"),
        (1, "write true instead of 1"),
        (0, "write false instead of 0"),
        (None, "write true or false"),
        (2.5, "write true or false"),
    ],
)
def test_bools_must_be_real_bools(value, hint_part):
    error = error_of({"enable_mlapo": value})
    assert error.what.startswith("additional_config.enable_mlapo must be true or false")
    assert hint_part in error.hint


def test_nested_bool_error_names_the_nested_path():
    error = error_of({"ascend_compilation_config": {"fuse_norm_quant": "yes"}})
    assert "additional_config.ascend_compilation_config.fuse_norm_quant" in error.what


@pytest.mark.parametrize(
    ("value", "hint_part"),
    [
        (True, "JSON true/false are booleans"),
        (1.0, "write 1 without a decimal point"),
        ("2", "write 2 without quotes"),
        ([1], "give a whole number"),
    ],
)
def test_ints_reject_other_types_with_a_hint(value, hint_part):
    error = error_of({"weight_nz_mode": value})
    assert error.what.startswith("additional_config.weight_nz_mode must be an integer from 0 to 2")
    assert hint_part in error.hint


@pytest.mark.parametrize("value", [-1, 3])
def test_weight_nz_mode_range(value):
    error = error_of({"weight_nz_mode": value})
    assert error.what == (
        f"additional_config.weight_nz_mode must be an integer from 0 to 2, got {value}."
    )
    assert "remove the key" in error.hint


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("eplb_config", "num_redundant_experts", -1, "an integer >= 0"),
        ("eplb_config", "expert_heat_collection_interval", 0, "an integer >= 1"),
        ("eplb_config", "algorithm_execution_interval", -5, "an integer >= 1"),
        ("finegrained_tp_config", "lmhead_tensor_parallel_size", -2, "an integer >= 0"),
        ("finegrained_tp_config", "mlp_tensor_parallel_size", "4", "an integer >= 0"),
        ("scheduler_config", "decode_max_num_seqs", -1, "an integer >= 0"),
    ],
)
def test_nested_int_ranges(section, key, value, expected):
    error = error_of({section: {key: value}})
    assert error.what.startswith(f"additional_config.{section}.{key} must be {expected}")
    assert error.hint


@pytest.mark.parametrize("value", ["", "  ", 3, True])
def test_expert_map_path_must_be_a_path_or_null(value):
    error = error_of({"eplb_config": {"expert_map_path": value}})
    assert error.what.startswith("additional_config.eplb_config.expert_map_path must be")
    assert "path" in error.hint


@pytest.mark.parametrize(
    ("value", "what_part", "hint_part"),
    [
        ("1,2", "must be a list of positive integers", "[1, 2, 4, 8]"),
        ({"a": 1}, "must be a list of positive integers", "[1, 2, 4, 8]"),
        ([1, 0], "pa_shape_list[1] must be a positive integer, got 0", "1 or more"),
        ([1, True], "pa_shape_list[1] must be a positive integer, got true", "booleans"),
        ([4, 2, 8], "pa_shape_list[1]=2 follows 4", "[2, 4, 8]"),
        ([2, 2], "pa_shape_list[1]=2 follows 2", "[2]"),
    ],
)
def test_pa_shape_list_is_positive_ascending_unique(value, what_part, hint_part):
    error = error_of({"pa_shape_list": value})
    assert "additional_config.pa_shape_list" in error.what
    assert what_part in error.what
    assert hint_part in error.hint


# --- everything in one pass ----------------------------------------------------------------


def test_every_problem_is_collected_into_one_plan_errors():
    with pytest.raises(PlanErrors) as err:
        parse_ascend_config(
            {
                "enable_mlapo": "true",
                "weight_nz_mode": 7,
                "torchair_graph_config": {},
                "eplb_config": {"num_redundant_expert": 1, "dynamic_eplb": 1},
                "ascend_compilation_config": {
                    "enable_static_kernel": True,
                    "enable_npugraph_ex": False,
                },
            }
        )
    whats = [e.what for e in err.value.errors]
    assert len(whats) == 6, whats
    assert all(isinstance(e, ConfigError) and e.hint for e in err.value.errors)
    text = str(err.value)
    for path in (
        "additional_config.enable_mlapo",
        "additional_config.weight_nz_mode",
        "additional_config.torchair_graph_config",
        "additional_config.eplb_config.num_redundant_expert",
        "additional_config.eplb_config.dynamic_eplb",
        "additional_config.ascend_compilation_config.enable_static_kernel",
    ):
        assert path in text


# --- key documentation ---------------------------------------------------------------------


def test_every_key_is_documented_with_its_default():
    rows = {row.path: row for row in describe_keys()}
    assert rows["eplb_config.num_redundant_experts"].default == 0
    assert rows["eplb_config.num_redundant_experts"].expected == "an integer >= 0"
    assert rows["weight_nz_mode"].expected == "an integer from 0 to 2"
    assert rows["pa_shape_list"].default == ()
    assert "ascend_compilation_config.enable_npugraph_ex" in rows
    assert "eplb_config" not in rows  # sections are expanded into their keys
    for row in rows.values():
        assert row.doc and "\n" not in row.doc, row.path
        # the documented default parses back to itself
        *parents, leaf = row.path.split(".")
        raw: dict = {leaf: list(row.default) if isinstance(row.default, tuple) else row.default}
        for parent in reversed(parents):
            raw = {parent: raw}
        assert parse_ascend_config(raw) == AscendConfig(), row.path
