"""MC2: torch_npu 2.14.0's npu_moe_distribute_dispatch_v2 / npu_moe_distribute_combine_v2,
with their cross-rank semantics over the process group `group_ep` names (gloo here).

Sources: the schemas and output shapes of the 2.14.0 wheel
(torch_npu/op_plugin/meta/_meta_registrations.py: A = global_bs * min(local experts, K)
rows; assist_info_for_combine of max(BS * K, A * 128) int32; expert_token_nums [local]
int64; ep_recv_counts [ep_world_size * local] int32) and CANN's aclnnMoeDistributeDispatchV2
/ CombineV2 docs (x FLOAT16/BFLOAT16, expert_ids INT32, expert_scales FLOAT32, groupEp of
1 to 127 characters; dispatch = all-to-all of each token to the ranks holding its
experts, combine = the way back, each token's rows summed with its expert_scales).

Modelled: no TP domain (tp_world_size 0 or 1), no shared-expert ranks
(shared_expert_rank_num 0), quant_mode 0 (tokens as given) and 2 (dynamic per-token int8:
the sender quantizes, int8 and the float32 scales travel), expert_token_nums_type 0/1,
global_bs 0 (every rank the same BS) or BS_max * ep_world_size. The rest raises
NotImplementedError. The chip's limits (CANN's aclnnMoeDistributeDispatchV2 constraints,
the chip being the one the communicator's ranks are: hccl_comm): on A3 (Ascend910_93*)
H in [1024, 8192] and BS <= 512; on A2 (Ascend910B*) H a multiple of 32 up to 7168 and
BS <= 256; K <= 16 on both; other chips have no MC2 kernels. The EP-size ranges per
chip are not modelled.

Layout (the emulator's own: the adapter must treat assist_info and ep_recv_counts as
opaque, as the hardware's are): a rank's received rows are grouped by local expert, then
by source rank, then in (token, slot) order; assist_info holds (source rank, token, slot)
per received row; ep_recv_counts the cumulative row counts in (local expert, source rank)
order. Rows past the received count are undefined: NaN (-7 for int8, and in the index).
Combine sums each token's rows times its expert_scales in float32, adds shared_expert_x,
and rounds once to expand_x's dtype.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from support.torch_npu_emulator.hccl_comm import group_of
from support.torch_npu_emulator.semantics import _require, npu_dynamic_quant

DISPATCH = "npu_moe_distribute_dispatch_v2"
COMBINE = "npu_moe_distribute_combine_v2"
HALF_TYPES = (torch.float16, torch.bfloat16)
UNDEFINED_INDEX = -7
INFO = 3  # (source rank, token, slot) per received row
# What this process's MC2 ops did, launched or replayed (for tests and benchmarks): calls
# by op and quant mode (`<op> quant_mode=<q>`), and the bytes this rank's ops sent to
# other ranks (`<op> bytes`: dispatch, a row per (token, slot) whose expert another rank
# holds, H values in the sent dtype plus a float32 scale when quantized; combine, each row
# sent back to the rank that dispatched it). Cleared by the caller.
TRAFFIC: Counter[str] = Counter()
# True while an MC2 op runs: its gloo staging is the emulator's, not a collective of the
# caller's (a caller counting torch.distributed calls leaves these out).
INSIDE = False


@contextmanager
def _inside() -> Iterator[None]:
    global INSIDE
    INSIDE = True
    try:
        yield
    finally:
        INSIDE = False


def _unmodelled(a: dict[str, Any], op: str, tensors: tuple[str, ...]) -> None:
    for name in tensors:
        if a[name] is not None:
            raise NotImplementedError(f"{op}: {name} is not modelled")
    if a["group_tp"] or a["tp_world_size"] > 1:
        raise NotImplementedError(f"{op}: a TP domain (group_tp, tp_world_size > 1) not modelled")
    if a["comm_alg"]:
        raise NotImplementedError(f"{op}: comm_alg={a['comm_alg']!r} is not modelled")
    extra = ("zero_expert_num", "copy_expert_num", "const_expert_num", "shared_expert_rank_num")
    for name in extra:
        if a[name]:
            raise NotImplementedError(f"{op}: {name}={a[name]} is not modelled")


def _chip_limits(soc: str, op: str, hidden: int, bs: int, top_k: int) -> None:
    """CANN's MC2 shape limits on the communicator's chip."""
    if soc.startswith("Ascend910_93"):
        _require(1024 <= hidden <= 8192, f"{op}: H {hidden} outside [1024, 8192] on A3 ({soc})")
        _require(0 < bs <= 512, f"{op}: BS {bs} outside (0, 512] on A3 ({soc})")
    elif soc.startswith("Ascend910B"):
        _require(
            hidden % 32 == 0 and 0 < hidden <= 7168,
            f"{op}: H {hidden} not a multiple of 32 up to 7168 on A2 ({soc})",
        )
        _require(0 < bs <= 256, f"{op}: BS {bs} outside (0, 256] on A2 ({soc})")
    else:
        raise ValueError(f"{op}: {soc} has no MC2 kernels (A2 and A3 do)")
    _require(0 < top_k <= 16, f"{op}: K {top_k} outside (0, 16]")


def _ep_group(a: dict[str, Any], op: str) -> tuple[dist.ProcessGroup, int, int, int]:
    """(group, world, rank, local experts), the domain's arguments checked against it."""
    group, soc = group_of(a["group_ep"], op)
    _chip_limits(
        soc,
        op,
        a["x"].shape[-1] if "x" in a else a["expand_x"].shape[-1],
        (a["x"] if "x" in a else a["expert_ids"]).shape[0],
        a["expert_ids"].shape[-1],
    )
    world, rank, experts = a["ep_world_size"], a["ep_rank_id"], a["moe_expert_num"]
    _require(
        world == dist.get_world_size(group),
        f"{op}: ep_world_size {world} but {a['group_ep']!r} has {dist.get_world_size(group)} ranks",
    )
    _require(0 <= rank < world, f"{op}: ep_rank_id {rank} outside [0, {world})")
    _require(
        rank == dist.get_rank(group),
        f"{op}: ep_rank_id {rank} but this rank is {dist.get_rank(group)} of {a['group_ep']!r}",
    )
    _require(
        experts > 0 and experts % world == 0,
        f"{op}: moe_expert_num {experts} not a multiple of ep_world_size {world}",
    )
    sharing = (a["shared_expert_num"], a["shared_expert_rank_num"])
    _require(sharing in ((1, 0), (0, 0)), f"{op}: shared expert setting {sharing} invalid")
    return group, world, rank, experts // world


