"""Score every side's greedy ids under the float32 model: how often each step chose its argmax.

    python scripts/bench_score.py --model models/87m-llama --prompt-len 64 --in i.json --out s.json

Why: in bfloat16 the greedy ids of two correct implementations part on a model whose
top logits are nearly tied (random weights: the 87M model's two best first-step logits
are 0.005 apart, while bfloat16 moves logits by ~0.14), so "same ids" cannot be the
check there. Instead each side's own sequence (prompt + its output) runs once through
transformers in float32, teacher-forced, and every generated step is asked: was the
chosen token the float32 argmax, and how many nats below the float32 best was it
(the regret). A side whose bfloat16 math is worse than another's chooses the float32
best less often.

--in: {"sequences": [{"key": str, "batch": int, "token_ids": [[int]]}]}, the prompts
being bench_throughput's timed prompts for that batch size. --out: {key: scores}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_throughput import prompt_seed, prompts


def score(model: Any, prompt_ids: list[list[int]], outputs: list[list[int]]) -> dict[str, Any]:
    import torch

    seq = torch.tensor([p + o for p, o in zip(prompt_ids, outputs, strict=True)])
    out = torch.tensor(outputs)
    first = len(prompt_ids[0]) - 1  # the logits that chose the first output token
    with torch.no_grad():
        logp = model(seq).logits[:, first:-1].float().log_softmax(-1)
    chosen = logp.gather(-1, out[..., None])[..., 0]
    regret = logp.max(-1).values - chosen
    return {"steps": out.numel(),
            "argmax_steps": int((logp.argmax(-1) == out).sum()),
            "regret_sum": float(regret.sum()),
            "regret_max": float(regret.max())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-len", type=int, required=True)
    p.add_argument("--in", dest="inp", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    vocab = int(AutoConfig.from_pretrained(args.model).vocab_size)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    scores = {}
    for s in json.loads(args.inp.read_text())["sequences"]:
        batch = s["batch"]
        scores[s["key"]] = score(model, prompts(prompt_seed(batch, False), batch,
                                                args.prompt_len, vocab), s["token_ids"])
    args.out.write_text(json.dumps(scores))
    return 0


if __name__ == "__main__":
    sys.exit(main())
