"""Two ranks over gloo, each with its own tokens: the NPU adapter's MC2, all-to-all and
all-gather MoE paths on the emulated torch_npu against the host's single-device experts,
and the MC2 ops' refusals. Run by test_npu_moe_comm.py; prints one RESULT line per rank
(JSON) on rank 0's stdout after both finished.

Usage: python moe_comm_run.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WORLD, EXPERTS, TOP_K, HIDDEN, INTER = 2, 8, 2, 64, 32
TOKENS = (6, 4)  # rank 0 brings 6 tokens, rank 1 four: MC2's global_bs covers the larger
LOCAL = EXPERTS // WORLD


def _weights() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    w13 = (torch.randn(EXPERTS, 2 * INTER, HIDDEN, generator=g) / HIDDEN**0.5).bfloat16()
    w2 = (torch.randn(EXPERTS, HIDDEN, INTER, generator=g) / INTER**0.5).bfloat16()
    return w13, w2


def _tokens(seed: int, host, count: int | None = None):  # type: ignore[no-untyped-def]
    """(x, ids, weights) of rank `seed`'s tokens (TOKENS[seed] of them unless count)."""
    from ports.moe import Routing

    n = TOKENS[seed] if count is None else count
    g = torch.Generator().manual_seed(100 + seed)
    x = torch.randn(n, HIDDEN, generator=g).bfloat16()
    logits = torch.randn(n, EXPERTS, generator=g)
    weights, ids = host.route(logits, Routing(top_k=TOP_K, renormalize=True))
    return x, ids, weights


def _refused(call) -> str:
    try:
        call()
    except (ValueError, NotImplementedError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return ""


def _rank(rank: int, out_dir: str) -> None:
    result: dict[str, object] = {"rank": rank}
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=WORLD
        )
        result.update(_checks(rank, out_dir))
    except Exception:  # the report carries it
        result["error"] = traceback.format_exc()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            _leave(ok="error" not in result)


def _leave(ok: bool) -> None:
    """Both ranks done before either tears its group down (a rank that closes its sockets
    while the other still reads can abort the other), and no reference to the group left
    for the interpreter's exit to destroy (the emulator's communicator names hold one)."""
    from support.torch_npu_emulator.hccl_comm import forget

    if ok:
        dist.barrier()
    forget(dist.group.WORLD)
    dist.destroy_process_group()


