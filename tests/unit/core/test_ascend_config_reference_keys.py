"""additional_config keys vllm-ascend accepts and this build does not act on: each is
recognised, validated with the reference's type and range, and warned about once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_core.ascend_config import RETIRED_KEYS, describe_keys, parse_ascend_config
from ascend_core.ascend_config.fields import BoolSpec, FieldSpec, IntSpec
from ascend_core.ascend_config.reference_keys import (
    REFERENCE_KEYS,
    ReferenceKey,
    ReferenceSection,
)
from ascend_core.ascend_config.value_specs import (
    ChoiceSpec,
    FloatSpec,
    ObjectSpec,
    OptionalSpec,
    TextSpec,
)
from ascend_core.errors import ConfigError, PlanErrors
from ascend_core.plan import plan_config
from unit.core.plan_fixtures import npu

KEYS = sorted(REFERENCE_KEYS.values(), key=lambda k: k.path)


def nest(path: str, value: object) -> dict[str, Any]:
    """{"a": {"b": value}} for path "a.b"."""
    raw: dict[str, Any] = {}
    node = raw
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return raw


def a_valid_value(spec: FieldSpec | ReferenceSection) -> object:
    if isinstance(spec, ReferenceSection):
        return {}
    if isinstance(spec, BoolSpec):
        return False
    if isinstance(spec, IntSpec):
        return spec.minimum if spec.minimum is not None else 0
    if isinstance(spec, FloatSpec):
        return spec.maximum if spec.maximum is not None else 1.0
    if isinstance(spec, ChoiceSpec):
        return spec.choices[0]
    if isinstance(spec, TextSpec):
        return f"/tmp/x{spec.suffix}"
    if isinstance(spec, OptionalSpec):
        return None
    assert isinstance(spec, ObjectSpec)
    return {"task": "statistics"}


def test_about_forty_reference_keys_are_known_and_none_is_also_ours_or_retired():
    ours = {row.path for row in describe_keys()}
    assert len(REFERENCE_KEYS) >= 40
    assert not set(REFERENCE_KEYS) & ours
    assert not set(REFERENCE_KEYS) & set(RETIRED_KEYS)


@pytest.mark.parametrize("key", KEYS, ids=lambda k: k.path)
def test_each_reference_key_is_accepted_and_warned_about_once(key: ReferenceKey):
    """vllm_ascend/ascend_config.py AscendConfig (and its sub-configs) accepts the key; here
    it parses, keeps its value, and the plan says once that it has no effect."""
    value = a_valid_value(key.spec)
    plan = plan_config(npu(additional_config=nest(key.path, value)))
    config = plan.decisions.ascend_config
    assert config is not None, plan.errors
    assert config.given(key.path)
    assert config.reference_value(key.path) == value
    mentions = [w for w in plan.warnings if f"additional_config.{key.path} " in w]
    assert len(mentions) == 1 and "no effect" in mentions[0], plan.warnings
    if key.deprecated:
        assert key.deprecated in mentions[0]


def wrong_value(spec: FieldSpec | ReferenceSection) -> object:
    if isinstance(spec, BoolSpec):
        return "false"  # pydantic's lax bool takes it; a JSON string is refused here
    if isinstance(spec, IntSpec | ChoiceSpec):
        return "2"
    if isinstance(spec, FloatSpec):
        return "0.5"
    if isinstance(spec, TextSpec | ObjectSpec | ReferenceSection):
        return 3
    assert isinstance(spec, OptionalSpec)
    return wrong_value(spec.inner)


@pytest.mark.parametrize("key", KEYS, ids=lambda k: k.path)
def test_each_reference_key_refuses_a_value_of_the_wrong_type_naming_its_path(key):
    with pytest.raises(ConfigError) as err:
        parse_ascend_config(nest(key.path, wrong_value(key.spec)))
    assert f"additional_config.{key.path}" in err.value.what
    assert err.value.hint


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("eplb_config.eplb_policy_type", 4),  # EplbConfig: in [0, 1, 2, 3]
        ("eplb_config.eplb_heat_collection_stage", "both"),  # all / prefill / decode
        ("eplb_config.expert_map_record_path", "/maps/record.yaml"),  # must be .json
        ("combine_quant_mode", 1),  # Literal[0, 2, 3, 4]
        ("mc2_comm_alg", "ring"),
        ("enable_fused_mc2", 3),
        ("mega_moe_max_tokens", 0),  # must be positive
        ("rejection_sampler_config.posterior_threshold", 0),  # in (0, 1]
        ("rejection_sampler_config.posterior_alpha", -0.1),  # >= 0
        ("scheduler_config.profiling_chunk_config.smooth_factor", 1.5),  # in (0, 1]
        ("scheduler_config.profiling_chunk_config.max_fit_chunk", 5),  # must be > 5
        ("scheduler_config.batch_job_sched_config.reserve_max_blocks", 0),
        ("scheduler_config.dyntra_lb_config.mode", "greedy"),
        ("scheduler_config.dyntra_lb_config.end_step", -2),
        ("scheduler_config.short_request_first_config.long_max_wait_ms", -1.0),
        ("sparse_kv_offload_config.topk_buffer_size", 0),
        ("dynamic_spec_config.method", "medusa"),
    ],
)
def test_reference_ranges_are_enforced(path, value):
    """The after-validators of vllm_ascend/ascend_config.py, one per value here."""
    with pytest.raises(ConfigError) as err:
        parse_ascend_config(nest(path, value))
    assert f"additional_config.{path}" in err.value.what


def test_a_misspelt_key_inside_a_reference_section_gets_a_did_you_mean():
    with pytest.raises(ConfigError) as err:
        parse_ascend_config({"xlite_graph_config": {"enabeld": True}})
    assert "additional_config.xlite_graph_config.enabeld" in err.value.what
    assert "enabled" in err.value.hint


def test_a_key_neither_plugin_knows_is_still_an_error_with_a_did_you_mean():
    with pytest.raises(ConfigError) as err:
        parse_ascend_config({"enable_reduce_sampel": True})
    assert "Unknown key additional_config.enable_reduce_sampel" in err.value.what
    assert "enable_reduce_sample" in err.value.hint


def test_refresh_is_accepted_as_in_the_reference():
    """vllm_ascend/ascend_config.py init_ascend_config reads `refresh` (a bool) and strips it."""
    config = parse_ascend_config({"refresh": True})
    assert config.reference_value("refresh") is True


def test_reference_values_appear_in_the_dump_where_they_were_written():
    config = parse_ascend_config(
        {
            "mc2_comm_alg": "hierarchy",
            "xlite_graph_config": None,
            "eplb_config": {"eplb_policy_type": 3},
        }
    )
    dumped = config.to_dict()
    assert dumped["mc2_comm_alg"] == "hierarchy"
    assert dumped["xlite_graph_config"] == {}
    assert dumped["eplb_config"]["eplb_policy_type"] == 3


def valid_values(spec: FieldSpec | ReferenceSection) -> st.SearchStrategy[object]:
    if isinstance(spec, ReferenceSection):
        return st.fixed_dictionaries(
            {}, optional={k: valid_values(v) for k, v in spec.keys.items()}
        )
    if isinstance(spec, BoolSpec):
        return st.booleans()
    if isinstance(spec, IntSpec):
        return st.integers(spec.minimum if spec.minimum is not None else -5, 100)
    if isinstance(spec, FloatSpec):
        low = spec.minimum if spec.minimum is not None else -5.0
        high = spec.maximum if spec.maximum is not None else 100.0
        return st.floats(low, high, exclude_min=spec.minimum_open)
    if isinstance(spec, ChoiceSpec):
        return st.sampled_from(spec.choices)
    if isinstance(spec, TextSpec):
        return st.text(min_size=1, max_size=5).map(lambda t: t + spec.suffix)
    if isinstance(spec, OptionalSpec):
        return st.none() | valid_values(spec.inner)
    return st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(KEYS), unique_by=lambda k: k.path, max_size=6).flatmap(
        lambda keys: st.tuples(*(st.tuples(st.just(k.path), valid_values(k.spec)) for k in keys))
    )
)
def test_any_well_typed_reference_values_fail_only_on_rules_between_keys(pairs):
    raw: dict[str, Any] = {}
    for path, value in pairs:
        for top, inner in nest(path, value).items():
            if isinstance(inner, dict) and isinstance(raw.get(top), dict):
                raw[top].update(inner)
            else:
                raw[top] = inner
    try:
        config = parse_ascend_config(raw)
    except PlanErrors as problems:
        errors = list(problems.errors)
    except ConfigError as error:
        errors = [error]
    else:
        for path, value in pairs:
            assert config.reference_value(path) == (
                value
                if value is not None or not isinstance(REFERENCE_KEYS[path].spec, ReferenceSection)
                else {}
            )
        return
    # Type and range errors say "must be ..., got <value>"; rule errors never do.
    assert all(", got " not in e.what for e in errors), errors


def test_no_effect_warnings_come_with_the_errors_in_one_pass():
    plan = plan_config(npu(additional_config={"mc2_comm_alg": "fullmesh", "enable_kv_nzz": 1}))
    assert len(plan.errors) == 1
    assert any("additional_config.mc2_comm_alg " in w for w in plan.warnings)
    assert plan.decisions.ascend_config is None
