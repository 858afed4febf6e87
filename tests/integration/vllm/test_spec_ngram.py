"""n-gram and suffix speculative decoding on the host: greedy ids equal the run without
speculation.

One engine per mode (plain, ngram k=3, suffix k=3) serves every case, eager, fp32: a batch
of 8 mixed lengths with chunked prefill (max_num_batched_tokens=64 is shorter than the long
prompts), then the same batch again through the prefix cache. The model is make_models.py's
`llama_repeat` (its greedy continuations repeat tokens; attention still moves its
logits) and the prompts repeat a short random phrase, so n-gram and suffix-tree proposals
exist and get accepted; the rate is printed (`-s`) from vLLM's metrics. Suffix decoding
proposes from Arctic Inference's suffix trees (the `spec` extra); without it its cases
skip, and the plan's refusal is tested in tests/unit.
The verification runs on the plugin's RejectionOps (patch spec-rejection-sample-torch).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from engine_teardown import shut_down

from support.hf_reference import local_model
from support.spec_engine import LENGTHS, repeating_prompts, spec_llm, two_passes

MAX_NEW = 24
BLOCK = 16
K = 3
HAS_SUFFIX = importlib.util.find_spec("arctic_inference") is not None
METHODS = ["ngram", pytest.param("suffix", marks=pytest.mark.skipif(
    not HAS_SUFFIX, reason="arctic_inference is not installed (the `spec` extra)"))]


def _run(model_dir: str, spec: dict[str, object] | None) -> dict[str, object]:
    llm = spec_llm(model_dir, spec, "float32", BLOCK)
    try:
        run = two_passes(llm, repeating_prompts(), MAX_NEW)
        sampler = type(llm.llm_engine.model_executor.driver_worker.worker.model_runner)
        from vllm.v1.sample import rejection_sampler

        return {
            **run,
            "runner": sampler.__name__,
            "rejection_sample": rejection_sampler.rejection_sample,
        }
    finally:
        shut_down(llm)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, object]]:
    model_dir = str(local_model("llama_repeat", "tiny"))
    plain = _run(model_dir, None)
    ngram = _run(
        model_dir,
        {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2},
    )
    out = {"plain": plain, "ngram": ngram}
    if HAS_SUFFIX:
        # Arctic Inference's own vLLM plugin (same package) patches vLLM for CUDA only when
        # this is set; the tests never set it.
        assert os.environ.get("ARCTIC_INFERENCE_ENABLED", "0") != "1"
        out["suffix"] = _run(model_dir, {"method": "suffix", "num_speculative_tokens": K})
    return out


def _counter(run: dict[str, object], name: str) -> int:
    metrics = run["metrics"]
    assert isinstance(metrics, dict)
    return int(metrics[name].value)


@pytest.mark.parametrize("method", METHODS)
def test_greedy_ids_equal_without_speculation_then_through_the_prefix_cache(runs, method) -> None:  # type: ignore[no-untyped-def]
    plain, spec = runs["plain"]["ids"], runs[method]["ids"]
    assert plain[0] == plain[1]  # the plain engine's second pass is its own reference
    assert spec[0] == plain[0]
    assert spec[1] == plain[0]
    assert all(len(ids) == MAX_NEW for ids in spec[0])
    cached = runs[method]["cached"]
    assert all(c >= (n - 1) // BLOCK * BLOCK for c, n in zip(cached, LENGTHS, strict=True))
    assert sum(cached) > 0


@pytest.mark.parametrize("method", METHODS)
def test_drafts_were_proposed_and_some_accepted_on_the_port(runs, method) -> None:  # type: ignore[no-untyped-def]
    run = runs[method]
    assert getattr(run["rejection_sample"], "__ascend_patch__", None) == (
        "spec-rejection-sample-torch"
    )
    drafts = _counter(run, "vllm:spec_decode_num_draft_tokens")
    accepted = _counter(run, "vllm:spec_decode_num_accepted_tokens")
    print(f"\n{method} k={K}: {accepted}/{drafts} draft tokens accepted "
          f"({accepted / max(drafts, 1):.0%})")
    assert drafts > 0
    assert 0 < accepted <= drafts
