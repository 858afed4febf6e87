"""Rows of our own in the core's registration table reach vLLM's registry through the
models room's MODEL_CLASSES (architecture -> class path): the core names no adapter module."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.vllm.engine.registration import register_models
from adapters.vllm.models import MODEL_CLASSES
from ascend_core.errors import ConfigError
from ascend_core.model_registry import REGISTRATIONS, Implementation, Registration, ours_only

TOY = Registration("ToyForCausalLM", Implementation.OURS, None, "a fake row of our own")
CLASSES = {**MODEL_CLASSES, "ToyForCausalLM": "adapters.vllm.models.toy:ToyForCausalLM"}


class FakeModelRegistry:
    """vLLM's ModelRegistry as register_models uses it: `models` and `register_model`."""

    def __init__(self) -> None:
        self.models: dict[str, Any] = {}
        self.calls: list[tuple[str, str]] = []

    def register_model(self, architecture: str, path: str) -> None:
        module_name, _, class_name = path.partition(":")
        self.calls.append((architecture, path))
        self.models[architecture] = type(
            "Lazy", (), {"module_name": module_name, "class_name": class_name}
        )


def test_a_row_of_our_own_is_registered_with_its_class_from_model_classes() -> None:
    registry = FakeModelRegistry()
    register_models((*REGISTRATIONS, TOY), registry, CLASSES)
    assert registry.calls[-1] == ("ToyForCausalLM", CLASSES["ToyForCausalLM"])
    assert [a for a, _ in registry.calls] == [r.architecture for r in ours_only(REGISTRATIONS)] + [
        "ToyForCausalLM"]
    calls = len(registry.calls)
    register_models((*REGISTRATIONS, TOY), registry, CLASSES)  # each process loads the plugin
    assert len(registry.calls) == calls


def test_a_row_of_our_own_without_a_class_is_refused_with_where_to_add_it() -> None:
    with pytest.raises(ConfigError) as caught:
        register_models((TOY,), FakeModelRegistry(), {})
    assert "ToyForCausalLM" in caught.value.what and "MODEL_CLASSES" in caught.value.hint


def test_model_classes_has_exactly_the_rows_of_our_own() -> None:
    assert set(MODEL_CLASSES) == {r.architecture for r in ours_only(REGISTRATIONS)}
    for path in MODEL_CLASSES.values():
        module, _, cls = path.partition(":")
        assert module.startswith("adapters.vllm.models.") and cls, path
