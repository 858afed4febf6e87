"""Golden tests of the vision roles: NpuOps' M-RoPE and encoder attention on the emulated
torch_npu against the host's (CpuOps), and the emulator's refusals where the op docs put
them. The host's M-RoPE is checked against the section rule written out per frequency.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.ops import CpuOps
from adapters.npu.ops import NpuOps
from ascend_core.errors import ConfigError
from support.torch_npu_emulator import make_torch_npu

TOL = {torch.bfloat16: 2e-2, torch.float16: 2e-3, torch.float32: 1e-5}


def host() -> CpuOps:
    return CpuOps(native_attention=False, native_write=False)


@pytest.fixture
def tnpu():
    return make_torch_npu()


@pytest.fixture
def npu_ops(tnpu):
    return NpuOps(tnpu)


def close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    torch.testing.assert_close(actual.float(), expected.float(), atol=TOL[dtype], rtol=TOL[dtype])


def _cache(rotary_dim: int, max_pos: int, dtype: torch.dtype) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
    freqs = torch.outer(torch.arange(max_pos).float(), inv)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def _positions(tokens: int, max_pos: int, g: torch.Generator) -> torch.Tensor:
    """[3, T]: text tokens with equal rows, image tokens with distinct t/h/w."""
    pos = torch.randint(0, max_pos, (3, tokens), generator=g)
    pos[:, :2] = pos[0, :2]  # two text tokens
    return pos


def _by_the_rule(x, pos, cache, head_size, rotary_dim, section, interleaved):  # type: ignore[no-untyped-def]
    """Frequency by frequency: which position row each takes, then the neox rotation."""
    half = rotary_dim // 2
    out = x.float().clone().view(x.shape[0], -1, head_size)
    for i in range(x.shape[0]):
        for j in range(half):
            if interleaved:
                row = 1 if j % 3 == 1 and j < 3 * section[1] else (
                    2 if j % 3 == 2 and j < 3 * section[2] else 0)
            else:
                row = 0 if j < section[0] else (1 if j < section[0] + section[1] else 2)
            c, s = cache[pos[row, i], j].float(), cache[pos[row, i], half + j].float()
            a, b = out[i, :, j].clone(), out[i, :, half + j].clone()
            out[i, :, j], out[i, :, half + j] = a * c - b * s, b * c + a * s
    return out.view(x.shape)


@pytest.mark.parametrize("interleaved", [False, True])
def test_host_mrope_follows_the_section_rule(interleaved):
    g = torch.Generator().manual_seed(0)
    head_size, section, tokens = 32, (4, 6, 6), 5
    pos = _positions(tokens, 40, g)
    cache = _cache(32, 40, torch.float32)
    q = torch.randn(tokens, 2 * head_size, generator=g)
    k = torch.randn(tokens, head_size, generator=g)
    q_out, k_out = host().mrope(pos, q, k, cache, head_size, 32, section, interleaved, True)
    close(q_out, _by_the_rule(q, pos, cache, head_size, 32, section, interleaved), torch.float32)
    close(k_out, _by_the_rule(k, pos, cache, head_size, 32, section, interleaved), torch.float32)


@pytest.mark.parametrize(
    ("head_size", "rotary_dim", "section", "interleaved", "dtype", "op"),
    [
        (32, 32, (4, 6, 6), False, torch.bfloat16, "npu_mrope"),  # the tiny Qwen2.5-VL
        (128, 128, (16, 24, 24), False, torch.bfloat16, "npu_mrope"),  # Qwen2.5-VL-7B
        (64, 64, (8, 12, 12), False, torch.float32, "npu_mrope"),
        (32, 32, (4, 6, 6), True, torch.bfloat16, "npu_rotary_mul"),  # Qwen3-VL interleaved
        (128, 128, (24, 20, 20), True, torch.bfloat16, "npu_rotary_mul"),  # Qwen3-VL-8B
        (48, 48, (8, 8, 8), False, torch.bfloat16, "npu_rotary_mul"),  # 48: no multiple of 32
    ],
)
def test_mrope_matches_the_host(npu_ops, tnpu, head_size, rotary_dim, section, interleaved,
                                dtype, op):
    g = torch.Generator().manual_seed(1)
    tokens, max_pos = 11, 64
    pos = _positions(tokens, max_pos, g)
    q = torch.randn(tokens, 4 * head_size, generator=g).to(dtype)
    k = torch.randn(tokens, 2 * head_size, generator=g).to(dtype)
    args = (pos, q, k, _cache(rotary_dim, max_pos, dtype), head_size, rotary_dim, section,
            interleaved, True)
    q_out, k_out = npu_ops.mrope(*args)
    q_ref, k_ref = host().mrope(*args)
    assert q_out.shape == q.shape and k_out.shape == k.shape
    if op == "npu_mrope":  # the same float32 formula, one rounding: the same bits
        assert torch.equal(q_out, q_ref) and torch.equal(k_out, k_ref)
        (call,) = tnpu.calls_of("npu_mrope")
        assert call["mrope_section"] == list(section) and call["positions"].shape == (3, tokens)
        assert not tnpu.calls_of("npu_rotary_mul")
    else:
        close(q_out, q_ref, dtype)
        close(k_out, k_ref, dtype)
        assert len(tnpu.calls_of("npu_rotary_mul")) == 2 and not tnpu.calls_of("npu_mrope")


def test_npu_mrope_refuses_what_its_docs_refuse(tnpu):
    g = torch.Generator().manual_seed(2)
    pos = _positions(4, 16, g)
    q, k = torch.randn(4, 64).bfloat16(), torch.randn(4, 32).bfloat16()
    cache = _cache(32, 16, torch.bfloat16)
    with pytest.raises(ValueError, match="sum to rotary_dim / 2"):
        tnpu.npu_mrope(pos, q, k, cache, 32, mrope_section=[4, 6, 4])
    with pytest.raises(ValueError, match=r"\(3, T\)"):
        tnpu.npu_mrope(pos[0], q, k, cache, 32, mrope_section=[4, 6, 6])
    with pytest.raises(ValueError, match="position out of range"):
        tnpu.npu_mrope(pos + 16, q, k, cache, 32, mrope_section=[4, 6, 6])
    with pytest.raises(NotImplementedError, match="cache_mode"):
        tnpu.npu_mrope(pos, q, k, cache, 32, mrope_section=[4, 6, 6], cache_mode="interleave")


def _qkv(lens, hq, hk, d, dtype, seed):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    t = sum(lens)
    return (torch.randn(t, hq, d, generator=g).to(dtype),
            torch.randn(t, hk, d, generator=g).to(dtype),
            torch.randn(t, hk, d, generator=g).to(dtype))


@pytest.mark.parametrize(
    ("lens", "hq", "hk", "d"),
    [
        ((64, 16, 35), 2, 2, 32),  # three images of different sizes (the tiny towers)
        ((16, 16, 16, 16), 16, 16, 80),  # Qwen2.5-VL's windows, equal: no padding copy
        ((20, 0, 7), 4, 2, 64),  # a zero length (vLLM's padded offsets), GQA
    ],
)
def test_encoder_attention_matches_the_host(npu_ops, tnpu, lens, hq, hk, d):
    q, k, v = _qkv(lens, hq, hk, d, torch.bfloat16, 3)
    out = npu_ops.encoder_attention(q, k, v, lens, d**-0.5)
    ref = host().encoder_attention(q, k, v, lens, d**-0.5)
    assert out.shape == q.shape and not out.isnan().any()
    close(out, ref, torch.bfloat16)
    (call,) = tnpu.calls_of("npu_fused_infer_attention_score")
    real = [n for n in lens if n]
    assert call["input_layout"] == "BSND" and call["block_table"] is None
    assert call["query"].shape == (len(real), max(real), hq, d)
    assert call["actual_seq_lengths"] == call["actual_seq_lengths_kv"] == real
    assert call["sparse_mode"] == 0 and call["atten_mask"] is None


def test_encoder_attention_keeps_images_apart():
    """A token's output depends on its own image only (the host twin, the reference)."""
    q, k, v = _qkv((6, 5), 2, 2, 16, torch.float32, 4)
    together = host().encoder_attention(q, k, v, (6, 5), 0.25)
    alone = host().encoder_attention(q[:6], k[:6], v[:6], (6,), 0.25)
    close(together[:6], alone, torch.float32)
    whole = host().encoder_attention(q, k, v, (11,), 0.25)
    assert not torch.allclose(whole[:6], alone)


