"""Golden tests: NpuMlaOps on the emulated torch_npu against the host's CpuMlaOps.

At the shapes the torch_npu MLA calls document (DeepSeek-V3's latent 512 and rope 64,
Q/K head size 192, V 128, 32 heads, block size 128, bf16); the emulator computes each
call from the docs (semantics_mla.py), so these check the adapter's layouts (BSND query
with query_rope, the latent plane as key and value, running-sum TND lengths).
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.mla import CpuMlaOps
from adapters.npu.mla import NpuMlaOps
from adapters.torch.attention_plan import build_attention_plan
from ascend_core.errors import UnsupportedFeatureError
from ports.mla import LatentCache
from ports.ops import AttentionPart
from support.torch_npu_emulator import make_torch_npu

HOST = CpuMlaOps()
HEADS, LATENT, ROPE, QK, V, BLOCK = 32, 512, 64, 192, 128, 128
BF = torch.bfloat16
# Bit for bit: both sides compute in float32 from the same bf16 inputs, sum in the same
# order (the docs state none; the emulator takes the host's) and round once at the end.
TOL = {"atol": 0.0, "rtol": 0.0}


def _parts(
    q_lens: list[int], seq_lens: list[int], table: torch.Tensor
) -> tuple[AttentionPart, AttentionPart]:
    """The step's one part, as the NPU's and as the host's MLA ops read it."""
    qsl = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    plans = [build_attention_plan(qsl, lens, table, needs=ops.plan_needs)
             for ops in (NpuMlaOps, CpuMlaOps)]
    assert all(len(plan.parts) == 1 for plan in plans)
    return plans[0].parts[0], plans[1].parts[0]


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu(tnpu) -> NpuMlaOps:
    return NpuMlaOps(tnpu)


