"""The VLLM_ASCEND_* variables of vllm-ascend: registered with its types and defaults, each
either read by code in src/ or marked as having no effect (and then warned about when set),
and one precedence rule where a variable and an additional_config key set the same thing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ascend_core.env_registry as registry_module
from ascend_core.ascend_config.env_fallback import ENV_FALLBACKS
from ascend_core.env import reference_vars as reference_vars_module
from ascend_core.env.reference_vars import BatchMemcpy
from ascend_core.env.variables import EnvVar, VarType
from ascend_core.env_registry import ENV_REGISTRY, ENV_VARS
from ascend_core.errors import ConfigError, EnvironmentVariableError
from ascend_core.plan import plan_config
from support.parsed_sources import syntax_nodes
from unit.core.plan_fixtures import mla_model, npu

SRC = Path(__file__).resolve().parents[3] / "src"
DEFINED_IN = ("ascend_core/env_registry.py", "ascend_core/env/reference_vars.py")

# name -> (type, default) as vllm_ascend/envs.py env_variables defines them.
REFERENCE = {
    "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE": (VarType.BOOL, False),
    "VLLM_ASCEND_ENABLE_FLASHCOMM1": (VarType.BOOL, False),
    "VLLM_ASCEND_FLASHCOMM2_PARALLEL_SIZE": (VarType.INT, 0),
    "VLLM_ASCEND_ENABLE_MLAPO": (VarType.BOOL, True),
    "VLLM_ASCEND_ENABLE_NZ": (VarType.INT, 1),
    "VLLM_ASCEND_ENABLE_FUSED_MC2": (VarType.INT, 0),
    "VLLM_ASCEND_BALANCE_SCHEDULING": (VarType.BOOL, False),
    "VLLM_ASCEND_FUSION_OP_TRANSPOSE_KV_CACHE_BY_BLOCK": (VarType.BOOL, True),
    "VLLM_ASCEND_ENABLE_BATCH_MEMCPY": (VarType.CHOICE, BatchMemcpy.AUTO),
    "VLLM_ASCEND_SFA_SORT_TOPK": (VarType.BOOL, True),
    "VLLM_ASCEND_ENABLE_CONTEXT_PARALLEL": (VarType.BOOL, False),
    "VLLM_ASCEND_ENABLE_PREFETCH_MLP": (VarType.BOOL, False),
    "VLLM_ASCEND_MLP_GATE_UP_PREFETCH_SIZE": (VarType.INT, 18 * 1024 * 1024),
    "VLLM_ASCEND_MLP_DOWN_PREFETCH_SIZE": (VarType.INT, 18 * 1024 * 1024),
    "VLLM_ASCEND_ENABLE_TOPK_TOPP_OPTIMIZATION": (VarType.BOOL, True),
    "VLLM_ASCEND_KV_CACHE_MEGABYTES_FLOATING_TOLERANCE": (VarType.INT, 64),
}


@pytest.mark.parametrize(("name", "expected"), sorted(REFERENCE.items()))
def test_reference_variables_are_registered_with_its_type_and_default(name, expected):
    """vllm_ascend/envs.py env_variables: the same name, value type and default."""
    var = ENV_REGISTRY[name]
    assert (var.type, var.default) == expected


def test_the_reference_deprecations_are_carried():
    """vllm_ascend/ascend_config.py init_ascend_config warns on VLLM_ASCEND_ENABLE_FLASHCOMM1;
    SchedulerConfig.from_additional_config dropped the VLLM_ASCEND_BALANCE_SCHEDULING fallback;
    envs.py marks ENABLE_NZ and ENABLE_MLAPO deprecated for their additional_config keys."""
    deprecated = {v.name: v.deprecated for v in ENV_VARS if v.deprecated}
    assert set(deprecated) == {
        "VLLM_ASCEND_ENABLE_FLASHCOMM1",
        "VLLM_ASCEND_BALANCE_SCHEDULING",
        "VLLM_ASCEND_ENABLE_NZ",
        "VLLM_ASCEND_ENABLE_MLAPO",
    }
    assert "enable_balance_scheduling" in deprecated["VLLM_ASCEND_BALANCE_SCHEDULING"]
    assert "weight_nz_mode" in deprecated["VLLM_ASCEND_ENABLE_NZ"]


def _constant_names() -> dict[str, str]:
    """Registered variable name -> the module constant that holds it."""
    names = {}
    for module in (registry_module, reference_vars_module):
        for constant, value in vars(module).items():
            if isinstance(value, EnvVar):
                names[value.name] = constant
    return names


def _property_names() -> dict[str, str]:
    """EnvSettings property -> the variable it returns (e.g. enable_flashcomm1)."""
    constants = _constant_names()
    return {
        constant.lower(): name
        for name, constant in constants.items()
        if isinstance(getattr(registry_module.EnvSettings, constant.lower(), None), property)
    }


def _settings_property(node: ast.AST, by_property: dict[str, str]) -> bool:
    """`<...settings...>.<property>`: an EnvSettings property read (AscendConfig has fields
    of the same names, so the receiver must be the settings)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in by_property
        and "settings" in ast.unparse(node.value)
    )


