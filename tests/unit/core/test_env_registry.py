"""The VLLM_ASCEND_* registry: typed reading, errors that name the fix, unknown names."""

from __future__ import annotations

import contextlib
import enum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ascend_core.env_registry as registry_module
from ascend_core.env import outside_vars as outside_vars_module
from ascend_core.env import reference_vars as reference_vars_module
from ascend_core.env.variables import (
    EnvVar,
    VarType,
    bool_var,
    choice_var,
    float_var,
    int_var,
    str_var,
)
from ascend_core.env_registry import (
    ENV_REGISTRY,
    ENV_VARS,
    RETIRED_VARS,
    DeviceRequest,
    read_env,
    unknown_variables,
)
from ascend_core.errors import AscendError, EnvironmentVariableError, PlanErrors
from unit.fakes.environment import FakeEnvironment


def test_defaults_when_nothing_is_set():
    settings = read_env(FakeEnvironment())
    assert settings.device is DeviceRequest.AUTO
    assert settings.log_plan is True
    assert settings.enable_nz == 1
    assert settings.enable_mlapo is True  # vllm_ascend/envs.py: VLLM_ASCEND_ENABLE_MLAPO "1"
    assert settings.enable_flashcomm1 is False
    assert settings.enable_prefetch_mlp is False
    assert settings.enable_matmul_allreduce is False
    assert settings.balance_scheduling is False
    assert settings.training_consistency is False
    assert not settings.is_set(registry_module.DEVICE)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("cpu", DeviceRequest.CPU), ("NPU", DeviceRequest.NPU), (" auto ", DeviceRequest.AUTO)],
)
def test_device_is_an_enum_whatever_the_case(raw, expected):
    settings = read_env(FakeEnvironment({"VLLM_ASCEND_DEVICE": raw}))
    assert settings.device is expected
    assert settings.is_set(registry_module.DEVICE)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("0", False), ("true", True), ("False", False), ("ON", True), ("no", False)],
)
def test_bool_spellings(raw, expected):
    assert read_env(FakeEnvironment({"VLLM_ASCEND_LOG_PLAN": raw})).log_plan is expected


def test_bad_choice_names_variable_value_and_accepted_values():
    with pytest.raises(EnvironmentVariableError) as err:
        read_env(FakeEnvironment({"VLLM_ASCEND_DEVICE": "gpu"}))
    assert "VLLM_ASCEND_DEVICE" in err.value.what
    assert "'gpu'" in err.value.what
    assert "auto, npu, cpu" in err.value.what
    assert "unset it to use the default auto" in err.value.hint


def test_nz_accepts_only_0_1_2():
    assert read_env(FakeEnvironment({"VLLM_ASCEND_ENABLE_NZ": "2"})).enable_nz == 2
    with pytest.raises(EnvironmentVariableError) as err:
        read_env(FakeEnvironment({"VLLM_ASCEND_ENABLE_NZ": "3"}))
    assert "VLLM_ASCEND_ENABLE_NZ='3'" in err.value.what
    assert "one of 0, 1, 2" in err.value.what


def test_bad_bool_lists_accepted_spellings():
    with pytest.raises(EnvironmentVariableError) as err:
        read_env(FakeEnvironment({"VLLM_ASCEND_ENABLE_MLAPO": "enabled"}))
    assert "VLLM_ASCEND_ENABLE_MLAPO='enabled'" in err.value.what
    assert "1 or 0" in err.value.what
    assert err.value.hint


def test_empty_value_is_an_error_not_a_silent_default():
    with pytest.raises(EnvironmentVariableError, match="VLLM_ASCEND_ENABLE_FLASHCOMM1"):
        read_env(FakeEnvironment({"VLLM_ASCEND_ENABLE_FLASHCOMM1": ""}))


