"""Every input of the core's attention decision reaches it from what vLLM hands the
platform: the selector config's flags, VLLM_ASCEND_TRAINING_CONSISTENCY (or vLLM's own
batch-invariant switch) and the compressed-MLA fact of the model being served."""

from __future__ import annotations

import attrs
import pytest
import torch

from adapters.vllm.attention.names import BACKEND_PATH
from adapters.vllm.attention.selection import backend_path
from ascend_core.errors import BackendSelectionError
from ports.device import ChipFamily, DeviceKind
from unit.core.plan_fixtures import dense_model, mla_model


def _selector(**flags: bool):  # type: ignore[no-untyped-def]
    from vllm.v1.attention.selector import AttentionSelectorConfig

    return AttentionSelectorConfig(
        head_size=64, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=128, **flags
    )


def test_plain_mha_gets_the_paged_backend_on_both_devices() -> None:
    assert backend_path(_selector(), DeviceKind.CPU, ChipFamily.HOST) == BACKEND_PATH
    assert backend_path(_selector(), DeviceKind.NPU, ChipFamily.A2) == BACKEND_PATH


@pytest.mark.parametrize(
    ("kwargs", "flags"),
    [({"batch_invariant": True}, {}), ({}, {"use_batch_invariant": True})],
    ids=["VLLM_ASCEND_TRAINING_CONSISTENCY", "vllm use_batch_invariant"],
)
def test_training_consistency_reaches_the_decision(kwargs, flags) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BackendSelectionError, match="batch_invariant"):
        backend_path(_selector(**flags), DeviceKind.NPU, ChipFamily.A2, **kwargs)
    # On the host the table refuses it outright (the backend is NPU-only).
    with pytest.raises(BackendSelectionError, match="A2/A3/A5 NPUs only"):
        backend_path(_selector(**flags), DeviceKind.CPU, ChipFamily.HOST, **kwargs)


def test_compressed_mla_reaches_the_decision_from_the_models_facts() -> None:
    model = attrs.evolve(mla_model(), compressed_attention=True, index_topk=512)
    with pytest.raises(BackendSelectionError, match="compressed_mla"):
        backend_path(_selector(use_mla=True), DeviceKind.NPU, ChipFamily.A2, model=model)
    from adapters.vllm.attention.names import SPARSE_MLA_BACKEND_PATH

    for kind, family in ((DeviceKind.NPU, ChipFamily.A2), (DeviceKind.CPU, ChipFamily.HOST)):
        path = backend_path(
            _selector(use_mla=True, use_sparse=True), kind, family,
            model=attrs.evolve(mla_model(), index_topk=512),
        )
        assert path == SPARSE_MLA_BACKEND_PATH


def test_the_models_name_is_in_a_refusal() -> None:
    # Compressed MLA (DeepSeek-V4 style) has no backend on the host.
    with pytest.raises(BackendSelectionError, match="DeepseekV3ForCausalLM"):
        backend_path(
            _selector(use_mla=True), DeviceKind.CPU, ChipFamily.HOST,
            model=attrs.evolve(mla_model(), compressed_attention=True, index_topk=512),
        )


def test_every_built_backend_has_a_class_and_no_other() -> None:
    from adapters.vllm.attention.selection import BACKEND_PATHS
    from ascend_core.attention import BUILT_BACKENDS

    assert set(BACKEND_PATHS) == BUILT_BACKENDS


@pytest.mark.parametrize(
    ("flags", "named"),
    [({"has_sink": True}, "attention sinks"), ({"has_sliding_window": True}, "sliding window")],
)
def test_the_layers_sinks_and_window_are_refused(flags: dict[str, bool], named: str) -> None:
    with pytest.raises(BackendSelectionError, match=named):
        backend_path(_selector(**flags), DeviceKind.CPU, ChipFamily.HOST)


def test_the_models_window_is_refused_though_the_layer_does_not_say() -> None:
    model = attrs.evolve(dense_model(), sliding_window=True)
    with pytest.raises(BackendSelectionError, match="sliding window"):
        backend_path(_selector(), DeviceKind.CPU, ChipFamily.HOST, model=model)
