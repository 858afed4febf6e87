"""Attention backend selection: every row of the decision table and every refusal."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_core.attention import (
    DECISION_TABLE,
    AttentionBackendKind,
    AttentionRequest,
    BackendChoice,
    find_row,
    select_attention_backend,
)
from ascend_core.errors import BackendSelectionError
from ports.device import ChipFamily, DeviceKind

K = AttentionBackendKind


def request(**overrides: Any) -> AttentionRequest:
    values: dict[str, Any] = {
        "use_mla": False,
        "use_sparse": False,
        "chip_family": ChipFamily.A2,
        "device_kind": DeviceKind.NPU,
        "model": "TestModel",
    }
    values.update(overrides)
    return AttentionRequest(**values)


MLA = {"use_mla": True}
DSA = {"use_mla": True, "use_sparse": True}
COMPRESSED = {"use_mla": True, "use_compressed": True}
HOST = {"device_kind": DeviceKind.CPU, "chip_family": ChipFamily.HOST}
P310 = {"chip_family": ChipFamily.P310}


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        ({}, K.STANDARD),
        ({"chip_family": ChipFamily.A3}, K.STANDARD),
        ({"chip_family": ChipFamily.A5}, K.STANDARD),
        (MLA, K.MLA),
        (DSA, K.SPARSE_MLA),
        (COMPRESSED, K.COMPRESSED_MLA),
        ({**COMPRESSED, "use_sparse": True}, K.COMPRESSED_MLA),
        (P310, K.P310),
        ({"training_consistency": True}, K.BATCH_INVARIANT),
        (HOST, K.HOST),
        ({"device_kind": DeviceKind.CPU, "chip_family": ChipFamily.A2}, K.HOST),
        ({**HOST, **MLA}, K.MLA),
        ({**HOST, **COMPRESSED}, K.COMPRESSED_MLA),  # the plugin's DeepSeek-V4 class attends
        ({**HOST, **DSA}, K.SPARSE_MLA),
    ],
)
def test_choices(overrides: dict[str, Any], kind: AttentionBackendKind) -> None:
    choice = select_attention_backend(request(**overrides))
    assert choice.kind is kind
    assert choice.reason


def test_batch_invariant_reason_names_the_variable() -> None:
    choice = select_attention_backend(request(training_consistency=True))
    assert "VLLM_ASCEND_TRAINING_CONSISTENCY=1" in choice.reason


@pytest.mark.parametrize(
    ("overrides", "in_what", "in_hint"),
    [
        ({**P310, **MLA}, "MLA has no backend on 310P", "A2/A3"),
        ({**P310, **DSA}, "sparse MLA (DSA) has no backend on 310P", "A2/A3"),
        ({**P310, **COMPRESSED}, "compressed MLA has no backend on 310P", "A2/A3"),
        (
            {**MLA, "training_consistency": True},
            "batch-invariant backend runs MHA/GQA only",
            "VLLM_ASCEND_TRAINING_CONSISTENCY",
        ),
        (
            {**P310, "training_consistency": True},
            "exists on A2/A3/A5 NPUs only",
            "VLLM_ASCEND_TRAINING_CONSISTENCY",
        ),
        (
            {**HOST, "training_consistency": True},
            "exists on A2/A3/A5 NPUs only",
            "VLLM_ASCEND_TRAINING_CONSISTENCY",
        ),
        ({"use_sparse": True}, "sparse or compressed attention without MLA", "kv_lora_rank"),
        ({"use_compressed": True}, "sparse or compressed attention without MLA", "index_topk"),
        (
            {"chip_family": ChipFamily.HOST},
            "device_kind=npu with chip_family=host",
            "VLLM_ASCEND_DEVICE=cpu",
        ),
    ],
)
def test_refusals_name_the_inputs_and_give_a_hint(
    overrides: dict[str, Any], in_what: str, in_hint: str
) -> None:
    req = request(**overrides)
    with pytest.raises(BackendSelectionError) as info:
        select_attention_backend(req)
    assert in_what in info.value.what
    assert in_hint in info.value.hint
    assert req.describe() in info.value.what  # every input, by name
    assert "use_mla=" in info.value.what and "chip_family=" in info.value.what


def test_refusal_names_the_model() -> None:
    with pytest.raises(BackendSelectionError, match="DeepseekV32ForCausalLM uses sparse MLA"):
        select_attention_backend(request(**P310, **DSA, model="DeepseekV32ForCausalLM"))


def test_every_combination_is_decided_by_the_table() -> None:
    """Exhaustive: each input combination gives a choice or a BackendSelectionError."""
    outcomes = 0
    for mla, sparse, compressed, consistent, chip, kind in itertools.product(
        [False, True], [False, True], [False, True], [False, True], ChipFamily, DeviceKind
    ):
        req = AttentionRequest(mla, sparse, chip, kind, compressed, consistent)
        try:
            assert isinstance(select_attention_backend(req), BackendChoice)
        except BackendSelectionError as error:
            assert "no attention backend for" not in error.what  # the table's fallback
        outcomes += 1
    assert outcomes == 2**4 * len(ChipFamily) * len(DeviceKind)


def test_every_table_row_is_reachable() -> None:
    reached = set()
    for mla, sparse, compressed, consistent, chip, kind in itertools.product(
        [False, True], [False, True], [False, True], [False, True], ChipFamily, DeviceKind
    ):
        req = AttentionRequest(mla, sparse, chip, kind, compressed, consistent)
        with contextlib.suppress(BackendSelectionError):
            row, _, _ = find_row(req)
            reached.add(DECISION_TABLE.index(row))
    assert reached == set(range(len(DECISION_TABLE)))


@given(
    st.builds(
        AttentionRequest,
        use_mla=st.booleans(),
        use_sparse=st.booleans(),
        chip_family=st.sampled_from(ChipFamily),
        device_kind=st.sampled_from(DeviceKind),
        use_compressed=st.booleans(),
        training_consistency=st.booleans(),
        model=st.text(max_size=30),
    )
)
def test_any_request_gives_a_choice_or_a_backend_selection_error(req: AttentionRequest) -> None:
    try:
        choice = select_attention_backend(req)
    except BackendSelectionError as error:
        assert error.what and error.hint
    else:
        assert isinstance(choice.kind, AttentionBackendKind) and choice.reason


# -- the one request both `vllm serve` and `ascend-doctor plan` build -------------------


def test_the_request_from_the_models_facts_alone_carries_its_window_and_sinks() -> None:
    import attrs

    from ascend_core.attention import attention_request
    from unit.core.plan_fixtures import dense_model

    model = attrs.evolve(dense_model(), sliding_window=True, attention_sinks=True)
    req = attention_request(model, DeviceKind.CPU, ChipFamily.HOST, batch_invariant=False)
    assert (req.sliding_window, req.attention_sinks, req.use_mla) == (True, True, False)
    assert req.model == model.architecture


def test_the_layers_flags_win_for_mla_and_add_to_the_models_window() -> None:
    from ascend_core.attention import LayerAttention, attention_request
    from unit.core.plan_fixtures import dense_model

    layer = LayerAttention(use_mla=True, use_sparse=False, sliding_window=True)
    req = attention_request(
        dense_model(), DeviceKind.NPU, ChipFamily.A2, batch_invariant=True, layer=layer
    )
    assert (req.use_mla, req.sliding_window, req.training_consistency) == (True, True, True)
    bare = attention_request(None, DeviceKind.NPU, ChipFamily.A2, batch_invariant=False,
                             layer=layer)  # fmt: skip
    assert bare.model == "" and bare.sliding_window


@pytest.mark.parametrize(
    ("device", "family", "kind"),
    [
        (DeviceKind.NPU, ChipFamily.A2, AttentionBackendKind.STANDARD),
        (DeviceKind.CPU, ChipFamily.HOST, AttentionBackendKind.HOST),
    ],
)
def test_the_paged_backends_serve_windows_and_sinks(
    device: DeviceKind, family: ChipFamily, kind: AttentionBackendKind
) -> None:
    from ascend_core.attention import serving_backend

    choice = serving_backend(
        request(sliding_window=True, attention_sinks=True, device_kind=device, chip_family=family)
    )
    assert choice.kind is kind


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"sliding_window": True, **MLA}, "sliding window"),
        ({"attention_sinks": True, **MLA}, "attention sinks"),
        ({"training_consistency": True}, "batch_invariant attention backend"),
        ({"chip_family": ChipFamily.P310}, "310p attention backend"),
    ],
)
def test_serving_backend_refuses_what_this_build_cannot_serve(
    overrides: dict[str, Any], match: str
) -> None:
    from ascend_core.attention import serving_backend

    with pytest.raises(BackendSelectionError, match=match):
        serving_backend(request(**overrides))


def test_serving_backend_passes_the_built_backends() -> None:
    from ascend_core.attention import BUILT_BACKENDS, serving_backend

    assert serving_backend(request()).kind is K.STANDARD
    assert serving_backend(request(**MLA)).kind is K.MLA
    assert serving_backend(request(device_kind=DeviceKind.CPU)).kind in BUILT_BACKENDS
