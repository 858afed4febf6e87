"""`make test`'s pytest: the whole of tests/ as a queue of chunks, run by --jobs pytest
processes side by side (default: one per core, at most 2).

Most of the suite waits on one Python thread at a time (engine starts, tiny models whose
steps are interpreter-bound, servers coming up), so two pytest processes on a 2-core
machine finish the suite in less wall time than one. The chunks are directories (or
parts of one), started the longest first (RUN_ORDER); every test module lies in exactly one chunk
(`tests/unit/test_test_layers.py` checks the partition), and whatever no chunk names
runs in the last one, so a new directory is never skipped.

    python scripts/run_suite.py [--jobs N] [--layer unit|integration|e2e] [pytest options...]

`--layer` runs one layer's directory (`make unit` runs `--layer unit`: the unit tests as
two chunks, the ops' golden tests beside the core's, so the layer's seconds of CPU are
spread over both cores).

Each chunk's output is printed whole when it ends (never interleaved), with its time;
the exit status is non-zero when any chunk failed. Each chunk lists its 8 slowest tests
(to rebalance CHUNKS by). Arguments this script does not know
go to every chunk's pytest (e.g. `-x`, `-k graphs`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# Which chunk holds a module: the first that names it. Paths are relative to tests/; a
# directory stands for every test module under it. Order within a chunk is pytest's.
CHUNKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm-a", ("integration/vllm/test_generate_matches_hf.py",
                "integration/vllm/test_quantized_generate.py",
                "integration/vllm/test_quantized_moe_generate.py",
                "integration/vllm/test_startup_errors.py",
                "integration/vllm/test_host_threads_tp.py",
                "integration/vllm/test_lora_generate.py")),
    ("vllm-c", ("integration/vllm/test_dsv32_generate.py",
                "integration/vllm/test_gpt_oss_generate.py",
                "integration/vllm/test_qwen3_next_generate.py",
                "integration/vllm/test_qwen_vl_generate.py",
                "integration/vllm/test_spec_draft.py",
                "integration/vllm/test_spec_ngram.py",
                "integration/vllm/test_expert_parallel.py")),
    ("npu-a", ("integration/npu/test_generate_on_emulated_npu.py",
               "integration/npu/test_spec_on_emulated_npu.py",
               "integration/npu/test_sleep_on_emulated_npu.py",
               "integration/npu/test_lora_on_emulated_npu.py",
               "integration/npu/test_tensor_parallel_graphs_on_emulated_npu.py",
               "integration/npu/test_tensor_parallel_on_emulated_npu.py",
               "integration/npu/test_triton_path_on_emulated_npu.py")),
    ("e2e-serve", ("e2e/test_serve.py", "e2e/test_serve_emulated_npu.py",
                   "e2e/test_serve_spec_emulated_npu.py", "e2e/test_serve_lora.py",
                   "e2e/test_serve_deepseek.py", "e2e/test_serve_gpt_oss.py",
                   "e2e/test_serve_new_families.py")),
    ("npu-b", ("integration/npu",)),
    ("e2e-pd-ray", ("e2e",)),
    ("vllm-b", ("integration/vllm",)),
    ("native", ("integration/native",)),
    ("npu-ops-graphs", ("integration/npu_ops", "integration/npu_graphs")),
    ("rest", ()),  # every module no chunk above names: integration's others, tests/unit
)
# The order the chunks start in: the longest first, so that the two lanes of a 2-core
# machine end together (the run's wall time is its longest lane). Seconds of a clean run
# on the 2-core machine (each chunk's line in the output), to rebalance by (2026-12-07,
# after that day's cuts; e2e's two with a slow Ray start left out): npu-b ~1450,
# vllm-a ~740, vllm-b ~680, npu-a ~470, e2e-pd-ray ~520, vllm-c ~450, e2e-serve ~350,
# rest ~120, native ~45, npu-ops-graphs ~35. A chunk not listed starts last.
RUN_ORDER = ("npu-b", "vllm-a", "vllm-c", "npu-a", "vllm-b", "e2e-pd-ray", "e2e-serve",
             "rest", "native", "npu-ops-graphs")

# `--layer unit`: the adapters' tests (torch on host tensors, the emulated torch_npu, Triton
# interpreted, the doctor, the container) in one process, the core and the guards in the
# other: about the same seconds each.
UNIT_CHUNKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unit-adapters", ("unit/npu", "unit/cpu", "unit/kernels", "unit/doctor",
                       "unit/container", "unit/system", "unit/vllm",
                       "unit/test_attention_plan.py", "unit/test_startup_notes.py")),
    ("unit-core", ()),
)
LAYERS = ("unit", "integration", "e2e")


def test_modules(layer: str | None = None) -> list[Path]:
    return sorted((TESTS / layer if layer else TESTS).rglob("test_*.py"))


def partition(
    modules: list[Path], table: tuple[tuple[str, tuple[str, ...]], ...] = CHUNKS
) -> dict[str, list[Path]]:
    """Chunk name -> its modules; each module in the first chunk that names it (or a
    directory above it), the rest in the last chunk."""
    chunks: dict[str, list[Path]] = {name: [] for name, _ in table}
    for module in modules:
        rel = module.relative_to(TESTS).as_posix()
        for name, paths in table:
            if any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in paths):
                chunks[name].append(module)
                break
        else:
            chunks[table[-1][0]].append(module)
    return {name: mods for name, mods in chunks.items() if mods}


def run_chunk(
    name: str, modules: list[Path], pytest_args: list[str]
) -> tuple[str, int, float, str]:
    started = time.monotonic()
    print(f"[{name}] started: {len(modules)} modules", flush=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--durations=8", *pytest_args,
         *(str(m.relative_to(ROOT)) for m in modules)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
    )
    return name, proc.returncode, time.monotonic() - started, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="pytest processes side by side (default: cores, at most 2)")
    parser.add_argument("--layer", choices=LAYERS,
                        help="run one layer's directory (default: the whole of tests/)")
    args, pytest_args = parser.parse_known_args()
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    table = UNIT_CHUNKS if args.layer == "unit" else CHUNKS
    chunks = partition(test_modules(args.layer), table)
    if table is CHUNKS:
        rank = {name: at for at, name in enumerate(RUN_ORDER)}
        chunks = dict(sorted(chunks.items(), key=lambda item: rank.get(item[0], len(rank))))
    started = time.monotonic()
    failed: list[str] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_chunk, n, m, pytest_args) for n, m in chunks.items()]
        for future in as_completed(futures):
            name, code, seconds, output = future.result()
            print(f"\n===== [{name}] exit {code} in {seconds:.0f} s =====\n{output}", flush=True)
            # 5: no tests collected (e.g. a -k that selects nothing in this chunk).
            if code not in (0, 5):
                failed.append(name)
    total = time.monotonic() - started
    verdict = f"FAILED chunks: {', '.join(failed)}" if failed else "all chunks passed"
    print(f"\nrun_suite: {len(chunks)} chunks, {args.jobs} at a time, {total:.0f} s; {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