def _filled(seq_lens: list[int], gen: torch.Generator) -> tuple[LatentCache, torch.Tensor]:
    """A cache whose sequences occupy shuffled blocks, written by the NPU path."""
    num_blocks = sum(-(-n // BLOCK) for n in seq_lens) + 2
    cache = LatentCache(
        torch.zeros(num_blocks, BLOCK, LATENT, dtype=BF),
        torch.zeros(num_blocks, BLOCK, ROPE, dtype=BF),
    )
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    table = torch.zeros(len(seq_lens), max(-(-n // BLOCK) for n in seq_lens), dtype=torch.int32)
    slots = []
    for b, n in enumerate(seq_lens):
        for i in range(-(-n // BLOCK)):
            table[b, i] = perm.pop()
        slots += [int(table[b, p // BLOCK]) * BLOCK + p % BLOCK for p in range(n)]
    return cache, table, torch.tensor(slots)  # type: ignore[return-value]


def test_write_then_gather_round_trips(npu, tnpu) -> None:
    g = torch.Generator().manual_seed(1)
    seq_lens = [3, 130]
    cache, table, slots = _filled(seq_lens, g)
    latent = torch.randn(slots.shape[0], LATENT, generator=g).to(BF)
    rope = torch.randn(slots.shape[0], 1, ROPE, generator=g).to(BF)
    npu.write_latent_cache(latent, rope, cache, slots)
    assert len(tnpu.calls_of("npu_scatter_nd_update_")) == 2
    on_npu, on_host = _parts(seq_lens, seq_lens, table)
    got = npu.gather_latent(cache, on_npu)
    assert torch.equal(got, torch.cat((latent, rope[:, 0]), dim=-1))
    assert torch.equal(got, HOST.gather_latent(cache, on_host))


def test_padding_slots_go_to_the_pad_block_in_fixed_shapes(npu, tnpu) -> None:
    """A batch padded to a graph size: slots of -1 past (and among) the real ones. The
    real rows land where the host puts them, the padding in vLLM's reserved block 0
    only, and the index has one row per slot whatever they hold (that no value is read
    back is checked under a capture: tests/integration/npu_graphs)."""
    from adapters.torch.paged_rows import PAD_BLOCK

    g = torch.Generator().manual_seed(4)
    blocks = 4
    cache, host_cache = (
        LatentCache(torch.zeros(blocks, BLOCK, LATENT, dtype=BF),
                    torch.zeros(blocks, BLOCK, ROPE, dtype=BF))
        for _ in range(2)
    )
    slots = torch.tensor([BLOCK + 3, -1, 3 * BLOCK, 2 * BLOCK + 127, -1, -1])
    latent = torch.randn(7, LATENT, generator=g).to(BF)  # a row past the slots: dropped
    rope = torch.randn(7, 1, ROPE, generator=g).to(BF)
    npu.write_latent_cache(latent, rope, cache, slots)
    HOST.write_latent_cache(latent, rope, host_cache, slots)
    real = [b for b in range(blocks) if b != PAD_BLOCK]
    assert torch.equal(cache.latent[real], host_cache.latent[real])
    assert torch.equal(cache.rope[real], host_cache.rope[real])
    assert host_cache.latent[PAD_BLOCK].abs().sum() == 0  # the host writes no padding
    assert PAD_BLOCK not in {int(s) // BLOCK for s in slots if s >= 0}
    (call, _) = tnpu.calls_of("npu_scatter_nd_update_")
    assert call["indices"].shape == (slots.shape[0], 1)  # one row each: a fixed shape


def test_prefill_in_tnd_matches_the_host(npu, tnpu) -> None:
    g = torch.Generator().manual_seed(2)
    q_lens, kv_lens = [5, 20, 2], [5, 37, 9]  # fresh, with cached context, two tokens
    q = torch.randn(sum(q_lens), HEADS, QK, generator=g).to(BF)
    k = torch.randn(sum(kv_lens), HEADS, QK, generator=g).to(BF)
    v = torch.randn(sum(kv_lens), HEADS, V, generator=g).to(BF)
    on_npu, on_host = _parts(q_lens, kv_lens, torch.zeros(3, 1, dtype=torch.int32))
    got = npu.prefill_attention(q, k, v, on_npu, QK**-0.5)
    want = HOST.prefill_attention(q, k, v, on_host, QK**-0.5)
    torch.testing.assert_close(got, want, **TOL)
    call = tnpu.calls_of("npu_fused_infer_attention_score")[0]
    assert call["input_layout"] == "TND" and call["sparse_mode"] == 3
    assert call["actual_seq_lengths"] == [5, 25, 27] and call["actual_seq_lengths_kv"] == [
        5,
        42,
        51,
    ]


def test_absorbed_decode_matches_the_host(npu, tnpu) -> None:
    g = torch.Generator().manual_seed(3)
    seq_lens = [1, 129, 40]
    cache, table, slots = _filled(seq_lens, g)
    npu.write_latent_cache(
        torch.randn(slots.shape[0], LATENT, generator=g).to(BF),
        torch.randn(slots.shape[0], ROPE, generator=g).to(BF),
        cache,
        slots,
    )
    q_latent = (torch.randn(3, HEADS, LATENT, generator=g) * 0.05).to(BF)
    q_rope = torch.randn(3, HEADS, ROPE, generator=g).to(BF)
    on_npu, on_host = _parts([1, 1, 1], seq_lens, table)
    got = npu.latent_decode(q_latent, q_rope, cache, on_npu, QK**-0.5)
    assert got.shape == (3, HEADS, LATENT) and got.dtype == BF
    want = HOST.latent_decode(q_latent, q_rope, cache, on_host, QK**-0.5)
    torch.testing.assert_close(got, want, **TOL)
    call = tnpu.calls_of("npu_fused_infer_attention_score")[0]
    assert call["key"] is call["value"] is cache.latent and call["key_rope"] is cache.rope
    assert (call["input_layout"], call["num_key_value_heads"]) == ("BSND", 1)


def test_block_local_planes_decode_as_the_host_reads_them(npu, tnpu) -> None:
    """A hybrid model's planes (Kimi-Linear): strided views of each row's [L | R] in one
    page per block. The op refuses them as its paged key (not contiguous); the NPU path
    gathers the table's blocks into contiguous planes, and the decode equals the host's
    over the same strided planes."""
    g = torch.Generator().manual_seed(5)
    seq_lens = [1, 129, 40]
    split, table, slots = _filled(seq_lens, g)
    pages = torch.zeros(split.latent.shape[0], BLOCK, LATENT + ROPE, dtype=BF)
    cache = LatentCache(pages[..., :LATENT], pages[..., LATENT:])
    assert not cache.latent.is_contiguous()
    npu.write_latent_cache(
        torch.randn(slots.shape[0], LATENT, generator=g).to(BF),
        torch.randn(slots.shape[0], ROPE, generator=g).to(BF),
        cache,
        slots,
    )
    q_latent = (torch.randn(3, HEADS, LATENT, generator=g) * 0.05).to(BF)
    q_rope = torch.randn(3, HEADS, ROPE, generator=g).to(BF)
    on_npu, on_host = _parts([1, 1, 1], seq_lens, table)
    with pytest.raises(ValueError, match="key not contiguous"):
        tnpu.npu_fused_infer_attention_score(
            q_latent.view(3, 1, HEADS, LATENT), cache.latent, cache.latent,
            query_rope=q_rope.view(3, 1, HEADS, ROPE), key_rope=cache.rope,
            block_table=on_npu.block_table, actual_seq_lengths_kv=seq_lens, num_heads=HEADS,
            scale=QK**-0.5, input_layout="BSND", num_key_value_heads=1, sparse_mode=0,
            block_size=BLOCK,
        )
    got = npu.latent_decode(q_latent, q_rope, cache, on_npu, QK**-0.5)
    want = HOST.latent_decode(q_latent, q_rope, cache, on_host, QK**-0.5)
    torch.testing.assert_close(got, want, **TOL)
    call = tnpu.calls_of("npu_fused_infer_attention_score")[-1]
    assert call["key"].is_contiguous() and call["key_rope"].is_contiguous()
    assert call["key"].shape[0] == table.numel()  # the table's blocks, renumbered


def test_check_accepts_deepseek_v3_shapes_and_refuses_the_tiny_models(npu) -> None:
    npu.check(HEADS, LATENT, ROPE, QK, V, BLOCK, "bfloat16")
    npu.check(128, 512, 64, 192, 128, 16, "bfloat16")  # DeepSeek-V3 at TP=1
    with pytest.raises(UnsupportedFeatureError) as err:
        npu.check(4, 32, 16, 48, 32, 16, "float32")  # the tiny DeepSeek test models
    what = err.value.what
    for part in ("kv_lora_rank 32", "4 query heads", "head size 48", "dtype float32"):
        assert part in what
    assert "VLLM_ASCEND_DEVICE=cpu" in err.value.hint
    HOST.check(4, 32, 16, 48, 32, 16, "float32")  # the host runs any shape
