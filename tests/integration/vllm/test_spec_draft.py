"""Draft-model speculative decoding on the host (eagle, eagle3, draft_model, mtp): greedy ids
equal the run without speculation.

One engine per mode serves every case, eager, fp32: a batch of 8 mixed lengths with
chunked prefill (max_num_batched_tokens=64 is shorter than the long prompts), then the
same batch again through the prefix cache. The Llama methods draft for make_models.py's
`llama_repeat` with the drafts make_draft derives from it (`draft`, `eagle`, `eagle3`:
their weights pass the target's hidden state or the current token through, so they
propose repeats, which this target accepts); `mtp` runs `deepseek_v3_mtp`, DeepSeek-V3
with one MTP layer in its checkpoint (vLLM's DeepSeekMTP on the plugin's MLA and MoE
layers). The draft's inputs are prepared on the plugin's DraftInputOps (patches
spec-draft-*-torch) and verified on its RejectionOps; the acceptance rate is printed
(`-s`) from vLLM's metrics. Each engine also samples the three shortest prompts twice at
temperature 1 with a seed per request: both passes give the same ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_teardown import shut_down

from support.hf_reference import local_model, make_models_module
from support.spec_engine import (
    LENGTHS,
    repeating_prompts,
    seeded_indices,
    seeded_passes,
    spec_llm,
    two_passes,
)

MAX_NEW = 16
BLOCK = 16
# method -> (target style, draft kind or None: the target's own MTP layers, k). MTP's one
# layer drafts twice (vLLM reuses it per step); a MoE target's steps cost more.
METHODS = {
    "eagle": ("llama_repeat", "eagle", 3),
    "eagle3": ("llama_repeat", "eagle3", 3),
    "draft_model": ("llama_repeat", "draft", 3),
    "mtp": ("deepseek_v3_mtp", None, 2),
}
DRAFT_PATCHES = (
    "spec-draft-step-slots-torch",
    "spec-draft-sample-indices-torch",
    "spec-draft-next-token-torch",
    "spec-draft-expand-inputs-torch",
)


def _run(model_dir: str, spec: dict[str, object] | None) -> dict[str, Any]:
    llm = spec_llm(model_dir, spec, "float32", BLOCK)
    try:
        run = two_passes(llm, repeating_prompts(), MAX_NEW)
        run["seeded"] = seeded_passes(llm, repeating_prompts(), MAX_NEW)
        from vllm.v1.sample import rejection_sampler
        from vllm.v1.spec_decode import utils

        kernels = [
            utils._eagle_step_slot_mapping_metadata.kernel,
            utils._eagle_prepare_inputs_padded.kernel,
            utils._eagle_prepare_next_token_padded.kernel,
            utils._copy_and_expand_eagle_inputs.kernel,
            rejection_sampler._expand.kernel,
        ]
        return {**run, "kernels": [type(k).__name__ for k in kernels]}
    finally:
        shut_down(llm)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any] | BaseException]:
    """Each mode's run, or the error it stopped with (so one method failing does not
    hide the others)."""
    out: dict[str, dict[str, Any] | BaseException] = {}
    targets = {style: str(local_model(style, "tiny")) for style, _, _ in METHODS.values()}
    for style, target in targets.items():
        try:
            out[f"plain:{style}"] = _run(target, None)
        except Exception as error:
            out[f"plain:{style}"] = error
    for method, (style, kind, k) in METHODS.items():
        spec: dict[str, object] = {"method": method, "num_speculative_tokens": k}
        if kind is not None:
            target = Path(targets[style])
            draft_dir = target.parent / f"{target.name}-{kind}"
            spec["model"] = str(make_models_module().make_draft(draft_dir, target, kind))
        try:
            out[method] = _run(targets[style], spec)
        except Exception as error:
            out[method] = error
    return out


def _get(runs: dict[str, Any], key: str) -> dict[str, Any]:
    run = runs[key]
    if isinstance(run, BaseException):
        raise run
    assert isinstance(run, dict)
    return run


@pytest.mark.parametrize("method", list(METHODS))
def test_greedy_ids_equal_without_speculation_then_through_the_prefix_cache(
    runs: dict[str, Any], method: str
) -> None:
    plain = _get(runs, f"plain:{METHODS[method][0]}")["ids"]
    spec = _get(runs, method)
    assert plain[0] == plain[1]  # the plain engine's second pass is its own reference
    assert spec["ids"][0] == plain[0]
    assert spec["ids"][1] == plain[0]
    assert all(len(ids) == MAX_NEW for ids in spec["ids"][0])
    cached = spec["cached"]
    assert all(c >= (n - 1) // BLOCK * BLOCK for c, n in zip(cached, LENGTHS, strict=True))
    # The DraftInputOps port's four, and the RejectionOps port's expand.
    assert spec["kernels"] == ["KernelOverride"] * 5


@pytest.mark.parametrize("method", list(METHODS))
def test_seeded_random_sampling_repeats_exactly(runs: dict[str, Any], method: str) -> None:
    first, second = _get(runs, method)["seeded"]
    assert first == second
    assert all(len(ids) == MAX_NEW for ids in first)
    style = METHODS[method][0]
    plain = _get(runs, f"plain:{style}")
    greedy = [plain["ids"][0][i] for i in seeded_indices(repeating_prompts())]
    if style == "llama_repeat":  # sure of every token: sampling it is the greedy ids
        assert first == greedy
    else:  # MTP's target spreads its mass: the draws leave the greedy ids
        assert first != greedy


@pytest.mark.parametrize("method", list(METHODS))
def test_drafts_were_proposed_and_some_accepted(runs: dict[str, Any], method: str) -> None:
    metrics = _get(runs, method)["metrics"]
    drafts = int(metrics["vllm:spec_decode_num_draft_tokens"].value)
    accepted = int(metrics["vllm:spec_decode_num_accepted_tokens"].value)
    print(f"\n{method} k={METHODS[method][2]}: {accepted}/{drafts} draft tokens accepted "
          f"({accepted / max(drafts, 1):.0%})")
    assert drafts > 0
    assert 0 < accepted <= drafts
