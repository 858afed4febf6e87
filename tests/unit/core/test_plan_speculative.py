"""Speculative decoding in the plan: which methods each device serves, and k's limits."""

from __future__ import annotations

import pytest

from ascend_core.errors import ConfigError, UnsupportedFeatureError
from ascend_core.plan import plan_config
from ascend_core.plan.speculative import MAX_QUERY_TOKENS_PER_DECODE
from unit.core.plan_fixtures import host, npu


def _errors(deployment):  # type: ignore[no-untyped-def]
    return plan_config(deployment).errors


@pytest.mark.parametrize("place", [host, npu])
def test_ngram_is_served_on_both_devices(place) -> None:  # type: ignore[no-untyped-def]
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    assert _errors(place(speculative=spec)) == ()


@pytest.mark.parametrize("place", [host, npu])
@pytest.mark.parametrize("method", ["eagle3", "mtp", "suffix", "draft_model"])
def test_the_other_methods_are_refused_with_ngram_named(place, method: str) -> None:  # type: ignore[no-untyped-def]
    (refused,) = _errors(place(speculative={"method": method, "num_speculative_tokens": 1}))
    assert isinstance(refused, UnsupportedFeatureError)
    assert "ngram" in str(refused)


@pytest.mark.parametrize("place", [host, npu])
def test_k_too_large_is_refused_on_both_devices(place) -> None:  # type: ignore[no-untyped-def]
    (error,) = _errors(place(speculative={"method": "ngram", "num_speculative_tokens": 16}))
    assert "num_speculative_tokens + 1 <= 16" in str(error)


def test_an_unknown_method_is_refused_naming_the_known_ones() -> None:
    (refused,) = _errors(host(speculative={"method": "lookahead", "num_speculative_tokens": 2}))
    assert refused.feature == "SPEC_OTHER"
    assert "eagle3" in str(refused) and "draft_model" in str(refused)


@pytest.mark.parametrize(("k", "ok"), [(1, True), (15, True), (16, False), (0, False)])
def test_k_within_one_to_fifteen(k: int, ok: bool) -> None:
    errors = _errors(host(speculative={"method": "ngram", "num_speculative_tokens": k}))
    if ok:
        assert errors == ()
        return
    (error,) = errors
    assert isinstance(error, ConfigError) and not isinstance(error, UnsupportedFeatureError)
    assert "num_speculative_tokens" in str(error)
    if k > 1:
        assert f"at most {MAX_QUERY_TOKENS_PER_DECODE - 1}" in str(error)
