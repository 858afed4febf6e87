"""Expert parallelism's exchange per decode step on two emulated A3 NPUs, per comm method
and expert dtype (a benchmark, not a test; emulated counts, not Ascend hardware).

    .venv/bin/python scripts/bench_expert_parallel.py [--batch 4] [--steps 4] \\
        [--experts 16] [--top-k 2] [--hidden 1024] [--inter 64]

Two ranks over gloo (the emulated NPU's HCCL stand-in), each bringing `batch` decode
tokens to one MoE layer of `experts` routed experts (half on each rank), through the NPU
adapter's exchange (adapters/npu/moe_comm.py): mc2 (dispatch_v2 / combine_v2, captured in
an NPU graph once and replayed each step, as a decode step under the plan's graphs runs
it), alltoall and allgather (eager: they read their splits on the host, which a capture
refuses), with bf16 experts and with W8A8_DYNAMIC ones (int8 weights; mc2 dispatches int8
tokens with per-token float32 scales, alltoall sends int8 rows and their scales, allgather
the bf16 tokens). Printed per step and method, rank 0's view (the ranks are symmetric):

- launches: ops launched from the host outside graph replays (the emulated device's
  count: aten ops and torch_npu kernels), plus 1 for the replay itself where there is one;
- collectives: the exchange's collectives (mc2: each dispatch and combine, one each;
  alltoall / allgather: each torch.distributed call the adapter makes), the emulator's
  own gloo staging inside MC2 ops left out;
- bytes sent: what this rank sends to the other rank (mc2: a row per (token, slot) whose
  expert the other rank holds, H values in the sent dtype plus a float32 scale when
  quantized, and on combine each row sent back; all_to_all_single: the rows of the other
  rank's split; all_gather: its input once per other rank; all_reduce: 2(n-1)/n times
  its bytes, a ring's share);
- host reads: device-to-host copies, scalar reads and dynamic shapes.

The tokens differ each step (routing changes); the figures are means over `steps`.
One MoE layer: a decode step of a model runs this once per MoE layer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests"), str(REPO)]

SOC = "Ascend910_9391"  # A3: MC2 takes H in [1024, 8192]
WORLD = 2
METHODS = ("mc2", "alltoall", "allgather")
QUANTS = ("bf16", "w8a8_dynamic")


def _count_collectives(traffic: Counter[str]) -> None:
    """Wrap torch.distributed's collectives: calls and bytes this rank sends (outside the
    emulator's MC2 staging)."""
    import torch.distributed as dist

    from support.emulated_npu_device import uncounted
    from support.torch_npu_emulator import semantics_mc2

    def nbytes(t: Any) -> int:
        return int(t.numel() * t.element_size())

    real_a2a, real_ag, real_ar = dist.all_to_all_single, dist.all_gather, dist.all_reduce

    def all_to_all_single(output: Any, inp: Any, output_split_sizes: Any = None,
                          input_split_sizes: Any = None, **kwargs: Any) -> Any:
        if not semantics_mc2.INSIDE:
            rank, world = dist.get_rank(kwargs.get("group")), dist.get_world_size(
                kwargs.get("group"))
            rows = input_split_sizes or [inp.shape[0] // world] * world
            row_bytes = nbytes(inp) // max(inp.shape[0], 1)
            traffic["collectives"] += 1
            traffic["bytes"] += sum(n for r, n in enumerate(rows) if r != rank) * row_bytes
        with uncounted():  # the HCCL stand-in's staging through the host is not ours
            return real_a2a(output, inp, output_split_sizes, input_split_sizes, **kwargs)

    def all_gather(outputs: Any, inp: Any, **kwargs: Any) -> Any:
        if not semantics_mc2.INSIDE:
            traffic["collectives"] += 1
            traffic["bytes"] += nbytes(inp) * (len(outputs) - 1)
        with uncounted():
            return real_ag(outputs, inp, **kwargs)

    def all_reduce(tensor: Any, **kwargs: Any) -> Any:
        if not semantics_mc2.INSIDE:
            world = dist.get_world_size(kwargs.get("group"))
            traffic["collectives"] += 1
            traffic["bytes"] += nbytes(tensor) * 2 * (world - 1) // world
        with uncounted():
            return real_ar(tensor, **kwargs)

    dist.all_to_all_single, dist.all_gather, dist.all_reduce = (
        all_to_all_single, all_gather, all_reduce)


def _rank(rank: int, store: str, args: argparse.Namespace) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=WORLD)
    try:
        rows = _measure(rank, args)
        if rank == 0:
            Path(store).with_name("rows.json").write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def _measure(rank: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch
    import torch.distributed as dist

    from adapters.cpu.moe import CpuMoeOps
    from adapters.npu.moe import NpuMoeOps
    from adapters.npu.moe_comm import EpDomain, NpuMoeComm
    from adapters.npu.quant_moe import NpuQuantMoeOps
    from ports.moe import Routing
    from support.emulated_npu_device import counters, reset_counters, syncs
    from support.torch_npu_emulator import make_torch_npu, semantics_mc2
    from support.torch_npu_emulator.hccl_comm import comm_name, install

    tnpu = make_torch_npu(SOC)
    install(SOC)  # the groups' `npu` backend and collectives taking `npu` tensors
    npu = tnpu.npu
    npu.device()
    comm = NpuMoeComm(tnpu, NpuMoeOps(tnpu), NpuQuantMoeOps(tnpu))
    group = dist.group.WORLD
    domain = EpDomain(group, comm_name(group, SOC), WORLD, rank, args.experts, args.batch)
    local = args.experts // WORLD
    mine = slice(rank * local, (rank + 1) * local)
    g = torch.Generator().manual_seed(0)
    hidden, inter = args.hidden, args.inter
    w13 = (torch.randn(args.experts, 2 * inter, hidden, generator=g) / hidden**0.5).bfloat16()
    w2 = (torch.randn(args.experts, hidden, inter, generator=g) / inter**0.5).bfloat16()
    q13 = torch.randint(-127, 128, (args.experts, 2 * inter, hidden), generator=g,
                        dtype=torch.int8)
    q2 = torch.randint(-127, 128, (args.experts, hidden, inter), generator=g, dtype=torch.int8)
    s13 = torch.rand(args.experts, 2 * inter, generator=g) * 1e-3 + 1e-5
    s2 = torch.rand(args.experts, hidden, generator=g) * 1e-3 + 1e-5
    quant = NpuQuantMoeOps(tnpu)
    n13, n2 = quant.prepare_weights(q13[mine].contiguous(), q2[mine].contiguous())
    dev = {
        "w13": w13[mine].contiguous().to("npu"), "w2": w2[mine].contiguous().to("npu"),
        "n13": n13.to("npu"), "n2": n2.to("npu"),
        "s13": s13[mine].contiguous().to("npu"), "s2": s2[mine].contiguous().to("npu"),
    }
    host = CpuMoeOps(native_kernels=False)

    def tokens(step: int) -> tuple[Any, Any, Any]:
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(args.batch, hidden, generator=gen).bfloat16()
        logits = torch.randn(args.batch, args.experts, generator=gen)
        weights, ids = host.route(logits, Routing(top_k=args.top_k, renormalize=True))
        return x.to("npu"), ids.to(torch.int32).to("npu"), weights.to("npu")

    traffic: Counter[str] = Counter()
    _count_collectives(traffic)
    rows = []
    for quant_name in QUANTS:
        for method in METHODS:
            x, ids, weights = tokens(0)
            bf16 = {"mc2": comm.mc2, "alltoall": comm.all_to_all,
                    "allgather": comm.all_gather}[method]

            def body(method: str = method, quant_name: str = quant_name, bf16: Any = bf16,
                     x: Any = x, ids: Any = ids, weights: Any = weights) -> Any:
                if quant_name == "bf16":
                    return bf16(x, ids, weights, dev["w13"], dev["w2"], domain)
                return comm.w8a8_dynamic(method, x, ids, weights, dev["n13"], dev["s13"],
                                         dev["n2"], dev["s2"], domain)

            body()  # warm-up, eager
            graph = None
            if method == "mc2":
                graph = npu.NPUGraph()
                with npu.graph(graph):
                    body()
            total: Counter[str] = Counter()
            for step in range(1, args.steps + 1):
                nx, nids, nweights = tokens(step)
                x.copy_(nx)
                ids.copy_(nids)
                weights.copy_(nweights)
                dist.barrier()
                reset_counters()
                traffic.clear()
                semantics_mc2.TRAFFIC.clear()
                if graph is not None:
                    graph.replay()
                else:
                    body()
                c = counters()
                mc2 = semantics_mc2.TRAFFIC
                total["launches"] += c["fallback_ops"] + c["graph_replays"]
                total["replayed_ops"] += c["graph_replayed_ops"]
                total["host_reads"] += syncs(c)
                total["collectives"] += traffic["collectives"] + sum(
                    n for k, n in mc2.items() if "quant_mode=" in k)
                total["bytes"] += traffic["bytes"] + sum(
                    n for k, n in mc2.items() if k.endswith(" bytes"))
                total["int8_dispatches"] += mc2[f"{semantics_mc2.DISPATCH} quant_mode=2"]
            rows.append({
                "quant": quant_name, "method": method,
                "graph": graph is not None,
                **{k: total[k] / args.steps for k in (
                    "launches", "replayed_ops", "host_reads", "collectives", "bytes",
                    "int8_dispatches")},
            })
    return rows


def _table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"One MoE layer, decode batch {args.batch} a rank, {args.experts} experts "
        f"({args.experts // WORLD} a rank), top-{args.top_k}, H {args.hidden}, EP {WORLD}, "
        f"emulated {SOC} (counts on an emulator, not Ascend hardware); per step, rank 0:",
        "",
        "| experts | method | in a graph | launches outside the replay | ops replayed "
        "| collectives | bytes sent | host reads | int8 dispatches |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        launches = r["launches"] - (1 if r["graph"] else 0)
        lines.append(
            f"| {r['quant']} | {r['method']} | {'yes' if r['graph'] else 'no (eager)'} "
            f"| {launches:.1f}{' + 1 replay' if r['graph'] else ''} | {r['replayed_ops']:.1f} "
            f"| {r['collectives']:.1f} | {r['bytes']:.0f} | {r['host_reads']:.1f} "
            f"| {r['int8_dispatches']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--experts", type=int, default=16)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--inter", type=int, default=64)
    args = parser.parse_args(argv)
    import torch.multiprocessing as mp

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_rank, args=(f"{tmp}/store", args), nprocs=WORLD, join=True)
        print(_table(json.loads(Path(tmp, "rows.json").read_text()), args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
