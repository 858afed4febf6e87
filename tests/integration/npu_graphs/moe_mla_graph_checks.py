"""Checks that the NPU adapter's MoE layer and MLA cache write are captured in an NPU graph
on the emulated device and replay the eager result; run in a fresh process by
test_moe_mla_graphs.py, printing one JSON line of {check: "ok" or the error}.

A capture refuses a device-to-host read (the emulator names the op), so a capture that
completes shows the layer reads nothing back; a replay after the inputs change in place
shows its shapes and indices do not depend on the captured step's routing or slots.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests

import torch

from adapters.npu.mla import NpuMlaOps
from adapters.npu.moe import NpuMoeOps
from adapters.npu.quant_moe import NpuQuantMoeOps
from adapters.npu.runtime import NpuRuntime
from adapters.torch.attention_plan import build_attention_plan
from adapters.torch.paged_rows import PAD_BLOCK
from ports.mla import LatentCache
from ports.moe import Routing, Scoring
from support.emulated_npu_device import counters, reset_counters
from support.torch_npu_emulator import make_torch_npu

TNPU = make_torch_npu()
NPU = TNPU.npu
NPU.device()  # registers the emulated device
MOE = NpuMoeOps(TNPU)
BF = torch.bfloat16
QWEN3 = Routing(top_k=2, scoring=Scoring.SOFTMAX, renormalize=True)
V3 = Routing(top_k=2, scoring=Scoring.SIGMOID, renormalize=True, num_expert_group=4,
             topk_group=2, routed_scaling_factor=2.5)
TOKENS, HIDDEN, INTER, EXPERTS = 8, 32, 16, 16
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def captured(body: Callable[[], torch.Tensor]) -> tuple[object, torch.Tensor]:
    """body captured in a fresh graph; the graph and the output it writes at each replay."""
    graph = NPU.NPUGraph()
    body()  # warm up eagerly first, as vLLM does before it captures
    reset_counters()
    with NPU.graph(graph):
        out = body()
    assert counters()["scalar_reads"] == 0 and counters()["d2h_copies"] == 0, counters()
    return graph, out


def moe_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, HIDDEN, generator=g).to(BF)
    logits = (2 * torch.randn(TOKENS, EXPERTS, generator=g)).to(BF)
    return x.to("npu"), logits.to("npu")


def moe_weights(local: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(99)
    w13 = (torch.randn(local, 2 * INTER, HIDDEN, generator=g) / HIDDEN**0.5).to(BF)
    w2 = (torch.randn(local, HIDDEN, INTER, generator=g) / INTER**0.5).to(BF)
    bias = 0.3 * torch.randn(EXPERTS, generator=g)
    return w13.to("npu"), w2.to("npu"), bias.to("npu")


def moe_layer(routing: Routing, held: list[int] | None) -> Callable[..., torch.Tensor]:
    """One MoE layer as AscendMoeMethod runs it: route, map to local experts, experts."""
    w13, w2, bias = moe_weights(EXPERTS if held is None else len(held))
    expert_map = None
    if held is not None:
        expert_map = torch.full((EXPERTS,), -1, dtype=torch.int32)
        expert_map[held] = torch.arange(len(held), dtype=torch.int32)
        expert_map = expert_map.to("npu")
    correction = bias if routing.scoring is Scoring.SIGMOID else None

    def run(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        weights, ids = MOE.route(logits, routing, correction)
        local = ids if expert_map is None else (
            expert_map.index_select(0, ids.reshape(-1).long()).view_as(ids))
        return MOE.experts(x, local, weights, w13, w2)

    return run


def replays_follow_new_routing(routing: Routing, held: list[int] | None) -> None:
    layer = moe_layer(routing, held)
    x, logits = moe_inputs(0)
    graph, out = captured(lambda: layer(x, logits))
    for seed in (1, 2, 3):  # other tokens, other experts chosen, other group sizes
        new_x, new_logits = moe_inputs(seed)
        x.copy_(new_x)
        logits.copy_(new_logits)
        reset_counters()
        graph.replay()  # type: ignore[attr-defined]
        assert counters()["graph_replays"] == 1 and counters()["fallback_ops"] == 0
        want = layer(new_x, new_logits).cpu()
        got = out.cpu()
        assert not got.isnan().any(), "a padding row reached the combine"
        assert torch.equal(got, want), (got - want).abs().max()


@check
def a_softmax_moe_layer_is_captured_and_replays_the_eager_result() -> None:
    replays_follow_new_routing(QWEN3, None)


@check
def a_grouped_sigmoid_moe_layer_is_captured_and_replays_the_eager_result() -> None:
    replays_follow_new_routing(V3, None)


@check
def an_expert_parallel_moe_layer_with_padding_rows_is_captured() -> None:
    replays_follow_new_routing(QWEN3, [1, 3, 4, 6, 9, 10, 12, 15])


@check
def the_quantized_experts_are_captured() -> None:
    quant = NpuQuantMoeOps(TNPU)
    g = torch.Generator().manual_seed(7)
    local = EXPERTS // 2
    w13 = torch.randint(-127, 128, (local, 2 * INTER, HIDDEN), generator=g, dtype=torch.int8)
    w2 = torch.randint(-127, 128, (local, HIDDEN, INTER), generator=g, dtype=torch.int8)
    w13_t, w2_t = (w.to("npu") for w in quant.prepare_weights(w13, w2))
    s13 = (torch.rand(local, 2 * INTER, generator=g) / 500).to("npu")
    s2 = (torch.rand(local, HIDDEN, generator=g) / 500).to("npu")
    expert_map = torch.full((EXPERTS,), -1, dtype=torch.int32)
    expert_map[::2] = torch.arange(local, dtype=torch.int32)
    expert_map = expert_map.to("npu")

    def layer(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        weights, ids = MOE.route(logits, QWEN3)
        local_ids = expert_map.index_select(0, ids.reshape(-1).long()).view_as(ids)
        rows, perm = MOE.permute(x, local_ids, local)
        out_rows = quant.grouped_mlp_w8a8_dynamic(rows, perm.group_sizes, w13_t, s13, w2_t, s2)
        return MOE.unpermute(out_rows, perm, weights)

    x, logits = moe_inputs(0)
    graph, out = captured(lambda: layer(x, logits))
    new_x, new_logits = moe_inputs(5)
    x.copy_(new_x)
    logits.copy_(new_logits)
    graph.replay()  # type: ignore[attr-defined]
    want = layer(new_x, new_logits).cpu()
    assert not out.cpu().isnan().any() and torch.equal(out.cpu(), want)


@check
def the_mla_latent_write_with_padding_slots_is_captured() -> None:
    mla = NpuMlaOps(TNPU)
    block, blocks, latent_dim, rope_dim = 16, 6, 32, 8
    cache = LatentCache(torch.zeros(blocks, block, latent_dim, dtype=BF, device="npu"),
                        torch.zeros(blocks, block, rope_dim, dtype=BF, device="npu"))
    slots = torch.tensor([block + 2, 3 * block + 5, -1, -1], device="npu")  # padded to 4
    latent = torch.zeros(4, latent_dim, dtype=BF, device="npu")
    rope = torch.zeros(4, 1, rope_dim, dtype=BF, device="npu")
    graph, _ = captured(lambda: mla.write_latent_cache(latent, rope, cache, slots) or latent)
    g = torch.Generator().manual_seed(3)
    new_latent = torch.randn(4, latent_dim, generator=g).to(BF)
    new_rope = torch.randn(4, 1, rope_dim, generator=g).to(BF)
    latent.copy_(new_latent)
    rope.copy_(new_rope)
    slots.copy_(torch.tensor([5 * block + 1, 2 * block, 4 * block + 15, -1]))
    for plane in (cache.latent, cache.rope):
        plane.zero_()
    graph.replay()  # type: ignore[attr-defined]
    got = cache.latent.cpu()
    for row, slot in enumerate((5 * block + 1, 2 * block, 4 * block + 15)):
        assert torch.equal(got[slot // block, slot % block], new_latent[row]), slot
        assert torch.equal(cache.rope.cpu()[slot // block, slot % block], new_rope[row, 0])
    written = {(b, o) for b in range(blocks) for o in range(block) if got[b, o].any()}
    assert written - {(PAD_BLOCK, 0)} == {(5, 1), (2, 0), (4, 15)}, written


@check
def the_mla_latent_decode_takes_new_lengths_only_through_the_update() -> None:
    """A captured latent decode (torch_npu's MLA shapes: L 512, R 64, 32 heads, block
    128) replays with the lengths MlaOps.graph_host_arguments gives NPUGraph.update, and
    with its captured ones when the graph was not captured updatable."""
    mla, graphs = NpuMlaOps(TNPU), NpuRuntime(TNPU).graphs()
    assert graphs is not None
    heads, block, latent_dim, rope_dim = 32, 128, 512, 64
    g = torch.Generator().manual_seed(11)
    cache = LatentCache(torch.randn(4, block, latent_dim, generator=g).to(BF).to("npu"),
                        torch.randn(4, block, rope_dim, generator=g).to(BF).to("npu"))
    q_latent = torch.randn(2, heads, latent_dim, generator=g).to(BF).to("npu")
    q_rope = torch.randn(2, heads, rope_dim, generator=g).to(BF).to("npu")
    table = torch.tensor([[1, 2], [3, 0]], dtype=torch.int32, device="npu")

    def plan(lens: list[int]):  # type: ignore[no-untyped-def]
        return build_attention_plan(torch.arange(3), torch.tensor(lens), table, 2)

    captured_lens, new_lens = [200, 60], [150, 37]

    def decode(lens: list[int]) -> torch.Tensor:
        part = plan(lens).decode
        assert part is not None
        return mla.latent_decode(q_latent, q_rope, cache, part, 0.1)

    want = decode(new_lens).cpu()
    for updatable in (True, False):
        graph = graphs.new_graph()
        with graphs.capture(graph, graphs.pool(), graphs.capture_stream(), updatable=updatable):
            out = decode(captured_lens)
        step = plan(new_lens)  # built before the replay, as the runner builds it
        graphs.replay(graph)
        if updatable:  # as NpuGraphWrapper: the update releases the replay's wait
            arguments = mla.graph_host_arguments(step)
            assert arguments == [{"actual_seq_lengths_kv": new_lens}], arguments
            graphs.update(graph, arguments)
            assert torch.equal(out.cpu(), want)
        else:  # the lengths of its capture: other rows attended
            assert not torch.allclose(out.cpu().float(), want.float())


def main() -> None:
    results: dict[str, str] = {}
    wanted = sys.argv[1:] or list(CHECKS)  # check names to run (default: all)
    for name, fn in ((n, CHECKS[n]) for n in wanted):
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=6)
    print("CHECKS " + json.dumps(results))


if __name__ == "__main__":
    main()
