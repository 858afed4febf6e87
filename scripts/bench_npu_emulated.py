"""Per decode step costs of the NPU path on the emulated `npu` device (a benchmark, not a test).

    .venv/bin/python scripts/bench_npu_emulated.py [--model-style STYLE] [--steps N]

STYLE: llama, qwen3, qwen3_moe (experts through torch_npu's MoE ops) or deepseek_v3_npu_mla
(MLA at the shapes torch_npu documents, scripts/make_models.py --size npu-mla).

Runs LLM.generate through AscendNpuPlatform -> NpuWorker -> NpuModelRunner on the
emulated device and prints, per decode step at batch 1 and 8: device-to-host syncs
(copies to the host, scalar reads, data-dependent output sizes), host-to-device copies,
and ops dispatched per decoder layer (aten ops through the device's fallback plus one
per torch_npu kernel). Each figure is (run of 1 + N tokens - run of 1 token) / N over
fresh prompts. Proxies of NPU efficiency measured on an emulator, not Ascend hardware.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


STYLES = ("llama", "qwen3", "qwen3_moe", "deepseek_v3_npu_mla")


def _model_dir(style: str) -> tuple[str, str]:
    """The model's directory and how the table names it."""
    from support.hf_reference import MODELS_DIR, local_model, make_model

    if style == "deepseek_v3_npu_mla":
        return str(make_model(MODELS_DIR / "npu-mla-deepseek_v3", "deepseek_v3", "npu-mla")), (
            "deepseek_v3 npu-mla"
        )
    return str(local_model(style, "tiny")), f"{style} tiny"


def _reexec_under_emulator() -> None:
    from support.torch_npu_emulator.activate import ACTIVE_VAR, child_env

    if os.environ.get(ACTIVE_VAR) != "1":
        env = child_env()
        env["VLLM_ASCEND_DEVICE"] = "npu"
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
        env.setdefault("OMP_NUM_THREADS", "1")
        os.execvpe(sys.executable, [sys.executable, *sys.argv], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-style", default="llama", choices=STYLES)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    _reexec_under_emulator()

    from support.torch_npu_emulator.activate import activate

    activate()
    from vllm import LLM, SamplingParams, TokensPrompt

    from support.emulated_npu_device import counters, op_counts, reset_counters, syncs
    model, named = _model_dir(args.model_style)
    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=512,
        block_size=128,
        max_num_seqs=8,
        kv_cache_memory_bytes=32 << 20,
        seed=0,
    )
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    layers = len(runner.model.model.layers)
    rng = random.Random(0)

    def run(batch: int, tokens: int) -> tuple[dict[str, int], dict[str, int]]:
        prompts = [
            TokensPrompt(prompt_token_ids=[rng.randrange(2, 500) for _ in range(24)])
            for _ in range(batch)
        ]
        params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
        reset_counters()
        llm.generate(prompts, params, use_tqdm=False)
        return counters(), op_counts()

    print(f"model {named}, {layers} decoder layers, bf16, block 128, eager")
    print(
        "| batch | D2H syncs / step | of which D2H copies | H2D copies / step | "
        "ops / step | ops / layer / step |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    breakdown: dict[str, float] = {}
    for batch in (1, 8):
        (one, ops_one), (more, ops_more) = run(batch, 1), run(batch, 1 + args.steps)
        per = {k: (more[k] - one[k]) / args.steps for k in one}
        print(
            f"| {batch} | {syncs(per):.2f} | {per['d2h_copies']:.2f} | {per['h2d_copies']:.2f} "
            f"| {per['fallback_ops']:.1f} | {per['fallback_ops'] / layers:.1f} |"
        )
        if batch == 8:
            breakdown = {k: (ops_more.get(k, 0) - ops_one.get(k, 0)) / args.steps for k in ops_more}
    print("\nops per decode step at batch 8 (most first):")
    for name, n in sorted(breakdown.items(), key=lambda kv: -kv[1])[:25]:
        if n > 0:
            print(f"  {n:6.1f}  {name}")


if __name__ == "__main__":
    main()