def test_several_bad_values_are_reported_together():
    env = FakeEnvironment({"VLLM_ASCEND_DEVICE": "tpu", "VLLM_ASCEND_ENABLE_NZ": "x"})
    with pytest.raises(PlanErrors) as err:
        read_env(env)
    assert len(err.value.errors) == 2
    assert all(isinstance(e, EnvironmentVariableError) for e in err.value.errors)
    assert "VLLM_ASCEND_DEVICE" in str(err.value)
    assert "VLLM_ASCEND_ENABLE_NZ" in str(err.value)


def test_describe_says_which_values_were_set():
    lines = read_env(FakeEnvironment({"VLLM_ASCEND_DEVICE": "cpu"})).describe()
    assert "VLLM_ASCEND_DEVICE=cpu (set)" in lines
    assert "VLLM_ASCEND_LOG_PLAN=1 (default)" in lines
    assert len(lines) == len(ENV_VARS)


def test_get_of_an_unregistered_var_says_where_to_register_it():
    stray = bool_var("VLLM_ASCEND_STRAY", False, "not registered")
    with pytest.raises(KeyError, match="ENV_VARS"):
        read_env(FakeEnvironment()).get(stray)


# --- the registry itself -------------------------------------------------------------------


def test_registry_entries_are_well_formed():
    names = [v.name for v in ENV_VARS]
    assert len(names) == len(set(names))
    assert set(ENV_REGISTRY) == set(names)
    for var in ENV_VARS:
        assert var.name.startswith("VLLM_ASCEND_")
        assert var.doc and "\n" not in var.doc, var.name
        # the default, written out, reads back as itself
        assert var.parse(var.default_text()) == var.default, var.name


def test_every_module_constant_is_in_the_registry_tuple():
    """Each constant is in ENV_VARS, or in OUTSIDE_VARS when another software owns it."""
    modules = (registry_module, reference_vars_module, outside_vars_module)
    constants = [v for m in modules for v in vars(m).values() if isinstance(v, EnvVar)]
    registered = (*ENV_VARS, *registry_module.OUTSIDE_VARS)
    assert set(map(id, constants)) == set(map(id, registered))


def test_retired_names_are_not_registered_and_point_at_registered_ones():
    for old in RETIRED_VARS:
        assert old.name not in ENV_REGISTRY
        assert old.replacement is None or old.replacement in ENV_REGISTRY
        assert old.reason


def test_the_brief_names_are_registered():
    for name in (
        "VLLM_ASCEND_DEVICE",
        "VLLM_ASCEND_LOG_PLAN",
        "VLLM_ASCEND_ENABLE_NZ",
        "VLLM_ASCEND_ENABLE_MLAPO",
        "VLLM_ASCEND_ENABLE_FLASHCOMM1",
        "VLLM_ASCEND_ENABLE_PREFETCH_MLP",
        "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
        "VLLM_ASCEND_BALANCE_SCHEDULING",
        "VLLM_ASCEND_TRAINING_CONSISTENCY",
    ):
        assert name in ENV_REGISTRY


# --- value types not (yet) used by a registered variable ------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


TYPED = (
    int_var("VLLM_ASCEND_T_INT", 4, "an int"),
    float_var("VLLM_ASCEND_T_FLOAT", 0.5, "a float"),
    str_var("VLLM_ASCEND_T_STR", "x", "text"),
    choice_var("VLLM_ASCEND_T_COLOUR", Colour, Colour.RED, "an enum"),
)