def _gather(tensor: torch.Tensor, group: dist.ProcessGroup, world: int) -> list[torch.Tensor]:
    """Every rank's `tensor` (same shape on each), through host memory."""
    host = tensor.detach().cpu().contiguous()
    out = [torch.empty_like(host) for _ in range(world)]
    dist.all_gather(out, host, group=group)
    return out


def _gather_rows(rows: torch.Tensor, group: dist.ProcessGroup, world: int) -> list[torch.Tensor]:
    """Every rank's rows (their counts may differ), padded to the largest and cut back."""
    count = torch.tensor([rows.shape[0]], dtype=torch.int64)
    counts = [int(c.item()) for c in _gather(count, group, world)]
    most = max(counts)
    padded = rows.new_zeros((most, *rows.shape[1:]), device="cpu")
    padded[: rows.shape[0]] = rows.detach().cpu()
    return [g[:n] for g, n in zip(_gather(padded, group, world), counts, strict=True)]


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token int8, npu_dynamic_quant's formula (scale = max|x| / 127 a row)."""
    return npu_dynamic_quant(
        {
            "input": x,
            "smooth_scales": None,
            "group_index": None,
            "dst_type": torch.int8,
            "quant_mode": "pertoken",
        }
    )


def npu_moe_distribute_dispatch_v2(a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """Staged through host memory (gloo): computed on the host, the outputs on x's device."""
    with torch.device("cpu"), _inside():
        outputs = _dispatch(a)
    return tuple(t.to(a["x"].device) for t in outputs)


def npu_moe_distribute_combine_v2(a: dict[str, Any]) -> torch.Tensor:
    """Staged through host memory (gloo), as dispatch; the output on expand_x's device."""
    with torch.device("cpu"), _inside():
        out = _combine(a)
    return out.to(a["expand_x"].device)


def _dispatch(a: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    op = DISPATCH
    _unmodelled(
        a, op, ("scales", "x_active_mask", "expert_scales", "elastic_info", "performance_info")
    )
    for name in ("y_dtype", "x_dtype", "scales_dtype"):
        if a[name] is not None:
            raise NotImplementedError(f"{op}: {name} is not modelled")
    x, ids = a["x"], a["expert_ids"]
    _require(x.dim() == 2 and x.dtype in HALF_TYPES, f"{op}: x is 2D float16/bfloat16")
    _require(ids.dim() == 2 and ids.dtype == torch.int32, f"{op}: expert_ids is 2D int32")
    _require(ids.shape[0] == x.shape[0], f"{op}: expert_ids [BS, K] with x's BS")
    _require(a["quant_mode"] in (0, 2), f"{op}: quant_mode {a['quant_mode']} not modelled")
    _require(a["expert_token_nums_type"] in (0, 1), f"{op}: expert_token_nums_type is 0 or 1")
    group, world, rank, local = _ep_group(a, op)
    experts = a["moe_expert_num"]
    bs, hidden = x.shape
    top_k = ids.shape[1]
    host_ids = ids.detach().cpu().long()
    outside = (host_ids < 0) | (host_ids >= experts)
    _require(
        not bool(outside.any()),
        f"{op}: expert_ids hold {sorted(set(host_ids[outside].tolist()))[:8]}, experts no rank "
        f"of {a['group_ep']!r} holds ({experts} experts, ids in [0, {experts}))",
    )
    sizes = [int(s.item()) for s in _gather(torch.tensor([bs]), group, world)]
    if a["global_bs"] == 0:
        _require(
            len(set(sizes)) == 1,
            f"{op}: ranks' BS differ ({sizes}) and global_bs is 0 (pass BS_max x EP)",
        )
        global_bs = bs * world
    else:
        global_bs = a["global_bs"]
        _require(
            max(sizes) * world <= global_bs,
            f"{op}: global_bs {global_bs} < the largest BS {max(sizes)} x {world}",
        )
    remote = int((host_ids // local != rank).sum().item())
    row_bytes = hidden * (1 if a["quant_mode"] == 2 else x.element_size())
    TRAFFIC[f"{op} quant_mode={a['quant_mode']}"] += 1
    TRAFFIC[f"{op} bytes"] += remote * (row_bytes + (4 if a["quant_mode"] == 2 else 0))
    if a["quant_mode"] == 2:
        payload, scales = _quantize(x.detach().cpu())
        payload = payload.float()
    else:
        payload, scales = x.detach().cpu().float(), torch.zeros(bs)
    all_x = _gather_rows(payload, group, world)
    all_scales = _gather_rows(scales, group, world)
    all_ids = _gather_rows(host_ids, group, world)
    rows, row_scales, info, per_pair = [], [], [], []
    for e in range(local):
        expert = rank * local + e
        for src in range(world):
            token, slot = (all_ids[src] == expert).nonzero(as_tuple=True)
            rows.append(all_x[src][token])
            row_scales.append(all_scales[src][token])
            info.append(torch.stack([torch.full_like(token, src), token, slot], dim=1))
            per_pair.append(token.numel())
    received = sum(per_pair)
    capacity = global_bs * min(local, top_k)
    _require(received <= capacity, f"{op}: {received} rows exceed A = {capacity}")
    out_dtype = x.dtype if a["quant_mode"] == 0 else torch.int8
    expand_x = torch.full(
        (capacity, hidden),
        float("nan") if out_dtype in HALF_TYPES else UNDEFINED_INDEX,
        dtype=out_dtype,
    )
    dynamic_scales = torch.full((capacity,), float("nan"), dtype=torch.float32)
    assist = torch.full((max(bs * top_k, capacity * 128),), UNDEFINED_INDEX, dtype=torch.int32)
    if received:
        expand_x[:received] = torch.cat(rows).to(out_dtype)
        dynamic_scales[:received] = torch.cat(row_scales)
        assist[: received * INFO] = torch.cat(info).reshape(-1).to(torch.int32)
    counts = torch.tensor(per_pair, dtype=torch.int64).view(local, world)
    token_nums = counts.sum(1)
    if a["expert_token_nums_type"] == 0:
        token_nums = token_nums.cumsum(0)
    ep_recv_counts = counts.reshape(-1).cumsum(0).to(torch.int32)
    return (
        expand_x,
        dynamic_scales,
        assist,
        token_nums,
        ep_recv_counts,
        torch.zeros(a["tp_world_size"], dtype=torch.int32),
        torch.zeros(0, dtype=torch.float32),
    )


def _combine(a: dict[str, Any]) -> torch.Tensor:
    op = COMBINE
    _unmodelled(
        a,
        op,
        (
            "tp_send_counts",
            "x_active_mask",
            "expand_scales",
            "elastic_info",
            "ori_x",
            "const_expert_alpha_1",
            "const_expert_alpha_2",
            "const_expert_v",
            "performance_info",
        ),
    )
    _require(
        a["comm_quant_mode"] == 0, f"{op}: comm_quant_mode {a['comm_quant_mode']} not modelled"
    )
    rows, ids, assist = a["expand_x"], a["expert_ids"], a["assist_info_for_combine"]
    counts, weights, shared = a["ep_send_counts"], a["expert_scales"], a["shared_expert_x"]
    _require(rows.dim() == 2 and rows.dtype in HALF_TYPES, f"{op}: expand_x is 2D fp16/bf16")
    _require(ids.dim() == 2 and ids.dtype == torch.int32, f"{op}: expert_ids is 2D int32")
    _require(
        weights.dtype == torch.float32 and weights.shape == ids.shape,
        f"{op}: expert_scales is float32 [BS, K] like expert_ids",
    )
    _require(
        assist.dim() == 1 and assist.dtype == torch.int32,
        f"{op}: assist_info_for_combine is 1D int32 (dispatch's)",
    )
    group, world, rank, local = _ep_group(a, op)
    _require(
        counts.dtype == torch.int32 and counts.shape == (world * local,),
        f"{op}: ep_send_counts is dispatch's ep_recv_counts, int32 [{world * local}]",
    )
    bs = ids.shape[0]
    if shared is not None:
        _require(
            shared.shape == (bs, rows.shape[1]) and shared.dtype == rows.dtype,
            f"{op}: shared_expert_x is [BS, H] in expand_x's dtype",
        )
    sent = int(counts[-1].item())
    _require(
        sent <= rows.shape[0] and sent * INFO <= assist.shape[0],
        f"{op}: ep_send_counts say {sent} rows, expand_x has {rows.shape[0]}",
    )
    info = assist[: sent * INFO].detach().cpu().long().view(sent, INFO)
    TRAFFIC[f"{op} quant_mode=0"] += 1
    TRAFFIC[f"{op} bytes"] += int((info[:, 0] != rank).sum().item()) * rows.shape[1] * (
        rows.element_size()
    )
    all_rows = _gather_rows(rows[:sent].float(), group, world)
    all_info = _gather_rows(info, group, world)
    host_ids = ids.detach().cpu().long()
    out = torch.zeros(bs, rows.shape[1], dtype=torch.float32)
    host_weights = weights.detach().cpu()
    for src in range(world):
        mine = all_info[src][:, 0] == rank
        token, slot = all_info[src][mine, 1], all_info[src][mine, 2]
        _require(bool((token < bs).all()), f"{op}: rank {src} sends back tokens past BS {bs}")
        holder = host_ids[token, slot] // local
        _require(
            bool((holder == src).all()),
            f"{op}: expert_ids are not the ones dispatched (rank {src} computed slots whose "
            "expert it does not hold)",
        )
        out.index_add_(0, token, all_rows[src][mine] * host_weights[token, slot].unsqueeze(1))
    if shared is not None:
        out += shared.detach().cpu().float()
    return out.to(rows.dtype)


IMPLEMENTED = {DISPATCH: npu_moe_distribute_dispatch_v2, COMBINE: npu_moe_distribute_combine_v2}
