"""Property: any additional_config gives an AscendConfig or an AscendError, nothing else."""

from __future__ import annotations

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from ascend_core.ascend_config import AscendConfig, ParallelSizes, parse_ascend_config
from ascend_core.ascend_config.fields import (
    AscendingIntsSpec,
    BoolSpec,
    FieldSpec,
    IntSpec,
    PathSpec,
    SectionSpec,
    specs_of,
)
from ascend_core.errors import AscendError, PlanErrors


def all_key_names(schema: type) -> list[str]:
    names = []
    for name, spec in specs_of(schema).items():
        names.append(name)
        if isinstance(spec, SectionSpec):
            names.extend(all_key_names(spec.schema))
    return names


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=12)
)
# Keys are mostly real ones (so values reach the typed readers), some near or far misses.
KEYS = st.sampled_from([*all_key_names(AscendConfig), "torchair_graph_config", "refresh"]) | (
    st.text(max_size=12)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=8,
)
ANY_KEYS = KEYS | st.integers() | st.none() | st.tuples(st.integers())


def check(raw, parallel=None) -> None:
    try:
        config = parse_ascend_config(raw, parallel)
    except PlanErrors as errors:
        assert len(errors.errors) > 1
        assert all(e.what and e.hint for e in errors.errors)
        return
    except AscendError as error:
        assert error.what and error.hint
        return
    assert isinstance(config, AscendConfig)
    hash(config)
    assert attrs.evolve(config) == config
    config.to_dict()


@settings(max_examples=40)
@given(st.dictionaries(ANY_KEYS, JSON_VALUES, max_size=6))
def test_any_mapping_gives_a_config_or_an_ascend_error(raw):
    check(raw)


# Fewer examples than the default 100: the unit suite stays fast and CI runs it often.
@settings(max_examples=40)
@given(
    st.dictionaries(KEYS, JSON_VALUES, max_size=6),
    st.builds(ParallelSizes, st.integers(1, 16), st.integers(1, 8)),
)
def test_any_mapping_with_any_layout_gives_a_config_or_an_ascend_error(raw, sizes):
    check(raw, sizes)


@settings(max_examples=50)
@given(JSON_VALUES)
def test_any_json_value_as_the_whole_config(raw):
    check(raw)


def valid_value(spec: FieldSpec) -> st.SearchStrategy[object]:
    if isinstance(spec, BoolSpec):
        return st.booleans()
    if isinstance(spec, IntSpec):
        return st.integers(spec.minimum, spec.maximum if spec.maximum is not None else 64)
    if isinstance(spec, PathSpec):
        return st.none() | st.text(min_size=1, max_size=8).filter(str.strip)
    assert isinstance(spec, AscendingIntsSpec)
    return st.lists(st.integers(1, 64), unique=True, max_size=5).map(sorted)


def well_typed(schema: type) -> st.SearchStrategy[dict[str, object]]:
    """Mappings whose every key exists and every value has the right type and range."""
    parts = {}
    for name, spec in specs_of(schema).items():
        parts[name] = (
            well_typed(spec.schema) if isinstance(spec, SectionSpec) else valid_value(spec)
        )
    return st.fixed_dictionaries({}, optional=parts)


@given(well_typed(AscendConfig))
def test_well_typed_configs_fail_only_on_rules_between_keys(raw):
    try:
        config = parse_ascend_config(raw)
    except AscendError as error:
        errors = error.errors if isinstance(error, PlanErrors) else (error,)
        assert all("requires" in e.what or "is set but" in e.what for e in errors), errors
        return
    assert_written_values_kept(raw, config.to_dict())


def assert_written_values_kept(raw: dict[str, object], dumped: dict[str, object]) -> None:
    for key, value in raw.items():
        if isinstance(value, dict):
            assert_written_values_kept(value, dumped[key])
        else:
            assert dumped[key] == value, key
