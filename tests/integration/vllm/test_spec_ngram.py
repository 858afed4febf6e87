"""n-gram speculative decoding on the host: greedy ids equal the run without speculation.

One engine per mode (plain, ngram k=3) serves every case, eager, fp32: a batch of 8 mixed
lengths with chunked prefill (max_num_batched_tokens=64 is shorter than the long prompts),
then the same batch again through the prefix cache. The model is make_models.py's
`llama_repeat` (its greedy continuations repeat tokens; attention still moves its
logits) and the prompts repeat a short random phrase, so n-gram proposals exist and get
accepted; the rate is printed (`-s`) from vLLM's metrics.
The verification runs on the plugin's RejectionOps (patch spec-rejection-sample-torch).
"""

from __future__ import annotations

import pytest
from engine_teardown import shut_down

from support.hf_reference import local_model
from support.spec_engine import LENGTHS, repeating_prompts, spec_llm, two_passes

MAX_NEW = 24
BLOCK = 16
K = 3


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
    return {"plain": plain, "ngram": ngram}


def _counter(run: dict[str, object], name: str) -> int:
    metrics = run["metrics"]
    assert isinstance(metrics, dict)
    return int(metrics[name].value)


def test_greedy_ids_equal_without_speculation_then_through_the_prefix_cache(runs) -> None:  # type: ignore[no-untyped-def]
    plain, ngram = runs["plain"]["ids"], runs["ngram"]["ids"]
    assert plain[0] == plain[1]  # the plain engine's second pass is its own reference
    assert ngram[0] == plain[0]
    assert ngram[1] == plain[0]
    assert all(len(ids) == MAX_NEW for ids in ngram[0])
    cached = runs["ngram"]["cached"]
    assert all(c >= (n - 1) // BLOCK * BLOCK for c, n in zip(cached, LENGTHS, strict=True))
    assert sum(cached) > 0


def test_drafts_were_proposed_and_some_accepted_on_the_port(runs) -> None:  # type: ignore[no-untyped-def]
    ngram = runs["ngram"]
    assert getattr(ngram["rejection_sample"], "__ascend_patch__", None) == (
        "spec-rejection-sample-torch"
    )
    drafts = _counter(ngram, "vllm:spec_decode_num_draft_tokens")
    accepted = _counter(ngram, "vllm:spec_decode_num_accepted_tokens")
    print(f"\nngram k={K}: {accepted}/{drafts} draft tokens accepted "
          f"({accepted / max(drafts, 1):.0%})")
    assert drafts > 0
    assert 0 < accepted <= drafts
