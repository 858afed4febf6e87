"""Per decode step costs of the NPU path on the emulated `npu` device (a benchmark, not a test).

    .venv/bin/python scripts/bench_npu_emulated.py [--model-style STYLE] [--steps N]
    .venv/bin/python scripts/bench_npu_emulated.py --kernel-launches

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
    parser.add_argument(
        "--kernel-launches",
        action="store_true",
        help="only print the launches per decode step of the roles the NPU's Triton kernels "
        "take (slot mapping, top-k/top-p, rejection sampler), torch path against Triton path",
    )
    args = parser.parse_args()
    _reexec_under_emulator()
    if args.kernel_launches:
        kernel_launches()
        return

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


def kernel_launches(batch: int = 8, vocab: int = 32000, drafts: int = 3) -> None:
    """--kernel-launches: each role's call at decode shapes (batch 8, one token a request;
    rejection: 3 drafts a request, random verification) on the emulated device: launches
    of the torch path (ops the device dispatched) against the Triton path (one per kernel,
    plus the wrapper's own ops; the kernels stubbed, so the interpreter's copies are not
    counted). One call of each role a decode step; rejection only with speculative
    decoding. Launch counts on an emulator, not timings, and not Ascend hardware."""
    import torch

    from adapters.draft_verification import TorchRejectionOps
    from adapters.npu import triton_kernels as tk
    from adapters.npu.sampling import NpuSamplingOps
    from adapters.npu.slot_mapping import NpuSlotMapping
    from ascend_core.triton_kernels import KernelPath, KernelPathDecision
    from ports.rejection import Drafts
    from support.emulated_npu_device import counters, reset_counters
    from support.torch_npu_emulator.activate import activate

    activate()
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    dev = torch.device("npu")
    gen = torch.Generator().manual_seed(0)
    n = batch * drafts

    class Stub:
        """A kernel module whose launchers only count (each launches one kernel)."""

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return lambda *a, **k: a[0] if name in ("expand_to_tokens", "recover") else None

    stub = tk.TritonKernels(
        KernelPathDecision(KernelPath.TRITON, "stub"), dict.fromkeys(tk.MODULES, Stub())
    )
    table = torch.randint(0, 100, (batch, 16), dtype=torch.int32, generator=gen).to(dev)
    slot_args = (
        batch,
        batch + 8,
        torch.arange(batch + 1, dtype=torch.int32).to(dev),
        torch.randint(0, 1024, (batch,), generator=gen).to(dev),
        table,
        table.stride(0),
        torch.empty(batch + 8, dtype=torch.int64, device=dev),
        128,
        -1,
    )
    logits = torch.randn(batch, vocab, generator=gen).to(dev)
    k = torch.full((batch,), 20, dtype=torch.int64).to(dev)
    p = torch.full((batch,), 0.9).to(dev)
    spec = Drafts(
        torch.randint(0, vocab, (n,), dtype=torch.int32, generator=gen).to(dev),
        torch.arange(drafts, n + 1, drafts, dtype=torch.int32).to(dev),
        drafts,
    )
    probs = torch.rand(n, vocab, generator=gen).softmax(-1).to(dev)
    inv_q = torch.rand(batch, vocab, generator=gen).to(dev)
    out = torch.full((batch, drafts + 1), -1, dtype=torch.int32, device=dev)
    bonus = torch.zeros(batch, dtype=torch.int64, device=dev)
    uniform = torch.rand(n, dtype=torch.float64, generator=gen).to(dev)
    greedy = torch.zeros(batch, dtype=torch.bool, device=dev)
    temps = torch.full((batch,), 0.8).to(dev)

    def rejection(ops) -> None:  # type: ignore[no-untyped-def]
        ops.expand_to_tokens(temps, spec.cu_num_drafts, n, 0, 1)
        recovered = ops.recover(spec, None, probs, inv_q)
        ops.verify_random(out, spec, None, probs, bonus, recovered, uniform, greedy)

    torch_rejection, triton_rejection = (
        TorchRejectionOps(),
        tk.TritonRejectionOps(stub, TorchRejectionOps()),
    )
    roles = {
        "slot mapping": (
            lambda: NpuSlotMapping().compute(*slot_args),
            lambda: tk.TritonSlotMapping(stub, NpuSlotMapping()).compute(*slot_args),
        ),
        "top-k/top-p": (
            lambda: apply_top_k_top_p_pytorch(logits.clone(), k, p, allow_cpu_sync=False),
            lambda: tk.TritonSamplingOps(stub, NpuSamplingOps()).top_k_top_p(logits, k, p),
        ),
        "rejection (random, 3 drafts)": (
            lambda: rejection(torch_rejection),
            lambda: rejection(triton_rejection),
        ),
    }

    def ops_of(call) -> int:  # type: ignore[no-untyped-def]
        call()  # warm (first-call allocations)
        reset_counters()
        call()
        c = counters()
        return c["fallback_ops"] + c["d2d_copies"]  # a device-side copy is a launch too

    print(f"launches per decode step, batch {batch}, vocab {vocab} (emulated npu)")
    print("| role | torch path | Triton path |")
    print("|---|---:|---:|")
    for role, (torch_call, triton_call) in roles.items():
        before = sum(stub.launches.values())
        triton_ops = ops_of(triton_call)
        kernels = (sum(stub.launches.values()) - before) // 2  # ops_of calls twice
        print(f"| {role} | {ops_of(torch_call)} | {triton_ops + kernels} |")


if __name__ == "__main__":
    main()
