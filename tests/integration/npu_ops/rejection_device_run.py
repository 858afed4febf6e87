"""The NPU's rejection ops on the emulated `npu` device, run in a fresh process
(test_npu_rejection.py): the host's results, and no device-to-host read in the step.
Prints one JSON line: {"equal": {...}, "syncs": n, "devices": [...]}."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from adapters.cpu.rejection import CpuRejectionOps
from adapters.npu.rejection import NpuRejectionOps
from ports.rejection import Drafts
from support.emulated_npu_device import counters, reset_counters, syncs
from support.torch_npu_emulator import make_torch_npu

TNPU = make_torch_npu(soc_name="Ascend910_9391", device_count=1)
TNPU.npu.device()  # registers the emulated `npu` device


def _inputs(device: str) -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    num_drafts = [3, 0, 2, 3, 1]
    batch, vocab, n = len(num_drafts), 7, sum(num_drafts)
    logits = torch.randn(n, vocab, generator=gen)
    probs = logits.softmax(-1)
    draft_probs = torch.rand(n, vocab, generator=gen).softmax(-1)
    # Drafts that often match the argmax, so greedy rows accept some.
    ids = torch.where(torch.rand(n, generator=gen) < 0.6, logits.argmax(-1),
                      torch.randint(0, vocab, (n,), generator=gen)).to(torch.int32)
    data = {
        "drafts": Drafts(ids, torch.tensor(num_drafts).cumsum(0).to(torch.int32), 3),
        "argmax": logits.argmax(-1), "probs": probs, "draft_probs": draft_probs,
        "bonus": torch.randint(0, vocab, (batch, 1), generator=gen),
        "uniform": torch.rand(n, dtype=torch.float64, generator=gen),
        "inv_q": torch.empty(batch, vocab).exponential_(generator=gen).reciprocal(),
        "is_greedy": torch.tensor([True, False, False, True, False]),
        "temps": torch.tensor([0.0, 0.5, 1.0, 0.0, 2.0]),
    }
    def move(v):  # type: ignore[no-untyped-def]
        if isinstance(v, Drafts):
            return Drafts(v.token_ids.to(device), v.cu_num_drafts.to(device), v.max_len)
        return v.to(device)
    return {k: move(v) for k, v in data.items()}


def _step(ops, d, device: str) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    drafts = d["drafts"]
    out = torch.full((5, 4), -1, dtype=torch.int32, device=device)
    ops.verify_greedy(out, drafts, d["argmax"], d["bonus"], d["is_greedy"])
    results = {}
    for name, draft_probs in (("with", d["draft_probs"]), ("without", None)):
        rec = ops.recover(drafts, draft_probs, d["probs"], d["inv_q"])
        o = out.clone()
        ops.verify_random(o, drafts, draft_probs, d["probs"], d["bonus"], rec, d["uniform"],
                          d["is_greedy"])
        results[f"recovered_{name}"], results[f"out_{name}"] = rec, o
    results["expanded"] = ops.expand_to_tokens(d["temps"], drafts.cu_num_drafts, 9, 0, 1)
    return results


def main() -> None:
    host = _step(CpuRejectionOps(), _inputs("cpu"), "cpu")
    d = _inputs("npu")
    reset_counters()
    dev = _step(NpuRejectionOps(TNPU), d, "npu")
    n_syncs = syncs(counters())
    equal = {k: bool(torch.equal(dev[k].cpu(), host[k])) for k in host}
    print("RESULT " + json.dumps({"equal": equal, "syncs": n_syncs,
                                  "devices": sorted({v.device.type for v in dev.values()})}))


if __name__ == "__main__":
    main()
