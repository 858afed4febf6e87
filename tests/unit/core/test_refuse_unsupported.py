"""refuse_unsupported: one error naming every unsupported feature present, or nothing."""

from __future__ import annotations

import pytest

from ascend_core.errors import BackendSelectionError, refuse_unsupported


def test_names_every_present_feature_in_order() -> None:
    with pytest.raises(BackendSelectionError) as err:
        refuse_unsupported({"alibi": True, "sinks": False, "fp8 cache": True},
                           "The backend does not support", "serve another model",
                           BackendSelectionError)
    assert err.value.what == "The backend does not support: alibi, fp8 cache."
    assert err.value.hint == "serve another model"


def test_nothing_present_raises_nothing() -> None:
    refuse_unsupported({"alibi": False}, "x", "y", BackendSelectionError)
