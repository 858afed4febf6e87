"""The registration table against the installed vLLM: each row of vLLM's own model names the
class vLLM's ModelRegistry holds, and our rows reach the registry lazily and once."""

from __future__ import annotations

from vllm import ModelRegistry
from vllm.model_executor.models.registry import _ModelRegistry

from adapters.vllm.engine.registration import register_models
from adapters.vllm.models import MODEL_CLASSES
from ascend_core.model_registry import REGISTRATIONS, Implementation, Registration, ours_only


def _entry(registry: _ModelRegistry, architecture: str) -> str:
    model = registry.models[architecture]
    return f"{model.module_name}:{model.class_name}"


def test_each_row_of_vllms_own_model_names_the_class_vllm_registers() -> None:
    rows = [r for r in REGISTRATIONS if r.implementation_kind is Implementation.VLLM]
    assert rows
    for row in rows:
        assert row.architecture in ModelRegistry.get_supported_archs(), row.architecture
        assert _entry(ModelRegistry, row.architecture) == row.implementation, row.architecture


def test_the_real_table_leaves_vllms_entries_as_they_are() -> None:
    before = {r.architecture: _entry(ModelRegistry, r.architecture) for r in REGISTRATIONS
              if not r.registered_by_us}
    register_models()
    assert {a: _entry(ModelRegistry, a) for a in before} == before
    for row in ours_only(REGISTRATIONS):  # ours point at the models room's classes
        assert _entry(ModelRegistry, row.architecture) == MODEL_CLASSES[row.architecture]


def test_our_rows_are_registered_lazily_and_again_without_change() -> None:
    registry = _ModelRegistry({})
    ours = Registration(
        "ToyForCausalLM",
        Implementation.OURS,
        None,
        "a module that does not exist: a lazy registration imports nothing",
    )
    classes = {**MODEL_CLASSES, "ToyForCausalLM": "adapters.vllm.models.toy_model:ToyForCausalLM"}
    table = (*REGISTRATIONS, ours)
    register_models(table, registry, classes)
    assert set(registry.get_supported_archs()) == {*MODEL_CLASSES, "ToyForCausalLM"}
    first = registry.models["ToyForCausalLM"]
    register_models(table, registry, classes)
    assert registry.models["ToyForCausalLM"] is first
    assert _entry(registry, "ToyForCausalLM") == classes["ToyForCausalLM"]