def test_the_encoder_layout_refuses_a_vit_head_size(tnpu):
    """TND without a cache is an MLA prefill's shape in the docs (D 192): a ViT's 80 is
    refused, which is why the adapter pads to BSND."""
    q, k, v = _qkv((16, 16), 16, 16, 80, torch.bfloat16, 5)
    with pytest.raises(ValueError, match="192"):
        tnpu.npu_fused_infer_attention_score(
            q, k, v, actual_seq_lengths=[16, 32], actual_seq_lengths_kv=[16, 32],
            num_heads=16, input_layout="TND", scale=0.1)


def test_dense_bsnd_refuses_what_its_docs_refuse(tnpu):
    g = torch.Generator().manual_seed(6)
    q = torch.randn(1, 4, 2, 136, generator=g).bfloat16()  # 272 bytes: not 32-aligned, > 128
    with pytest.raises(ValueError, match="32-byte"):
        tnpu.npu_fused_infer_attention_score(q, q, q, num_heads=2, input_layout="BSND")
    q = torch.randn(2, 4, 2, 32, generator=g).bfloat16()
    with pytest.raises(ValueError, match="actual_seq_lengths"):
        tnpu.npu_fused_infer_attention_score(
            q, q, q, num_heads=2, input_layout="BSND", actual_seq_lengths=[4, 5])
    with pytest.raises(ValueError, match="query dtype"):
        tnpu.npu_fused_infer_attention_score(q.float(), q.float(), q.float(), num_heads=2,
                                             input_layout="BSND")


def test_float32_tower_attention_is_refused_with_a_hint(npu_ops):
    q, k, v = _qkv((4,), 2, 2, 16, torch.float32, 7)
    with pytest.raises(ConfigError, match="bfloat16"):
        npu_ops.encoder_attention(q, k, v, (4,), 0.25)