def _checks(rank: int, out_dir: str) -> dict[str, object]:
    from adapters.cpu.moe import CpuMoeOps
    from adapters.npu.moe import NpuMoeOps
    from adapters.npu.moe_comm import EpDomain, NpuMoeComm
    from adapters.npu.quant_moe import NpuQuantMoeOps
    from ascend_core.moe.comm_method import CommChoice, MoeCommMethod, MoeCommPlan
    from ascend_core.moe.decision import MoeDecision
    from ascend_core.moe.placement import place_experts
    from support.torch_npu_emulator import make_torch_npu
    from support.torch_npu_emulator.hccl_comm import comm_name

    host = CpuMoeOps(native_kernels=False)
    tnpu = make_torch_npu("Ascend910B1")
    comm = NpuMoeComm(tnpu, NpuMoeOps(tnpu), NpuQuantMoeOps(tnpu))
    group = dist.group.WORLD
    name = comm_name(group, "Ascend910B1")  # A2 ranks: CANN's A2 MC2 takes H = 64
    domain = EpDomain(group, name, WORLD, rank, EXPERTS, max(TOKENS))
    w13, w2 = _weights()
    mine = slice(rank * LOCAL, (rank + 1) * LOCAL)
    l13, l2 = w13[mine].contiguous(), w2[mine].contiguous()
    x, ids, weights = _tokens(rank, host)
    ref = host.experts(x, ids, weights, w13, w2).float()
    out: dict[str, object] = {"ids": ids.tolist()}

    def diff(y: torch.Tensor) -> dict[str, float]:
        d = (y.float() - ref).abs()
        return {
            "max_abs": d.max().item(),
            "max_rel": (d / ref.abs().clamp(min=1e-2)).max().item(),
            "ref_max": ref.abs().max().item(),
        }

    paths = {"mc2": comm.mc2, "all_to_all": comm.all_to_all, "all_gather": comm.all_gather}
    for label, path in paths.items():
        y = path(x, ids, weights, l13, l2, domain)
        out[label] = {**diff(y), "shape": list(y.shape), "dtype": str(y.dtype)}
    # The MC2 ops were called, with the communicator's name, and counted this rank's rows.
    dispatch = tnpu.calls_of("npu_moe_distribute_dispatch_v2")
    out["dispatch_calls"] = len(dispatch)
    out["dispatch_group"] = dispatch[0]["group_ep"] == name
    out["combine_calls"] = len(tnpu.calls_of("npu_moe_distribute_combine_v2"))

    # W8A8_DYNAMIC experts: dispatch sends int8 tokens with their per-token scales.
    out["w8a8"] = _w8a8(rank, comm, domain, host, x, ids, weights, tnpu)

    # MC2 captured in an NPU graph on the emulated device and replayed on new tokens.
    out["graph"] = _graph(rank, domain, host, w13, w2, l13, l2)

    # The core's decision picks the path by the step's size.
    placement, _ = place_experts(EXPERTS, 0, WORLD)
    plan = MoeCommPlan(
        capacity=max(TOKENS),
        small=CommChoice(MoeCommMethod.MC2, "test: small steps"),
        large=CommChoice(MoeCommMethod.ALLTOALL, "test: large steps"),
    )
    decision = MoeDecision(plan, placement, None, "bfloat16")
    before = len(tnpu.calls_of("npu_moe_distribute_dispatch_v2"))
    y_small, m_small = comm.run(decision, max(TOKENS), x, ids, weights, l13, l2, domain)
    mid = len(tnpu.calls_of("npu_moe_distribute_dispatch_v2"))
    y_large, m_large = comm.run(decision, max(TOKENS) + 1, x, ids, weights, l13, l2, domain)
    after = len(tnpu.calls_of("npu_moe_distribute_dispatch_v2"))
    out["decision"] = {
        "small": m_small.value,
        "large": m_large.value,
        "small_dispatches": mid - before,
        "large_dispatches": after - mid,
        "small_max_abs": diff(y_small)["max_abs"],
        "large_max_abs": diff(y_large)["max_abs"],
    }

    # A rank holding the other rank's experts (placement swapped): the tokens reach the
    # wrong experts and the outputs leave the reference.
    other = slice((1 - rank) * LOCAL, (2 - rank) * LOCAL)
    swapped = comm.mc2(x, ids, weights, w13[other].contiguous(), w2[other].contiguous(), domain)
    out["swapped_max_abs"] = diff(swapped)["max_abs"]

    def dispatch_with(**changes: object) -> None:
        args = {
            "x": x,
            "expert_ids": ids.to(torch.int32),
            "group_ep": name,
            "ep_world_size": WORLD,
            "ep_rank_id": rank,
            "moe_expert_num": EXPERTS,
            "global_bs": max(TOKENS) * WORLD,
        }
        args.update(changes)
        tnpu.npu_moe_distribute_dispatch_v2(**args)

    bad_ids = ids.to(torch.int32).clone()
    bad_ids[0, 0] = EXPERTS  # an expert no rank holds
    refusals = {
        "unknown_group": _refused(lambda: dispatch_with(group_ep="hccl_comm_not_live")),
        "expert_no_rank_holds": _refused(lambda: dispatch_with(expert_ids=bad_ids)),
        "float32_x": _refused(lambda: dispatch_with(x=x.float())),
        "int64_ids": _refused(lambda: dispatch_with(expert_ids=ids.long())),
        "world_size": _refused(lambda: dispatch_with(ep_world_size=4)),
        "rank_id": _refused(lambda: dispatch_with(ep_rank_id=1 - rank)),
        "uneven_bs_without_global_bs": _refused(lambda: dispatch_with(global_bs=0)),
        "tp_domain": _refused(lambda: dispatch_with(group_tp="tp", tp_world_size=2)),
        # The same group on A3 ranks: CANN's A3 kernel takes H in [1024, 8192] only.
        "a3_hidden": _refused(lambda: dispatch_with(group_ep=comm_name(group, "Ascend910_9391"))),
    }
    # Combine given expert_ids that were not dispatched: this rank moves one slot of its
    # first token to an expert the other rank holds, as if its token had gone there.
    ids32 = ids.to(torch.int32)
    rows, _, assist, nums, counts, _, _ = tnpu.npu_moe_distribute_dispatch_v2(
        x, ids32, name, WORLD, rank, EXPERTS, global_bs=max(TOKENS) * WORLD
    )
    moved = ids32.clone()
    slot = 0
    moved[0, slot] = (moved[0, slot] + LOCAL) % EXPERTS
    filled = torch.nan_to_num(rows.float()).bfloat16()
    refusals["combine_wrong_rank"] = _refused(
        lambda: tnpu.npu_moe_distribute_combine_v2(
            filled,
            moved,
            assist,
            counts,
            weights.float(),
            name,
            WORLD,
            rank,
            EXPERTS,
            global_bs=max(TOKENS) * WORLD,
        )
    )
    out["refusals"] = refusals
    out["token_nums"] = nums.tolist()
    return out


