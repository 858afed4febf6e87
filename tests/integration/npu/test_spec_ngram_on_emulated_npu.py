"""n-gram speculative decoding on the emulated NPU: greedy ids equal the run without it.

One fresh process per model (spec_run.py, under the emulator) runs two engines one after
the other, plain and ngram k=3: bf16, block 128, enforce_eager, a batch of 8 mixed
lengths with chunked prefill (max_num_batched_tokens=64 is shorter than the long
prompts), then the same batch again through the prefix cache. The prompts repeat a short
phrase of doubled tokens, so n-gram proposals exist and some are rejected: the
`llama_repeat` model (scripts/make_models.py) continues by repeating its last token t,
while "t t" earlier in the prompt was followed by another token. Rejected drafts' KV then
sits in the cache past the exact lengths the fused op is given; were it read, the ids
would move. On the paged backend each decoding request's 1 + k tokens go to
npu_fused_infer_attention_score as one causal query over its cached context.

The DeepSeek-V3-style MLA model (npu-mla shapes) takes requests of up to 1 + k tokens as
decodes (the builder's reorder threshold): a verification goes to the absorbed latent
decode as one row per token, each row's length ending at its own token, with no prefill
call over expanded K/V. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.hf_reference import MODELS_DIR, local_model, make_model
from support.torch_npu_emulator.activate import child_env

RUNNER = Path(__file__).with_name("spec_run.py")
REPEAT, MLA = "llama_repeat", "deepseek_v3_npu_mla"
CACHED = [0, 0, 0, 0, 0, 0, 128, 128]  # the full 128-token blocks of each prompt length


def _model(style: str) -> str:
    if style == MLA:
        return str(make_model(MODELS_DIR / "npu-mla-deepseek_v3", "deepseek_v3", "npu-mla"))
    return str(local_model(style, "tiny"))


def _start(model: str) -> subprocess.Popen[str]:
    env = child_env(dict(os.environ))
    env.pop("VLLM_ASCEND_DEVICE", None)
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.Popen(
        [sys.executable, str(RUNNER), model],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    procs = {style: _start(_model(style)) for style in (REPEAT, MLA)}
    done: dict[str, dict[str, Any]] = {}
    for style, proc in procs.items():
        out, _ = proc.communicate(timeout=1800)
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, out[-4000:]
        done[style] = json.loads(lines[-1].removeprefix("RESULT "))
    return done


@pytest.mark.parametrize("style", [REPEAT, MLA])
def test_both_passes_agree_and_the_second_hits_the_prefix_cache(runs, style: str) -> None:  # type: ignore[no-untyped-def]
    plain, ngram = runs[style]["plain"], runs[style]["ngram"]
    assert all(len(ids) == 24 for ids in ngram["ids"][0])
    assert ngram["ids"][1] == ngram["ids"][0]
    assert ngram["cached"] == CACHED == plain["cached"]
    # n-gram runs without async scheduling, so the runner's host lengths are exact.
    assert not ngram["async_scheduling"]


@pytest.mark.parametrize("style", [REPEAT, MLA])
def test_greedy_ids_equal_the_run_without_speculation(runs, style: str) -> None:  # type: ignore[no-untyped-def]
    assert runs[style]["ngram"]["ids"] == runs[style]["plain"]["ids"]


def test_paged_drafts_were_verified_as_multi_token_decodes_with_no_scalar_read(runs) -> None:  # type: ignore[no-untyped-def]
    plain, ngram = runs[REPEAT]["plain"], runs[REPEAT]["ngram"]
    assert ngram["multi_token_decode_calls"] > 0
    assert plain["multi_token_decode_calls"] == 0
    # Lengths from the runner's CPU copy, verification on the device: no scalar read.
    assert ngram["scalar_reads"] == 0


@pytest.mark.parametrize("style", [REPEAT, MLA])
def test_acceptance_is_reported_above_zero_and_some_drafts_are_rejected(runs, style: str) -> None:  # type: ignore[no-untyped-def]
    plain, ngram = runs[style]["plain"], runs[style]["ngram"]
    print(
        f"\n{style}: {ngram['accepted']}/{ngram['drafts']} drafts accepted; per generated "
        f"token {plain['launches_per_token']:.1f} host launches plain, "
        f"{ngram['launches_per_token']:.1f} with ngram"
    )
    assert 0 < ngram["accepted"] < ngram["drafts"]


def test_mla_verifies_drafts_in_the_latent_decode_not_in_prefill_calls(runs) -> None:  # type: ignore[no-untyped-def]
    plain, ngram = runs[MLA]["plain"], runs[MLA]["ngram"]
    # Decode calls with more rows than requests: a row per verified token.
    assert ngram["mla_decode_calls_over_batch"] > 0
    assert plain["mla_decode_calls_over_batch"] == 0
    # No request of at most 1 + k new tokens goes through a prefill call (the plain run
    # prefills its 3-token prompt there: its threshold is 1).
    assert ngram["mla_short_prefill_queries"] == 0 < plain["mla_short_prefill_queries"]
