"""Speculative configs refused before any weight loads, with the reason: MTP on a model
without MTP layers (before vLLM builds its config, which would divide by their count), a
draft model whose vocabulary is not the target's, k beyond the fused attention op's 16
query tokens (the plan, inside vLLM's config building). And the doctor reads a draft
model's facts as serving does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from adapters.vllm.engine.startup_errors import StartupError
from support.hf_reference import local_model, make_models_module


def _refusal(model: str, spec: dict[str, Any]) -> str:
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=model, enforce_eager=True, speculative_config=spec)
    with pytest.raises(StartupError) as caught:  # the message alone at `vllm serve`
        args.create_engine_config()
    return str(caught.value)


def test_mtp_on_a_model_without_mtp_layers_is_refused_naming_them() -> None:
    model = str(local_model("deepseek_v3", "tiny"))  # num_nextn_predict_layers: 0
    message = _refusal(model, {"method": "mtp", "num_speculative_tokens": 1})
    assert "num_nextn_predict_layers" in message


def test_an_eagle3_draft_with_another_vocabulary_is_refused_before_its_weights_load(
    tmp_path: Path,
) -> None:
    # (vLLM refuses a draft_model of another vocabulary itself; EAGLE-3's it lets by.)
    target = local_model("llama_repeat", "tiny")
    draft = make_models_module().make_draft(
        target.parent / f"{target.name}-eagle3", target, "eagle3"
    )
    config = json.loads((draft / "config.json").read_text())
    config["vocab_size"] = config["draft_vocab_size"] = 512
    (tmp_path / "config.json").write_text(json.dumps(config))  # no weights at all
    spec = {"method": "eagle3", "model": str(tmp_path), "num_speculative_tokens": 2}
    message = _refusal(str(target), spec)
    assert "vocabulary of 512 tokens" in message and "the target 4" in message


def test_k_beyond_the_fused_ops_query_limit_is_refused() -> None:
    model = str(local_model("deepseek_v3_mtp", "tiny"))
    message = _refusal(model, {"method": "mtp", "num_speculative_tokens": 16})
    assert "num_speculative_tokens + 1 <= 16" in message


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "draft"])
def test_the_doctor_reads_the_draft_as_serving_does(kind: str) -> None:
    """The doctor's draft facts (its config.json) equal those serving checks (vLLM's draft
    model config), so `ascend-doctor plan` budgets and checks the same draft."""
    from vllm.engine.arg_utils import EngineArgs

    from adapters.doctor.plan.config import draft_facts
    from adapters.vllm.engine.translate import requested

    target = local_model("llama_repeat", "tiny")
    draft = make_models_module().make_draft(target.parent / f"{target.name}-{kind}",
                                            target, kind)
    method = {"draft": "draft_model"}.get(kind, kind)
    spec = {"method": method, "model": str(draft), "num_speculative_tokens": 2}
    config = EngineArgs(model=str(target), enforce_eager=True,
                        speculative_config=spec).create_engine_config()
    served = requested(config).speculative.draft
    assert served is not None
    assert draft_facts(json.loads((draft / "config.json").read_text()), 1) == served


def test_an_unknown_method_stops_in_vllms_config_naming_the_known_ones() -> None:
    """vLLM's SpeculativeConfig refuses a method it does not know (a pydantic error that
    lists them) while the config is built, before any hook of ours and any weight."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(local_model("llama_repeat", "tiny")), enforce_eager=True,
                      speculative_config={"method": "lookahead", "num_speculative_tokens": 2})
    with pytest.raises(ValueError, match="Input should be 'ngram'") as caught:
        args.create_engine_config()
    assert "'suffix'" in str(caught.value) and "'eagle3'" in str(caught.value)


def test_suffix_without_arctic_inference_is_refused_before_vllms_import_error() -> None:
    """Where arctic_inference does not import, vLLM's SpeculativeConfig would raise an
    ImportError naming an install that builds it against PyPI's CUDA torch; the platform's
    pre-start check (Upstream port, here a fake that has nothing) comes first."""
    from adapters.container import container
    from unit.fakes.upstream import FakeUpstream

    with container().upstream.override(FakeUpstream()):
        message = _refusal(str(local_model("llama_repeat", "tiny")),
                           {"method": "suffix", "num_speculative_tokens": 3})
    assert "arctic_inference.suffix_decoding" in message
    assert "--no-build-isolation" in message


def test_the_package_the_plan_asks_about_is_what_vllms_suffix_proposer_imports() -> None:
    import inspect

    from vllm.v1.spec_decode import suffix_decoding

    from ascend_core.plan.speculative import PROPOSER_PACKAGES

    module, _, name = PROPOSER_PACKAGES["suffix"].symbol.partition(":")
    assert f"from {module} import {name}" in inspect.getsource(suffix_decoding)
