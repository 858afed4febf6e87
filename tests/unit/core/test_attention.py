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
        ({**HOST, **DSA}, "host backends run MHA/GQA and MLA, not DSA", "NPU"),
        ({**HOST, **COMPRESSED}, "host backends run MHA/GQA and MLA only", "NPU"),
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
        select_attention_backend(request(**HOST, **DSA, model="DeepseekV32ForCausalLM"))


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
