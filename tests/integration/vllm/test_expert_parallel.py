"""Expert parallel with tensor parallel 2 on the host (gloo) gives the single-device ids.

Each rank holds half the routed experts (vLLM's linear placement: rank 0 experts 0-3,
rank 1 experts 4-7); our MoE method drops the slots of the other rank's experts and
vLLM's all-reduce adds the two halves. The reference is transformers' greedy run, which
the TP=1 parity tests (test_generate_matches_hf.py) show the plugin equals in fp32.
DeepSeek-V3 also splits its MLA heads over the two ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.hf_reference import greedy_token_ids

RUNNER = Path(__file__).with_name("expert_parallel_run.py")
sys.path.insert(0, str(RUNNER.parent))
from expert_parallel_run import MAX_NEW, prompts  # noqa: E402


@pytest.mark.parametrize("style", ["qwen3_moe", "deepseek_v3"])
def test_ep_tp2_gives_the_tp1_ids(style: str, model_dirs: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.run(
        [sys.executable, str(RUNNER), model_dirs[style]],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))

    assert result["ids"] == greedy_token_ids(model_dirs[style], prompts(), MAX_NEW,
                                             ignore_eos=True)
    rank0, rank1 = (placement[0] for placement in result["placement"])
    assert rank0["ours"] and rank1["ours"]
    assert rank0["local"] == rank1["local"] == 4
    assert rank0["map"] == [0, 1, 2, 3, -1, -1, -1, -1]
    assert rank1["map"] == [-1, -1, -1, -1, 0, 1, 2, 3]
