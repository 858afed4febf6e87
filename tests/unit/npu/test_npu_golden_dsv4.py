"""Golden tests: DeepSeek-V4's uses of the device ports (the plugin's model room,
adapters/vllm/models/deepseek_v4), host twin against the NPU adapter on the emulated
torch_npu, and the host twin against V4's formulas spelled out here (what the room computed
in plain torch before it used the ports, and what transformers computes).

- rope (rope.rotate): each head's trailing rope slice as a GPT-J-style head of its own
  through Ops.rotary_embedding, cos | sin of the call's positions as the cache, an empty
  key; sign -1 rotates back; in float32 whatever x's dtype (npu_mrope takes a 16-channel
  rope in float32), so the NPU's result is the host's bit for bit.
- the lightning indexer (compressor.indexer_top_k): the compressed keys as a paged cache of
  128-row blocks, every token's visible row count its length, 1 / sqrt(Di) folded into the
  head weights; the same rows chosen on both devices, bit for bit in bf16.
- norms (norms.rms_norm) without a weight: a ones weight.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.ops import CpuOps
from adapters.cpu.sparse_mla import CpuSparseMlaOps
from adapters.npu.ops import NpuOps
from adapters.npu.sparse_mla import NpuSparseMlaOps
from adapters.vllm.models.deepseek_v4.compressor import indexer_top_k, visible_rows
from adapters.vllm.models.deepseek_v4.norms import rms_norm
from adapters.vllm.models.deepseek_v4.rope import rotate
from support.torch_npu_emulator import make_torch_npu

F32, BF = torch.float32, torch.bfloat16
FREQS = 1.0 / (10000 ** (torch.arange(0, 16, 2, dtype=F32) / 16))  # the tiny V4: rope 16


@pytest.fixture
def tnpu():
    return make_torch_npu()


def _rotate_spelled_out(x: torch.Tensor, positions: torch.Tensor, sign: float) -> torch.Tensor:
    angles = positions.to(F32)[:, None] * FREQS[None, :]
    cos = angles.cos().repeat_interleave(2, dim=-1)[:, None]
    sin = (sign * angles.sin()).repeat_interleave(2, dim=-1)[:, None]
    width = cos.shape[-1]
    pairs = x[..., -width:].float()
    swapped = torch.stack((-pairs[..., 1::2], pairs[..., 0::2]), dim=-1).flatten(-2)
    return torch.cat([x[..., :-width], (pairs * cos + swapped * sin).to(x.dtype)], dim=-1)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("dtype", [F32, BF])
def test_rope_through_the_ops_port(tnpu, dtype: torch.dtype, sign: float) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(9, 4, 64, generator=g).to(dtype)
    positions = torch.arange(250, 259)
    host = rotate(CpuOps(), x, positions, FREQS, sign)
    torch.testing.assert_close(host, _rotate_spelled_out(x, positions, sign), atol=0, rtol=0)
    npu = rotate(NpuOps(tnpu), x, positions, FREQS, sign)
    assert torch.equal(npu[..., :-16], x[..., :-16])  # the leading channels pass through
    torch.testing.assert_close(npu, host, atol=0, rtol=0)
    (call,) = tnpu.calls_of("npu_mrope")
    assert call["rotary_mode"] == "interleave" and call["query"].dtype == F32


def test_norm_without_a_weight_is_a_ones_weight(tnpu) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(7, 4, 64, generator=g)
    want = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    torch.testing.assert_close(rms_norm(CpuOps(), x, None, 1e-6), want, atol=0, rtol=0)
    bf = x.to(BF)
    torch.testing.assert_close(rms_norm(NpuOps(tnpu), bf, None, 1e-6),
                               rms_norm(CpuOps(), bf, None, 1e-6), atol=0, rtol=0)


def _indexer_spelled_out(q: torch.Tensor, keys: torch.Tensor, w: torch.Tensor,
                         positions: torch.Tensor, rate: int, top_k: int) -> torch.Tensor:
    """V4's indexer as transformers writes it: relu(q . k) / sqrt(Di), weighted head sum,
    top-k of the visible rows, as a [T, W] mask."""
    windows = keys.shape[0]
    scores = torch.einsum("thd,wd->thw", q.float(), keys.float()).relu() * q.shape[-1] ** -0.5
    scores = (scores * w.float().unsqueeze(-1)).sum(dim=1)
    visible = visible_rows(positions, rate)
    future = torch.arange(windows)[None, :] >= visible[:, None]
    picks = scores.masked_fill(future, float("-inf")).topk(min(top_k, windows), dim=-1).indices
    valid = picks < visible[:, None]
    return (torch.nn.functional.one_hot(picks, windows).bool() & valid.unsqueeze(-1)).any(1)


@pytest.mark.parametrize(("length", "new"), [(23, 23), (600, 40), (600, 1)])
def test_indexer_top_k_through_the_sparse_mla_port(tnpu, length: int, new: int) -> None:
    """A prefill shorter than the top-k's reach (rows 0..5, top 8), a chunk over two key
    blocks (150 rows), a decode."""
    g = torch.Generator().manual_seed(length + new)
    rate, top_k, heads, dim = 4, 8, 4, 32
    keys = torch.randn(length // rate, dim, generator=g)
    q = torch.randn(new, heads, dim, generator=g)
    w = torch.randn(new, heads, generator=g) * heads**-0.5
    positions = torch.arange(length - new, length)
    host = indexer_top_k(CpuSparseMlaOps(), q, keys, w, positions, rate, top_k)
    want = _indexer_spelled_out(q, keys, w, positions, rate, top_k)
    assert torch.equal(host, want)
    assert (host.sum(-1) == visible_rows(positions, rate).clamp(max=top_k)).all()
    bf_host = indexer_top_k(CpuSparseMlaOps(), q.to(BF), keys.to(BF), w.to(BF), positions,
                            rate, top_k)
    bf_npu = indexer_top_k(NpuSparseMlaOps(tnpu), q.to(BF), keys.to(BF), w.to(BF), positions,
                           rate, top_k)
    assert torch.equal(bf_npu, bf_host)
    (call,) = tnpu.calls_of("npu_lightning_indexer")
    assert call["sparse_count"] == top_k and call["key"].shape[1:] == (128, 1, dim)


def _sink_attention_spelled_out(q: torch.Tensor, rows: torch.Tensor, visible: torch.Tensor,
                                sinks: torch.Tensor, scale: float) -> torch.Tensor:
    """V4's attention as transformers writes it, in float64: the sink a logit per head in
    the softmax's denominator, without a value."""
    logits = torch.einsum("thd,rd->thr", q.double(), rows.double()) * scale
    logits = logits.masked_fill(~visible[:, None, :], float("-inf"))
    sink = sinks.double().view(1, -1, 1).expand(q.shape[0], -1, 1)
    probs = torch.cat([logits, sink], dim=-1).softmax(dim=-1)[..., :-1]
    return torch.einsum("thr,rd->thd", probs, rows.double())


