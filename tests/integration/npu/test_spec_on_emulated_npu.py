"""Speculative decoding on the emulated NPU (ngram, eagle, draft_model, mtp): greedy ids
equal the run without it; seeded random sampling repeats.

One fresh process per target model (spec_run.py, under the emulator) runs its engines one
after the other, plain first, then each method: bf16, block 128, enforce_eager, a batch of
8 mixed lengths with chunked prefill (max_num_batched_tokens=64 is shorter than the long
prompts), then the same batch again through the prefix cache. The prompts repeat a short
phrase of doubled tokens, so n-gram proposals exist and some are rejected: the
`llama_repeat` model (scripts/make_models.py) continues by repeating its last token t,
while "t t" earlier in the prompt was followed by another token. Rejected drafts' KV then
sits in the cache past the exact lengths the fused op is given; were it read, the ids
would move. On the paged backend each decoding request's 1 + k tokens go to
npu_fused_infer_attention_score as one causal query over its cached context.

The draft methods draft for `llama_repeat` with make_draft's drafts (eagle, draft_model,
k=3), and `mtp` (k=2) with the MTP layer of `deepseek_v3_mtp` at the npu-mla
shapes (its three target layers dense MLA, the MTP layer an MLA + MoE block: vLLM's
DeepSeekMTP on the plugin's MLA and MoE layers). Their drafts run on the device; vLLM's
padded draft batch (and async scheduling, which vLLM turns on for them) keeps only upper
bounds of the lengths on the host, so for these methods the attention builders read the
lengths back from the device, one copy per forward (no scalar read), and the fused op gets
exact ones. Each draft engine also samples the three shortest prompts and the longest
(chunked) twice at temperature 1 with a seed per request (support.spec_engine.seeded_passes).

The DeepSeek-V3-style MLA model takes requests of up to 1 + k tokens as decodes (the
builder's reorder threshold): a verification goes to the absorbed latent decode as one row
per token, each row's length ending at its own token, with no prefill call over expanded
K/V.

Full graphs (GRAPHS): ngram on llama_repeat and mtp on deepseek_v3_mtp run once more in
FULL_DECODE_ONLY (compilation mode NONE, capture sizes of 1, 2, 4 and 8 requests of
1 + k tokens): each uniform verify step is one NPUGraph replay, attention inside, its plan
in the builders' persistent buffers (MLA: a row per token, staged) and the fused op's
host-side lengths given to NPUGraph.update; a batch padded to a captured size gives its
padding requests the padding tokens and nothing to attend to. Their ids equal the eager
spec run's and the plain run's. An emulator, not Ascend hardware.

What the device adds is the target's verification and the drafts' forwards on it, so
methods that differ only before that run on the host alone (tests/integration/vllm/
test_spec_ngram.py, test_spec_draft.py): suffix decoding proposes on the host from token
ids as n-gram does; eagle3 is eagle with the target's auxiliary hidden states (the model's
code, not the device's); n-gram on the MLA target verifies as mtp does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.child_runs import last_result, read_all
from support.hf_reference import MODELS_DIR, local_model, make_model, make_models_module
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("spec_run.py")
REPEAT, MLA = "llama_repeat", "deepseek_v3_mtp"
CACHED = [0, 0, 0, 0, 0, 0, 128, 128]  # the full 128-token blocks of each prompt length
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
         "prompt_lookup_min": 2}
# Methods that propose on the host from the token ids, with no draft forward.
HOST_PROPOSERS = ("ngram",)
# target style -> {method: (draft kind of make_draft or None, k)}
METHODS: dict[str, dict[str, tuple[str | None, int]]] = {
    REPEAT: {"ngram": (None, 3), "eagle": ("eagle", 3), "draft_model": ("draft", 3)},
    MLA: {"mtp": (None, 2)},
}


def _cases(keep: Any) -> list[tuple[str, str]]:
    """(style, method) pairs of METHODS that `keep` keeps."""
    return [(style, method) for style, methods in METHODS.items() for method in methods
            if keep(method)]


CASES = _cases(lambda method: True)
DRAFTS = _cases(lambda method: method not in HOST_PROPOSERS)
HOST_PROPOSED = _cases(lambda method: method in HOST_PROPOSERS)
# Full graphs of the verify step: style -> (method it runs again, capture sizes in tokens,
# 1, 2, 4 and 8 requests of 1 + k). Compilation mode NONE: FULL_DECODE_ONLY needs no
# piecewise compiler, and the graph run then launches the eager run's ops.
GRAPHS: dict[str, tuple[str, list[int]]] = {REPEAT: ("ngram", [4, 8, 16, 32]),
                                             MLA: ("mtp", [3, 6, 12, 24])}


def _model(style: str) -> Path:
    if style == MLA:
        return make_model(MODELS_DIR / "npu-mla-deepseek_v3_mtp", MLA, "npu-mla")
    return local_model(style, "tiny")


def _specs(style: str, target: Path) -> dict[str, dict[str, object]]:
    specs: dict[str, dict[str, object]] = {}
    for method, (kind, k) in METHODS[style].items():
        spec: dict[str, object] = NGRAM if method == "ngram" else {
            "method": method, "num_speculative_tokens": k}
        if kind is not None:
            draft_dir = target.parent / f"{target.name}-{kind}"
            spec = {**spec, "model": str(make_models_module().make_draft(draft_dir, target,
                                                                         kind))}
        specs[method] = spec
    method, sizes = GRAPHS[style]
    specs[f"{method}-graphs"] = {**specs[method], "graphs": {
        "mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": sizes}}
    return specs


def _start(style: str) -> subprocess.Popen[str]:
    env = child_env(dict(os.environ))
    env.pop("VLLM_ASCEND_DEVICE", None)
    env["OMP_NUM_THREADS"] = "1"
    target = _model(style)
    return subprocess.Popen(
        [sys.executable, str(RUNNER), str(target), json.dumps(_specs(style, target))],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    return read_all({style: _start(style) for style in METHODS}, _result)


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    return last_result(proc, 1800)


@pytest.mark.parametrize(("style", "method"), CASES)
def test_both_passes_agree_and_the_second_hits_the_prefix_cache(runs, style, method) -> None:  # type: ignore[no-untyped-def]
    plain, spec = runs[style]["plain"], runs[style][method]
    assert all(len(ids) == 24 for ids in spec["ids"][0])
    assert spec["ids"][1] == spec["ids"][0]
    assert spec["cached"] == CACHED == plain["cached"]


@pytest.mark.parametrize(("style", "method"), CASES)
def test_greedy_ids_equal_the_run_without_speculation(runs, style, method) -> None:  # type: ignore[no-untyped-def]
    assert runs[style][method]["ids"] == runs[style]["plain"]["ids"]


@pytest.mark.parametrize(("style", "method"), CASES)
def test_acceptance_is_reported_above_zero(runs, style, method) -> None:  # type: ignore[no-untyped-def]
    plain, spec = runs[style]["plain"], runs[style][method]
    print(
        f"\n{style} {method}: {spec['accepted']}/{spec['drafts']} drafts accepted; per "
        f"generated token {plain['launches_per_token']:.1f} host launches plain, "
        f"{spec['launches_per_token']:.1f} with {method}; {spec['d2h_copies']} device-to-"
        f"host copies ({plain['d2h_copies']} plain)"
    )
    assert 0 < spec["accepted"] <= spec["drafts"]
    if method == "ngram":  # the doubled tokens make some n-gram proposals wrong
        assert spec["accepted"] < spec["drafts"]


@pytest.mark.parametrize(("style", "method"), HOST_PROPOSED)
def test_host_proposers_run_on_exact_host_lengths_without_async_scheduling(  # type: ignore[no-untyped-def]
    runs, style, method
) -> None:
    assert not runs[style][method]["async_scheduling"]


@pytest.mark.parametrize(("style", "method"), DRAFTS)
def test_draft_methods_read_lengths_back_as_copies_not_scalar_reads(runs, style, method) -> None:  # type: ignore[no-untyped-def]
    plain, spec = runs[style]["plain"], runs[style][method]
    assert spec["async_scheduling"]  # vLLM's choice for them, kept
    assert spec["d2h_copies"] > plain["d2h_copies"]  # one read back per forward
    assert spec["scalar_reads"] == 0


@pytest.mark.parametrize(("style", "method"), DRAFTS)
def test_seeded_random_sampling_repeats_exactly(runs, style, method) -> None:  # type: ignore[no-untyped-def]
    first, second = runs[style][method]["seeded"]
    assert first == second
    assert all(len(ids) == 24 for ids in first)
    # Both targets are sure of their next token on these prompts once they repeat
    # (llama_repeat by logit margins of 80-100 from the first token; the MTP target from
    # its second, in bf16 on the device: its first token, sampled at temperature 1, is a
    # real draw), so the distribution-preserving random verification must give back the
    # target's sure tokens. Draws that leave them: the host's test (deepseek_v3_mtp, fp32).
    plain = runs[style]["plain"]["ids"][0]
    greedy = [plain[i] for i in runs[style][method]["seeded_indices"]]
    if style == REPEAT:
        assert first == greedy
    else:  # the greedy ids, or a first token drawn elsewhere that the target then repeats
        for ids, want in zip(first, greedy, strict=True):
            drawn = ids[0] != want[0] and ids == ids[:1] * len(ids)
            assert ids == want or drawn, json.dumps([first, greedy])
        assert sum(ids == want for ids, want in zip(first, greedy, strict=True)) >= 3


def test_paged_drafts_were_verified_as_multi_token_decodes_with_no_scalar_read(runs) -> None:  # type: ignore[no-untyped-def]
    plain = runs[REPEAT]["plain"]
    assert plain["multi_token_decode_calls"] == 0
    for method in set(METHODS[REPEAT]) & set(runs[REPEAT]):
        assert runs[REPEAT][method]["multi_token_decode_calls"] > 0, method
        # Lengths from the runner's CPU copy or one copy back, verification on the
        # device: no scalar read.
        assert runs[REPEAT][method]["scalar_reads"] == 0, method


@pytest.mark.parametrize("method", list(METHODS[MLA]))
def test_mla_verifies_drafts_in_the_latent_decode_not_in_prefill_calls(runs, method) -> None:  # type: ignore[no-untyped-def]
    plain, spec = runs[MLA]["plain"], runs[MLA][method]
    # Decode calls with more rows than requests: a row per verified token.
    assert spec["mla_decode_calls_over_batch"] > 0
    assert plain["mla_decode_calls_over_batch"] == 0
    # No request of at most 1 + k new tokens goes through a prefill call (the plain run
    # prefills its 3-token prompt there: its threshold is 1).
    assert spec["mla_short_prefill_queries"] == 0 < plain["mla_short_prefill_queries"]


@pytest.mark.parametrize("style", list(GRAPHS))
def test_verify_steps_replay_full_graphs_with_the_eager_ids(runs, style) -> None:  # type: ignore[no-untyped-def]
    """FULL_DECODE_ONLY with speculation: every uniform verify step (each request 1 + k
    tokens, the batch padded to a captured 1, 2, 4 or 8 requests as requests finish
    prefill and generation at different steps) is one graph replay, attention inside."""
    method, sizes = GRAPHS[style]
    eager, graphs = runs[style][method], runs[style][f"{method}-graphs"]
    assert graphs["graph_mode"] == "FULL_DECODE_ONLY"
    assert graphs["capture_sizes"] == sizes and graphs["captured"] == len(sizes)
    assert eager["captured"] == 0 == eager["graph_replays"]
    assert graphs["graph_captures"] == 0 < graphs["graph_replays"]  # none made late
    assert graphs["ids"] == eager["ids"] == runs[style]["plain"]["ids"]
    assert graphs["cached"] == CACHED
    assert 0 < graphs["accepted"] == eager["accepted"]
    # The same steps run (same ids, same drafts): each replay stands for one verify step
    # whose attention calls (one per target layer) the eager run launched from the host.
    layers = json.loads((_model(style) / "config.json").read_text())["num_hidden_layers"]
    replayed = eager["attention_launches"] - graphs["attention_launches"]
    assert replayed == layers * graphs["graph_replays"], (replayed, graphs["graph_replays"])
    assert graphs["launches_per_token"] < eager["launches_per_token"]
    print(f"\n{style} {method} FULL_DECODE_ONLY: {graphs['graph_replays']} replays; per "
          f"generated token {graphs['launches_per_token']:.1f} host launches "
          f"({eager['launches_per_token']:.1f} eager)")