def read_in_src(root: Path = SRC) -> set[str]:
    """Registered names that code under `root` reads: by constant (imported from the
    registry modules), by EnvSettings property, or by the variable's name written as a
    string, outside the registry."""
    constants = _constant_names()
    by_constant = {c: n for n, c in constants.items()}
    by_property = _property_names()
    seen: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() in DEFINED_IN:
            continue
        for node in syntax_nodes(path):
            if isinstance(node, ast.ImportFrom) and node.module in (
                "ascend_core.env_registry",
                "ascend_core.env.reference_vars",
            ):
                seen.update(by_constant[a.name] for a in node.names if a.name in by_constant)
            elif isinstance(node, ast.Constant) and node.value in constants:
                seen.add(str(node.value))
            elif _settings_property(node, by_property):
                assert isinstance(node, ast.Attribute)
                seen.add(by_property[node.attr])
    return seen


def test_every_registered_variable_is_read_or_marked_no_effect():
    """A registered switch nothing reads is a defect: it must say it has no effect here."""
    read = read_in_src()
    silent = [v.name for v in ENV_VARS if v.name not in read and v.no_effect is None]
    assert not silent, f"registered, read by nothing in src/, not marked no_effect: {silent}"


def test_the_read_scan_sees_a_reader(tmp_path):
    (tmp_path / "reader.py").write_text(
        "from ascend_core.env_registry import TRAINING_CONSISTENCY\n"
        "X = 'VLLM_ASCEND_SFA_SORT_TOPK'\n"
        "def f(settings):\n"
        "    return settings.enable_flashcomm1\n"
    )
    assert read_in_src(tmp_path) == {
        "VLLM_ASCEND_TRAINING_CONSISTENCY",
        "VLLM_ASCEND_SFA_SORT_TOPK",
        "VLLM_ASCEND_ENABLE_FLASHCOMM1",
    }


def read_through_properties(root: Path = SRC) -> set[str]:
    """Registered names whose EnvSettings property code under `root` reads: acted on."""
    by_property = _property_names()
    seen = set()
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() in DEFINED_IN:
            continue
        for node in syntax_nodes(path):
            if _settings_property(node, by_property):
                assert isinstance(node, ast.Attribute)
                seen.add(by_property[node.attr])
    return seen


def test_a_variable_the_code_acts_on_is_not_marked_no_effect():
    """Reading a switch's typed value (its EnvSettings property) is acting on it; a
    no-effect mark there would warn falsely."""
    acted_on = read_through_properties()
    assert {"VLLM_ASCEND_DEVICE", "VLLM_ASCEND_LOG_PLAN"} <= acted_on
    marked = {v.name for v in ENV_VARS if v.no_effect is not None}
    assert not acted_on & marked, acted_on & marked


NO_EFFECT = [v for v in ENV_VARS if v.no_effect is not None]


def _set_value(var: EnvVar[object]) -> str:
    # A value other than the default where the type has one, so "set" is unmistakable.
    return {VarType.BOOL: "0" if var.default else "1"}.get(var.type, var.default_text())


@pytest.mark.parametrize("var", NO_EFFECT, ids=lambda v: v.name)
def test_a_no_effect_variable_that_is_set_gives_exactly_one_warning_naming_it(var):
    plan = plan_config(npu(ascend_env={var.name: _set_value(var)}))
    mentions = [w for w in plan.warnings if var.name in w and "no effect" in w]
    assert len(mentions) == 1, plan.warnings
    assert var.no_effect in mentions[0]


def test_unset_no_effect_variables_say_nothing():
    assert not any("VLLM_ASCEND_" in w for w in plan_config(npu()).warnings)


def test_a_bad_variable_value_is_an_error_of_the_same_pass_as_config_errors():
    plan = plan_config(
        npu(ascend_env={"VLLM_ASCEND_ENABLE_NZ": "7"}, additional_config={"nonsense": 1})
    )
    kinds = sorted(type(e).__name__ for e in plan.errors)
    assert kinds == [ConfigError.__name__, EnvironmentVariableError.__name__]


# --- one precedence rule --------------------------------------------------------------------