def _w8a8(rank, comm, domain, host, x, ids, weights, tnpu):  # type: ignore[no-untyped-def]
    from adapters.cpu.quant_moe import CpuQuantMoeOps
    from adapters.npu.quant_moe import NpuQuantMoeOps

    g = torch.Generator().manual_seed(1)
    w13 = torch.randint(-127, 128, (EXPERTS, 2 * INTER, HIDDEN), generator=g, dtype=torch.int8)
    w2 = torch.randint(-127, 128, (EXPERTS, HIDDEN, INTER), generator=g, dtype=torch.int8)
    s13 = torch.rand(EXPERTS, 2 * INTER, generator=g) * 1e-3 + 1e-5
    s2 = torch.rand(EXPERTS, HIDDEN, generator=g) * 1e-3 + 1e-5
    cpu_q = CpuQuantMoeOps()
    rows, permutation = host.permute(x, ids, EXPERTS)
    kept = int(permutation.group_sizes.sum())
    h13, h2 = cpu_q.prepare_weights(w13, w2)
    expert_rows = cpu_q.grouped_mlp_w8a8_dynamic(
        rows[:kept], permutation.group_sizes, h13, s13, h2, s2
    )
    ref = host.unpermute(expert_rows, permutation, weights).float()
    npu_q = NpuQuantMoeOps(tnpu)
    mine = slice(rank * LOCAL, (rank + 1) * LOCAL)
    n13, n2 = npu_q.prepare_weights(w13[mine].contiguous(), w2[mine].contiguous())
    y = comm.mc2_w8a8_dynamic(x, ids, weights, n13, s13[mine], n2, s2[mine], domain)
    call = tnpu.calls_of("npu_moe_distribute_dispatch_v2")[-1]
    first_gmm = tnpu.calls_of("npu_grouped_matmul")[-2]
    out: dict[str, object] = {
        "max_abs": (y.float() - ref).abs().max().item(),
        "ref_max": ref.abs().max().item(),
        "quant_mode": call["quant_mode"],
        "first_gmm_x": str(first_gmm["x"][0].dtype),
        "dtype": str(y.dtype),
    }
    # The other methods of w8a8_dynamic (the port's entry): all-to-all sends int8 rows
    # (npu_dynamic_quant's per-token scales beside them), all-gather the tokens as they are.
    for method in ("alltoall", "allgather"):
        sent: list[torch.dtype] = []
        real = dist.all_to_all_single

        def counted(output, inp, *args, _real=real, _sent=sent, **kwargs):  # type: ignore[no-untyped-def]
            _sent.append(inp.dtype)
            return _real(output, inp, *args, **kwargs)

        dist.all_to_all_single = counted
        try:
            y = comm.w8a8_dynamic(
                method, x, ids, weights, n13, s13[mine], n2, s2[mine], domain
            )
        finally:
            dist.all_to_all_single = real
        out[method] = {
            "max_abs": (y.float() - ref).abs().max().item(),
            "dtype": str(y.dtype),
            "sent": sorted({str(d) for d in sent}),
        }
    return out


def _graph(rank, domain, host, w13, w2, l13, l2):  # type: ignore[no-untyped-def]
    """Capture comm.mc2 once (after an eager warm-up), then write another step's tokens
    into the captured inputs and replay: the dispatch and combine recorded in the graph
    run again, across both ranks, and give the host's outputs for the new tokens."""
    from adapters.npu.moe import NpuMoeOps
    from adapters.npu.moe_comm import NpuMoeComm
    from support.emulated_npu_device import counters, reset_counters
    from support.torch_npu_emulator import make_torch_npu

    tnpu = make_torch_npu("Ascend910B1")
    npu = tnpu.npu
    npu.device()
    comm = NpuMoeComm(tnpu, NpuMoeOps(tnpu))
    x, ids, weights = _tokens(rank, host)
    dx, dids, dw = x.to("npu"), ids.to(torch.int32).to("npu"), weights.to("npu")
    d13, d2 = l13.to("npu"), l2.to("npu")

    def body() -> torch.Tensor:
        return comm.mc2(dx, dids, dw, d13, d2, domain)

    body()
    graph = npu.NPUGraph()
    reset_counters()
    with npu.graph(graph):
        out = body()
    reads = counters()["scalar_reads"] + counters()["d2h_copies"]
    nodes = [str(node.name) for node in graph._py_nodes]  # the recorded launches
    x2, ids2, weights2 = _tokens(rank + 7, host, TOKENS[rank])
    dx.copy_(x2.to("npu"))
    dids.copy_(ids2.to(torch.int32).to("npu"))
    dw.copy_(weights2.to("npu"))
    graph.replay()
    ref = host.experts(x2, ids2, weights2, w13, w2).float()
    return {
        "host_reads_in_capture": reads,
        "dispatch_nodes": sum("npu_moe_distribute_dispatch_v2" in n for n in nodes),
        "combine_nodes": sum("npu_moe_distribute_combine_v2" in n for n in nodes),
        "replay_max_abs": (out.cpu().float() - ref).abs().max().item(),
        "ref_max": ref.abs().max().item(),
        "changed": bool((ids2 != ids).any()),
    }


def main() -> None:
    out_dir = sys.argv[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_rank, args=(out_dir,), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        print("RESULT " + Path(out_dir, f"rank{rank}.json").read_text())


if __name__ == "__main__":
    main()
