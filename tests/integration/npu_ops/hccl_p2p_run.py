"""Two ranks on the emulated NPU exchange `npu` tensors by torch.distributed's
batch_isend_irecv, as vLLM's EPLB moves expert weights (its torch_nccl communicator: one
isend and one irecv per tensor to the peer, then a wait of each returned request). Each
rank waits every request twice, as HCCL's requests allow, and writes what it received.
Run by test_emulated_hccl_p2p.py; prints one RESULT line per rank (JSON).

Usage: python hccl_p2p_run.py OUT_DIR
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WORLD = 2
SIZES = (12, 5)  # two tensors a move, as an expert's w13 and w2


def _rank(rank: int, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    result: dict[str, object] = {"rank": rank}
    try:
        dist.init_process_group("gloo", init_method=f"file://{out_dir}/store", rank=rank,
                                world_size=WORLD)
        from torch.distributed import P2POp, batch_isend_irecv

        peer, device = 1 - rank, torch.device("npu", rank)
        sent = [torch.full((n,), 10.0 * rank + i, device=device) for i, n in enumerate(SIZES)]
        got = [torch.zeros(n, device=device) for n in SIZES]
        ops = [P2POp(dist.isend, t, group_peer=peer) for t in sent]
        ops += [P2POp(dist.irecv, t, group_peer=peer) for t in got]
        requests = batch_isend_irecv(ops)
        for _ in range(2):
            for request in requests:
                request.wait()
        result["requests"] = len(requests)
        result["devices"] = sorted({t.device.type for t in got})
        result["received"] = [t.cpu().tolist() for t in got]
        dist.barrier()
    except Exception:  # the report carries it
        result["error"] = traceback.format_exc()
    finally:
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))


def main() -> None:
    from support.torch_npu_emulator.activate import activate

    out_dir = sys.argv[1]
    activate(soc_name="Ascend910_9391", device_count=WORLD)
    context = mp.get_context("fork")  # the ranks keep the emulated device installed here
    ranks = [context.Process(target=_rank, args=(r, out_dir)) for r in range(WORLD)]
    for process in ranks:
        process.start()
    deadline = time.monotonic() + 60
    for process in ranks:
        process.join(max(0.0, deadline - time.monotonic()))
    for rank, process in enumerate(ranks):
        if process.is_alive():
            process.kill()
            print(f"rank {rank} still waiting after 60 s: killed", file=sys.stderr)
    for rank in range(WORLD):
        path = Path(out_dir, f"rank{rank}.json")
        if path.exists():
            print("RESULT " + path.read_text())


if __name__ == "__main__":
    main()
