"""Static W8A8 activations: the host quantizes exactly as npu_quantize does.

The layer holds 1 / input_scale and input_offset in the params dtype
(adapters.torch.static_quant, as vllm-ascend holds them for npu_quantize, whose scales take
the input's dtype); x * inv_scale + offset is then taken in float32 and rounded half to
even on both devices. A float32 reciprocal (1 / input_scale kept in float32) is another
correct float32 path: on bf16 activations the two part where x / input_scale + offset
falls between the two products, next to a rounding boundary. The host follows the NPU's
path, so it equals the emulated op everywhere, parting points included.
"""

from __future__ import annotations

import pytest
import torch

from adapters.cpu.quant import CpuQuantOps
from adapters.npu.quant import NpuQuantOps
from adapters.torch.static_quant import static_activation_params
from support.torch_npu_emulator import make_torch_npu

F32, BF16 = torch.float32, torch.bfloat16
HOST = CpuQuantOps()
SCALE, OFFSET = torch.tensor([0.0173]), torch.tensor([3.0])  # a checkpoint's float32 values


def _bf16_grid() -> torch.Tensor:
    """Every bf16 value in [-2, 2] (the activations a layer may see), as one row."""
    bits = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(BF16)
    values = bits[torch.isfinite(bits.float()) & (bits.float().abs() <= 2.0)]
    return values.reshape(1, -1)


def test_the_reciprocal_is_held_in_the_params_dtype() -> None:
    inv, off = static_activation_params(SCALE, OFFSET, BF16)
    assert inv.dtype == off.dtype == BF16 and inv.shape == off.shape == (1,)
    assert float(inv) == float((1.0 / SCALE.to(BF16).float()).to(BF16))
    assert float(inv) != float(1.0 / SCALE)  # bf16 holds fewer bits than the float32 value
    assert float(off) == 3.0
    inv32, off32 = static_activation_params(SCALE, OFFSET, F32)
    assert inv32.dtype == F32 and float(inv32) == float(1.0 / SCALE)  # float32 models: as is
    assert float(off32) == 3.0


def test_npu_quantize_refuses_scales_in_another_dtype_than_the_input() -> None:
    npu = NpuQuantOps(make_torch_npu())
    x = torch.ones(2, 8, dtype=BF16)
    with pytest.raises(ValueError, match=r"scales dtype torch\.float32 is not the input"):
        npu.quantize_static(x, 1.0 / SCALE, OFFSET)


def test_the_host_equals_npu_quantize_where_a_float32_reciprocal_parts() -> None:
    x = _bf16_grid()
    inv, off = static_activation_params(SCALE, OFFSET, BF16)
    host = HOST.quantize_static(x, inv, off)
    npu = NpuQuantOps(make_torch_npu()).quantize_static(x, inv, off)
    assert torch.equal(host, npu)  # every bf16 value in the range, bit for bit

    ours = x.float() * inv.float() + off.float()  # both devices' float32 values
    other = x.float() * (1.0 / SCALE) + OFFSET  # the float32 reciprocal's
    other_q = torch.round(other).clamp(-128, 127).to(torch.int8)
    parted = (other_q != host).nonzero(as_tuple=True)
    assert len(parted[1]) > 0  # the two float32 paths do part on some activations
    a, b = ours[parted], other[parted]
    # Each parting is a near-tie: one step apart, a rounding boundary (k + 0.5) between
    # the two float32 values, which differ by |x| times the reciprocals' difference.
    assert torch.equal((host[parted].int() - other_q[parted].int()).abs(),
                       torch.ones_like(a, dtype=torch.int32))
    boundary = torch.floor(torch.minimum(a, b)) + 0.5
    assert bool(((torch.minimum(a, b) <= boundary) & (boundary <= torch.maximum(a, b))).all())
    bound = x.float()[parted].abs() * abs(float(inv.float() - 1.0 / SCALE)) * 1.01 + 1e-6
    assert bool(((a - b).abs() <= bound).all())
    assert len(parted[1]) < x.numel() // 100  # rare: near-ties only