def test_each_value_type_parses_into_its_python_type():
    env = FakeEnvironment(
        {
            "VLLM_ASCEND_T_INT": " -12 ",
            "VLLM_ASCEND_T_FLOAT": "0.25",
            "VLLM_ASCEND_T_STR": " kept as written ",
            "VLLM_ASCEND_T_COLOUR": "Blue",
        }
    )
    settings = read_env(env, TYPED)
    assert [settings.get(v) for v in TYPED] == [-12, 0.25, " kept as written ", Colour.BLUE]
    assert [v.type for v in TYPED] == [VarType.INT, VarType.FLOAT, VarType.STR, VarType.CHOICE]


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("VLLM_ASCEND_T_INT", "1_000"),
        ("VLLM_ASCEND_T_INT", "1.5"),
        ("VLLM_ASCEND_T_INT", "\u0661"),  # an Arabic-Indic digit, which int() would take
        ("VLLM_ASCEND_T_FLOAT", "nan"),
        ("VLLM_ASCEND_T_FLOAT", "inf"),
        ("VLLM_ASCEND_T_FLOAT", "half"),
        ("VLLM_ASCEND_T_COLOUR", "green"),
    ],
)
def test_each_value_type_rejects_what_it_should(name, raw):
    with pytest.raises(EnvironmentVariableError, match=name):
        read_env(FakeEnvironment({name: raw}), TYPED)


# --- unknown and retired names -------------------------------------------------------------


def test_misspelt_name_gets_a_did_you_mean():
    env = FakeEnvironment({"VLLM_ASCEND_ENABLE_MLAP": "1", "VLLM_ASCEND_DEVICE": "cpu"})
    (unknown,) = unknown_variables(env)
    assert unknown.name == "VLLM_ASCEND_ENABLE_MLAP"
    assert "VLLM_ASCEND_ENABLE_MLAP" in unknown.what
    assert "VLLM_ASCEND_ENABLE_MLAPO" in unknown.hint
    assert unknown.replacement is None


def test_unrelated_unknown_name_still_gets_a_hint():
    (unknown,) = unknown_variables(FakeEnvironment({"VLLM_ASCEND_ZZZ_QQQ": "1"}))
    assert unknown.hint


def test_renamed_variable_says_what_replaced_it():
    (unknown,) = unknown_variables(FakeEnvironment({"VLLM_ASCEND_ENABLE_FLASHCOMM": "1"}))
    assert unknown.replacement == "VLLM_ASCEND_ENABLE_FLASHCOMM1"
    assert "renamed to VLLM_ASCEND_ENABLE_FLASHCOMM1" in unknown.what
    assert "set VLLM_ASCEND_ENABLE_FLASHCOMM1 instead" in unknown.hint


def test_removed_variable_says_it_was_removed():
    (unknown,) = unknown_variables(FakeEnvironment({"VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE": "1"}))
    assert "was removed" in unknown.what
    assert unknown.replacement is None


def test_other_prefixes_and_registered_names_are_not_reported():
    env = FakeEnvironment({"VLLM_USE_V1": "1", "ASCEND_RT_VISIBLE_DEVICES": "0"})
    env.values.update({v.name: v.default_text() for v in ENV_VARS})
    assert unknown_variables(env) == ()


# --- properties ----------------------------------------------------------------------------

ENV_NAMES = st.sampled_from([v.name for v in ENV_VARS] + ["VLLM_ASCEND_X", "PATH"]) | st.text()


@settings(max_examples=50)  # the unit suite stays fast; a larger run found nothing more
@given(st.dictionaries(ENV_NAMES, st.text(max_size=30), max_size=8))
def test_read_env_over_any_values_gives_settings_or_an_ascend_error(values):
    env = FakeEnvironment(values)
    try:
        settings = read_env(env)
    except AscendError:
        return
    assert len(settings.resolved) == len(ENV_VARS)
    unknown = unknown_variables(env)
    assert all(u.name.startswith("VLLM_ASCEND_") and u.name not in ENV_REGISTRY for u in unknown)


@given(
    st.sampled_from([v.name for v in TYPED]).flatmap(
        lambda name: st.tuples(st.just(name), st.text(max_size=30))
    )
)
def test_every_value_type_over_any_text_parses_or_raises_an_ascend_error(pair):
    name, raw = pair
    with contextlib.suppress(AscendError):
        read_env(FakeEnvironment({name: raw}), TYPED)