def test_each_fallback_pairs_a_registered_variable_with_a_known_key():
    from ascend_core.ascend_config import describe_keys
    from ascend_core.ascend_config.reference_keys import REFERENCE_KEYS

    keys = {row.path for row in describe_keys()} | set(REFERENCE_KEYS)
    for var, path in ENV_FALLBACKS:
        assert var.name in ENV_REGISTRY and path in keys, (var.name, path)


def test_the_variable_replaces_the_default_of_an_absent_key():
    """vllm_ascend/ascend_config.py AscendConfig: the "envs fallback" fields default to the
    envs.py value (VLLM_ASCEND_ENABLE_NZ -> weight_nz_mode, VLLM_ASCEND_ENABLE_MLAPO ->
    enable_mlapo)."""
    env = {"VLLM_ASCEND_ENABLE_NZ": "2", "VLLM_ASCEND_ENABLE_MLAPO": "0"}
    config = plan_config(npu(ascend_env=env)).decisions.ascend_config
    assert config is not None
    assert (config.weight_nz_mode, config.enable_mlapo) == (2, False)


def test_a_written_key_wins_over_its_variable_and_the_disagreement_is_warned():
    plan = plan_config(
        npu(
            ascend_env={"VLLM_ASCEND_ENABLE_NZ": "2", "VLLM_ASCEND_ENABLE_MLAPO": "0"},
            additional_config={"weight_nz_mode": 0, "enable_mlapo": True},
        )
    )
    config = plan.decisions.ascend_config
    assert config is not None
    assert (config.weight_nz_mode, config.enable_mlapo) == (0, True)
    clashes = [w for w in plan.warnings if "disagree" in w]
    assert len(clashes) == 2
    assert any("VLLM_ASCEND_ENABLE_NZ=2" in w and "weight_nz_mode=0" in w for w in clashes)


def test_agreeing_key_and_variable_are_not_a_clash():
    plan = plan_config(
        npu(ascend_env={"VLLM_ASCEND_ENABLE_NZ": "2"}, additional_config={"weight_nz_mode": 2})
    )
    assert not any("disagree" in w for w in plan.warnings)


def test_a_fallback_value_takes_part_in_the_rules_between_keys():
    """VLLM_ASCEND_ENABLE_FUSED_MC2=1 counts as enable_fused_mc2=1, so it clashes with
    multistream_overlap_shared_expert as the key would (ascend_config.py derive_and_validate)."""
    plan = plan_config(
        npu(
            mla_model(),
            ascend_env={"VLLM_ASCEND_ENABLE_FUSED_MC2": "1"},
            additional_config={"multistream_overlap_shared_expert": True},
        )
    )
    assert any("enable_fused_mc2=1" in e.what for e in plan.errors)


def test_the_configuration_doc_lists_every_registered_variable_with_its_default():
    """docs/configuration.md (linked from the README) holds the variables' table."""
    doc = (SRC.parent / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in doc.splitlines()
        if "| `VLLM_ASCEND_" in line
    }
    assert set(rows) == set(ENV_REGISTRY)
    for var in ENV_VARS:
        shown = (
            ("true" if var.default else "false") if var.type is VarType.BOOL else var.default_text()
        )
        assert f"| {shown} |" in rows[var.name], var.name
        assert ("no effect" in rows[var.name]) is (var.no_effect is not None), var.name


def test_a_deprecated_variable_this_build_reads_is_warned_as_deprecated_not_ignored():
    """vllm_ascend/ascend_config.py init_ascend_config warns whenever
    VLLM_ASCEND_ENABLE_FLASHCOMM1 is set; here it still turns sequence parallelism on."""
    plan = plan_config(npu(parallel={"tp": 2}, ascend_env={"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}))
    (notice,) = [w for w in plan.warnings if "VLLM_ASCEND_ENABLE_FLASHCOMM1" in w]
    assert "deprecated by vllm-ascend" in notice and "still reads it" in notice


def test_names_older_reference_releases_read_are_reported_as_removed_not_unknown():
    """vllm_ascend/envs.py of older releases (e.g. VLLM_ASCEND_MLA_PA, VLLM_ASCEND_ENABLE_DBO):
    the operator learns the variable is gone rather than that it is misspelt."""
    from ascend_core.env_registry import unknown_variables
    from unit.fakes.environment import FakeEnvironment

    (found,) = unknown_variables(FakeEnvironment({"VLLM_ASCEND_MLA_PA": "1"}))
    assert "was removed" in found.what and "MLA paged-attention" in found.what
    assert found.hint == "unset VLLM_ASCEND_MLA_PA"