def _v4_rows(tokens: int, count: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Query [T, 4, 64], rows [R, 64], a window-and-picks-like mask, sinks of std 1."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(tokens, 4, 64, generator=g)
    rows = torch.randn(count, 64, generator=g)
    visible = torch.rand(tokens, count, generator=g) < 0.5
    visible[torch.arange(tokens), torch.randint(0, count, (tokens,), generator=g)] = True
    return q, rows, visible, torch.randn(4, generator=g)


@pytest.mark.parametrize(("tokens", "count"), [(1, 17), (9, 40), (64, 80)])
def test_sink_attention_through_the_sparse_mla_port(tnpu, tokens: int, count: int) -> None:
    """A decode, a short prefill and a chunk: the host twin is V4's formula (float32), the
    NPU's (npu_sparse_flash_attention's LSE, then npu_attention_update with the sinks as
    a zero-output part) the host's in bf16 within bf16's rounding."""
    q, rows, visible, sinks = _v4_rows(tokens, count, tokens + count)
    scale = 64**-0.5
    want = _sink_attention_spelled_out(q, rows, visible, sinks, scale)
    host = CpuSparseMlaOps().sink_attention(q, rows, visible, sinks, scale)
    torch.testing.assert_close(host.double(), want, atol=1e-5, rtol=1e-5)
    bf_host = CpuSparseMlaOps().sink_attention(q.to(BF), rows.to(BF), visible, sinks, scale)
    bf_npu = NpuSparseMlaOps(tnpu).sink_attention(q.to(BF), rows.to(BF), visible, sinks, scale)
    assert bf_npu.shape == (tokens, 4, 64) and bf_npu.dtype == BF
    torch.testing.assert_close(bf_npu.double(), want, atol=1.2e-2, rtol=1e-2)
    torch.testing.assert_close(bf_npu.float(), bf_host.float(), atol=1.6e-2, rtol=0)  # 2 ulps
    (attn,) = tnpu.calls_of("npu_sparse_flash_attention")
    assert (attn["layout_query"], attn["layout_kv"], attn["return_softmax_lse"]) == (
        "TND", "TND", True)
    assert attn["sinks"] is None and attn["attention_mode"] == 2 and attn["sparse_mode"] == 0
    assert attn["sparse_indices"].shape == (tokens, 1, count)
    (update,) = tnpu.calls_of("npu_attention_update")
    assert len(update["lse"]) == 2 and update["update_type"] == 0


def test_sink_attention_on_the_npu_refuses_float32(tnpu) -> None:
    from ascend_core.errors import UnsupportedFeatureError

    q, rows, visible, sinks = _v4_rows(3, 10, 0)
    with pytest.raises(UnsupportedFeatureError, match="float16 or bfloat16"):
        NpuSparseMlaOps(tnpu).sink_attention(q, rows, visible, sinks, 0.125)
    assert not tnpu.calls_of("npu_sparse_flash_attention")
