"""The plan names this plugin's connector module as PluginModule; the vLLM adapter's
kv_transfer room says where it is, and reads it back when a planned config is planned again."""

from __future__ import annotations

import ast
from pathlib import Path

from adapters.vllm.kv_transfer import MODULE_PATHS, module_path, read_module_path
from ascend_core.deployment import PluginModule
from ascend_core.kv_transfer import MOONCAKE_V1

SRC = Path(__file__).resolve().parents[3] / "src"


def test_each_plugin_module_is_a_module_that_defines_the_connector() -> None:
    assert set(MODULE_PATHS) == set(PluginModule)
    path = module_path(PluginModule.MOONCAKE_V1)
    assert path is not None
    tree = ast.parse((SRC / Path(*path.split("."))).with_suffix(".py").read_text())
    assert MOONCAKE_V1 in {n.name for n in tree.body if isinstance(n, ast.ClassDef)}


def test_the_planned_path_reads_back_as_the_plugins_and_any_other_is_left_as_given() -> None:
    assert read_module_path(module_path(PluginModule.MOONCAKE_V1)) is PluginModule.MOONCAKE_V1
    assert read_module_path("vllm_ascend.distributed.mooncake_connector") == (
        "vllm_ascend.distributed.mooncake_connector"
    )
    assert read_module_path(None) is None and read_module_path("") is None
    assert module_path("x.y") == "x.y" and module_path(None) is None
