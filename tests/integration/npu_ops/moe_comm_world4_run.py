"""Four ranks over gloo, each with its own tokens: the NPU adapter's MC2, all-to-all and
all-gather MoE paths on the emulated torch_npu (A2 ranks, hidden 64) against the host's
single-device experts, at EP world 4 (moe_comm_run.py's two ranks, doubled: 8 experts, 2 a
rank). Run by test_npu_moe_comm_world4.py; prints one RESULT line per rank (JSON).

Usage: python moe_comm_world4_run.py OUT_DIR
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

from integration.npu_ops.moe_comm_run import (
    EXPERTS,
    HIDDEN,
    _leave,
    _refused,
    _tokens,
    _weights,
)

WORLD = 4
TOKENS = (5, 3, 4, 2)  # uneven: MC2's global_bs covers the largest
LOCAL = EXPERTS // WORLD


def _rank(rank: int, out_dir: str) -> None:
    result: dict[str, object] = {"rank": rank}
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{out_dir}/store", rank=rank, world_size=WORLD
        )
        result.update(_checks(rank))
    except Exception:  # the report carries it
        result["error"] = traceback.format_exc()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            _leave(ok="error" not in result)


def _checks(rank: int) -> dict[str, object]:
    from adapters.cpu.moe import CpuMoeOps
    from adapters.npu.moe import NpuMoeOps
    from adapters.npu.moe_comm import EpDomain, NpuMoeComm
    from support.torch_npu_emulator import make_torch_npu
    from support.torch_npu_emulator.hccl_comm import comm_name

    host = CpuMoeOps(native_kernels=False)
    tnpu = make_torch_npu("Ascend910B1")
    comm = NpuMoeComm(tnpu, NpuMoeOps(tnpu))
    group = dist.group.WORLD
    name = comm_name(group, "Ascend910B1")
    domain = EpDomain(group, name, WORLD, rank, EXPERTS, max(TOKENS))
    w13, w2 = _weights()

    def held_by(r: int) -> tuple[torch.Tensor, torch.Tensor]:
        part = slice(r * LOCAL, (r + 1) * LOCAL)
        return w13[part].contiguous(), w2[part].contiguous()

    l13, l2 = held_by(rank)
    x, ids, weights = _tokens(rank, host, TOKENS[rank])
    ref = host.experts(x, ids, weights, w13, w2).float()
    out: dict[str, object] = {"ids": ids.tolist(), "ref_max": ref.abs().max().item()}
    paths = {"mc2": comm.mc2, "all_to_all": comm.all_to_all, "all_gather": comm.all_gather}
    for label, path in paths.items():
        y = path(x, ids, weights, l13, l2, domain)
        out[label] = {"max_abs": (y.float() - ref).abs().max().item(), "shape": list(y.shape)}
    _, _, _, nums, _, _, _ = tnpu.npu_moe_distribute_dispatch_v2(
        x, ids.to(torch.int32), name, WORLD, rank, EXPERTS, global_bs=max(TOKENS) * WORLD
    )
    out["token_nums"] = nums.tolist()
    # Each rank holding the next rank's experts: every token reaches the wrong experts.
    s13, s2 = held_by((rank + 1) % WORLD)
    out["shifted_max_abs"] = (comm.mc2(x, ids, weights, s13, s2, domain).float()
                              - ref).abs().max().item()
    out["world_2_refused"] = _refused(lambda: tnpu.npu_moe_distribute_dispatch_v2(
        x, ids.to(torch.int32), name, 2, rank % 2, EXPERTS, global_bs=max(TOKENS) * 2))
    return out


def main() -> None:
    out_dir = sys.argv[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Forked, not spawned: the ranks inherit the imports below instead of each paying
    # for torch's and the adapters' (four fresh interpreters cost ~20 s on 2 loaded cores).
    import adapters.cpu.moe
    import adapters.npu.moe_comm  # noqa: F401
    import support.torch_npu_emulator.hccl_comm  # noqa: F401

    mp.start_processes(_rank, args=(out_dir,), nprocs=WORLD, join=True, start_method="fork")
    for rank in range(WORLD):
        print("RESULT " + Path(out_dir, f"rank{rank}.json").read_text())


assert HIDDEN == 64  # A2's MC2 takes it (a multiple of 32); A3's would refuse
if __name__ == "__main__":
    main()
