"""The NPU's rejection ops on the emulated `npu` device, run in a fresh process
(test_npu_rejection.py): the host's results, and no device-to-host read in the step.
Prints one JSON line: {"equal": {...}, "syncs": n, "devices": [...]}."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from adapters.torch.rejection import TorchRejectionOps
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


# The random sampler's law on the device: REQUESTS requests of STAT_K drafts each over a
# vocabulary of 5, every draw made on the device from one seeded generator, as the
# rebound rejection_sample makes them (uniform float64 per draft, Exp(1) per request and
# vocabulary entry).
REQUESTS, STAT_K = 20_000, 2
TARGET = (0.05, 0.4, 0.25, 0.2, 0.1)
DRAFT = (0.3, 0.1, 0.1, 0.2, 0.3)


def _random_step(ops, device: str, seed: int, with_draft: bool, draws=None):  # type: ignore[no-untyped-def]
    """One verification of every request's drafts: (out [B, K+1], the draws used)."""
    vocab, n = len(TARGET), REQUESTS * STAT_K
    target = torch.tensor(TARGET, device=device).expand(n, vocab).contiguous()
    if draws is None:
        gen = torch.Generator(device=device).manual_seed(seed)
        if with_draft:  # a draft model's proposals, sampled from its own probabilities
            q = torch.tensor(DRAFT, device=device)
            ids = torch.multinomial(q, n, replacement=True, generator=gen).to(torch.int32)
        else:  # an n-gram's proposals: fixed guesses, no probabilities
            ids = torch.arange(n, device=device).remainder(vocab).to(torch.int32)
        uniform = torch.rand(n, dtype=torch.float64, device=device, generator=gen)
        inv_q = torch.empty(REQUESTS, vocab, device=device).exponential_(generator=gen)
        draws = (ids, uniform, inv_q.reciprocal())
    ids, uniform, inv_q = (t.to(device) for t in draws)
    draft_probs = (
        torch.tensor(DRAFT, device=device).expand(n, vocab).contiguous() if with_draft else None
    )
    cu = torch.arange(1, REQUESTS + 1, device=device, dtype=torch.int32) * STAT_K
    drafts = Drafts(ids, cu, STAT_K)
    recovered = ops.recover(drafts, draft_probs, target, inv_q)
    out = torch.full((REQUESTS, STAT_K + 1), -1, dtype=torch.int32, device=device)
    bonus = torch.zeros(REQUESTS, 1, dtype=torch.int64, device=device)
    is_greedy = torch.zeros(REQUESTS, dtype=torch.bool, device=device)
    ops.verify_random(out, drafts, draft_probs, target, bonus, recovered, uniform, is_greedy)
    return out, draws


def _position_counts(out: torch.Tensor, draft_ids: torch.Tensor) -> list[list[int]]:
    """Token counts at each draft position, over the rows that reached it (every row
    reaches position 0; position j > 0 where drafts 0..j-1 were all accepted)."""
    out = out.cpu().to(torch.int64)
    ids = draft_ids.cpu().to(torch.int64).view(REQUESTS, STAT_K)
    reached = torch.ones(REQUESTS, dtype=torch.bool)
    counts = []
    for j in range(STAT_K):
        counts.append(torch.bincount(out[reached, j], minlength=len(TARGET)).tolist())
        reached = reached & (out[:, j] == ids[:, j])
    return counts


def statistics() -> dict[str, object]:
    """Per mode: token counts per position on the device, whether the host's ops give the
    same outputs from the same draws, and whether the same seed repeats exactly."""
    npu_ops, host_ops = TorchRejectionOps(), TorchRejectionOps()
    result: dict[str, object] = {}
    for mode, with_draft in (("draft_probs", True), ("ngram", False)):
        reset_counters()
        out, draws = _random_step(npu_ops, "npu", 11, with_draft)
        n_syncs = syncs(counters())
        again, _ = _random_step(npu_ops, "npu", 11, with_draft)
        host_out, _ = _random_step(
            host_ops, "cpu", 11, with_draft, draws=tuple(t.cpu() for t in draws)
        )
        result[mode] = {
            "counts": _position_counts(out, draws[0]),
            "host_equal": bool(torch.equal(out.cpu(), host_out)),
            "repeats": bool(torch.equal(out.cpu(), again.cpu())),
            "syncs": n_syncs,
        }
    return result


def main() -> None:
    host = _step(TorchRejectionOps(), _inputs("cpu"), "cpu")
    d = _inputs("npu")
    reset_counters()
    dev = _step(TorchRejectionOps(), d, "npu")
    n_syncs = syncs(counters())
    equal = {k: bool(torch.equal(dev[k].cpu(), host[k])) for k in host}
    print("RESULT " + json.dumps({"equal": equal, "syncs": n_syncs,
                                  "devices": sorted({v.device.type for v in dev.values()}),
                                  "target": TARGET, "statistics": statistics()}))


if __name__ == "__main__":
    main()
