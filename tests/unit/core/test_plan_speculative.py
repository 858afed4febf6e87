"""Speculative decoding in the plan: which methods each device serves, k's limits, the
draft model against the target, MTP's layers, and the draft's KV in the budget."""

from __future__ import annotations

import attrs
import pytest

from ascend_core.deployment import DraftFacts
from ascend_core.errors import ConfigError, UnsupportedFeatureError
from ascend_core.memory_budget import kv_bytes_per_token
from ascend_core.plan import plan_config
from ascend_core.plan.speculative import MAX_QUERY_TOKENS_PER_DECODE
from unit.core.plan_fixtures import host, npu

# The tiny Llama's shape, as an EAGLE-3 draft of one layer (make_models.make_draft).
EAGLE3 = DraftFacts(
    architecture="Eagle3LlamaForCausalLM", tp=1, num_layers=1, num_attention_heads=4,
    num_kv_heads=2, head_size=32, vocab_size=4096,
)


def _errors(deployment):  # type: ignore[no-untyped-def]
    return plan_config(deployment).errors


@pytest.mark.parametrize("place", [host, npu])
def test_ngram_is_served_on_both_devices(place) -> None:  # type: ignore[no-untyped-def]
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    assert _errors(place(speculative=spec)) == ()


@pytest.mark.parametrize("method", ["eagle", "eagle3", "mtp", "draft_model"])
@pytest.mark.parametrize("place", [host, npu])
def test_the_draft_model_methods_are_served_on_both_devices(place, method: str) -> None:  # type: ignore[no-untyped-def]
    spec = {"method": method, "num_speculative_tokens": 3}
    assert _errors(place(speculative=spec)) == ()


@pytest.mark.parametrize("installed", [True, None])
@pytest.mark.parametrize("place", [host, npu])
def test_suffix_is_served_on_both_devices_where_its_package_imports(  # type: ignore[no-untyped-def]
    place, installed: bool | None
) -> None:
    spec = {"method": "suffix", "num_speculative_tokens": 3, "proposer_installed": installed}
    assert _errors(place(speculative=spec)) == ()


@pytest.mark.parametrize("place", [host, npu])
def test_suffix_without_arctic_inference_is_refused_naming_the_install(place) -> None:  # type: ignore[no-untyped-def]
    spec = {"method": "suffix", "num_speculative_tokens": 3, "proposer_installed": False}
    (refused,) = _errors(place(speculative=spec))
    assert isinstance(refused, ConfigError) and not isinstance(refused, UnsupportedFeatureError)
    assert "arctic_inference.suffix_decoding" in refused.what
    assert "`spec` extra" in refused.hint
    assert "pip install --no-build-isolation 'arctic-inference==0.3.0'" in refused.hint


def test_only_suffix_needs_a_proposer_package() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3, "proposer_installed": False}
    assert _errors(host(speculative=spec)) == ()


def test_medusa_is_refused_with_the_served_methods_named() -> None:
    (refused,) = _errors(npu(speculative={"method": "medusa", "num_speculative_tokens": 1}))
    assert isinstance(refused, UnsupportedFeatureError)
    assert "suffix" in str(refused) and "eagle3" in str(refused)


def _draft_spec(**changes: object) -> dict[str, object]:
    facts = attrs.evolve(EAGLE3, **changes)
    return {"method": "eagle3", "num_speculative_tokens": 3, "draft": facts,
            "target_vocab_size": 4096}


def test_a_draft_that_fits_the_target_passes() -> None:
    assert _errors(host(speculative=_draft_spec())) == ()


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"tp": 2}, "draft_tensor_parallel_size=2"),
        ({"tp": 1, "vocab_size": 32000}, "vocabulary of 32000"),
        ({"draft_vocab_size": 5000}, "draft_vocab_size of 5000"),
    ],
)
def test_a_draft_that_does_not_fit_the_target_is_refused_before_load(
    changes: dict[str, object], named: str
) -> None:
    errors = _errors(host(speculative=_draft_spec(**changes)))
    assert errors, "the plan let a misfit draft through"
    assert all(isinstance(e, ConfigError) for e in errors)
    assert any(named in str(e) for e in errors), [str(e) for e in errors]


def test_draft_heads_that_do_not_split_over_its_tp_are_refused() -> None:
    (error,) = [
        e for e in _errors(host(speculative=_draft_spec(tp=3)))
        if "do not split" in str(e)
    ]
    assert "4 attention heads" in str(error) and "tp=3" in str(error)


@pytest.mark.parametrize(("layers", "ok"), [(1, True), (0, False), (None, True)])
def test_mtp_needs_the_models_nextn_layers(layers: int | None, ok: bool) -> None:
    spec = {"method": "mtp", "num_speculative_tokens": 1, "mtp_layers": layers}
    errors = _errors(host(speculative=spec))
    if ok:  # None: not known (the doctor without the config), nothing to refuse
        assert errors == ()
        return
    (error,) = errors
    assert "num_nextn_predict_layers" in str(error)


def test_the_kv_budget_counts_the_drafts_layers() -> None:
    deployment = host()
    model = deployment.model
    plain = kv_bytes_per_token(model, 4)
    eagle = kv_bytes_per_token(model, 4, speculative=host(speculative=_draft_spec()).speculative)
    per_draft_layer = 2 * EAGLE3.num_kv_heads * EAGLE3.head_size * 4
    assert eagle.bytes == plain.bytes + per_draft_layer
    assert "the draft's" in eagle.formula
    mtp = host(speculative={"method": "mtp", "num_speculative_tokens": 1, "mtp_layers": 2})
    with_mtp = kv_bytes_per_token(model, 4, speculative=mtp.speculative)
    assert with_mtp.bytes == plain.bytes + 2 * plain.bytes // model.num_layers
    ngram = host(speculative={"method": "ngram", "num_speculative_tokens": 2})
    assert kv_bytes_per_token(model, 4, speculative=ngram.speculative) == plain


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


def test_the_refusals_install_is_what_pyproject_and_the_makefile_install() -> None:
    """The `spec` extra, the Makefile's build of it without isolation and the plan's hint
    name the same Arctic Inference release (read as text: no tomllib on Python 3.10)."""
    from pathlib import Path

    from ascend_core.plan.speculative import PROPOSER_PACKAGES

    repo = Path(__file__).resolve().parents[3]
    package = PROPOSER_PACKAGES["suffix"]
    extra = f'{package.extra} = ["{package.requirement}"]'
    assert extra in (repo / "pyproject.toml").read_text().splitlines()
    makefile = (repo / "Makefile").read_text()
    assert "--no-build-isolation" in makefile and package.requirement in makefile
    (install,) = [ln for ln in makefile.splitlines() if "pip install --quiet -e '.[" in ln]
    assert package.extra in install.split("[")[1].split("]")[0].split(","), install
