"""What the int4 schemes' tensors take in device memory once loaded, per device.

Each device repacks or dequantizes int4 weights at load, so their files' widths are not
what it holds:

- compressed-tensors W4A16 (`weight_packed` int32, eight int4 values each; `weight_scale`
  in the params dtype; packed `weight_zero_point`; `weight_shape`):
  host (CpuInt4WeightOps, CpuInt4ExpertOps): every weight dequantized to the model dtype;
  a linear keeps its scales (model dtype) and shape and drops its zero points, experts
  drop all three. NPU (NpuInt4WeightOps, NpuInt4ExpertOps): int4 packs
  (npu_convert_weight_to_int4pack: eight values an int32, the stored bytes), scales and
  offsets (-zero point, unpacked, one per group and output) in the model dtype; a
  linear keeps its shape, experts drop it.
- ModelSlim W4A8_DYNAMIC (`weight` int8 holding int4 pairs, `weight_scale` and
  `weight_offset` float32 [out, 1], `scale_bias` float32 [out, 1] or [out, 16]):
  host (CpuW4A8LinearOps, CpuQuantMoeOps): the int4 values one per int8, twice the
  stored bytes; NPU (NpuW4A8LinearOps, NpuQuantMoeOps): int4 packs, the stored bytes.
  Scales and offsets float32 on both; the NPU adds the scales' int64 bit patterns (the
  A8W4 scale operand: a linear's replace its float32 scale, experts' sit beside it).
  A linear's scale_bias is summed to one float32 column per output (the rank's slices);
  experts keep theirs as loaded and add down_proj's per-rank sum [out] beside it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from attrs import field, frozen

from ports.model_files import TensorHeader


class Int4Holder(enum.Enum):
    """The device whose load-time layout the int4 tensors are counted in."""

    HOST = "host"
    NPU = "NPU"


@frozen
class HeldInt4:
    """Bytes held per tensor name of the int4 layers' tensors whose held size is not
    their stored one (the rest count as stored), and why."""

    bytes_of: Mapping[str, int] = field(factory=lambda: MappingProxyType({}))
    reasons: tuple[str, ...] = ()
    matrices: frozenset[str] = frozenset()  # the int4 weight matrices' names


_PACK = 8  # int4 values per int32 (compressed-tensors' pack and the NPU's int4pack)
_F32 = 4
_I64 = 8
_ROW_SLICES = 16  # a row-parallel W4A8 scale_bias's columns
_W4A16 = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")
_W4A8 = ("weight", "weight_scale", "weight_offset", "scale_bias")


def int4_held(
    headers: Iterable[TensorHeader], holder: Int4Holder, float_bytes: int, model_dtype: str
) -> HeldInt4:
    """The held bytes of each tensor of the W4A16 (`weight_packed`) and W4A8_DYNAMIC
    (int8 `weight` beside a `scale_bias`) layers in `headers`, as `holder` holds them."""
    by_stem: dict[str, dict[str, TensorHeader]] = {}
    for h in headers:
        stem, _, leaf = h.name.rpartition(".")
        by_stem.setdefault(stem, {})[leaf] = h
    held: dict[str, int] = {}
    matrices: set[str] = set()
    kinds: set[tuple[str, bool]] = set()
    for stem, leaves in by_stem.items():
        experts = ".experts." in f"{stem}."
        if "weight_packed" in leaves:
            kinds.add(("w4a16", experts))
            matrices.add(leaves["weight_packed"].name)
            for leaf in _W4A16:
                size = _w4a16(leaves[leaf], leaf, holder, experts, float_bytes) if (
                    leaf in leaves) else None
                if size is not None:
                    held[leaves[leaf].name] = size
        elif "scale_bias" in leaves and leaves.get("weight", _NONE).dtype.upper() == "I8":
            kinds.add(("w4a8", experts))
            matrices.add(leaves["weight"].name)
            for leaf in _W4A8:
                size = _w4a8(leaves[leaf], leaf, holder, experts) if leaf in leaves else None
                if size is not None:
                    held[leaves[leaf].name] = size
    reasons = tuple(_REASONS[holder][kind].format(dtype=model_dtype) for kind in sorted(kinds))
    return HeldInt4(MappingProxyType(held), reasons, frozenset(matrices))


_NONE = TensorHeader("", "", ())


def _w4a16(h: TensorHeader, leaf: str, holder: Int4Holder, experts: bool,
           float_bytes: int) -> int | None:
    """None: held as stored."""
    numel = math.prod(h.shape)
    host = holder is Int4Holder.HOST
    if leaf == "weight_packed":
        return numel * _PACK * float_bytes if host else None
    if leaf == "weight_scale":
        return 0 if host and experts else numel * float_bytes
    if leaf == "weight_zero_point":  # packed 8 per int32 along the outputs
        return 0 if host else numel * _PACK * float_bytes
    return 0 if experts else None  # weight_shape


def _w4a8(h: TensorHeader, leaf: str, holder: Int4Holder, experts: bool) -> int | None:
    """None: held as stored."""
    numel = math.prod(h.shape)
    host = holder is Int4Holder.HOST
    if leaf == "weight":  # int4 pairs: two values a byte
        return 2 * numel if host else None
    if leaf == "weight_scale":
        if host:
            return numel * _F32
        return numel * (_F32 + _I64) if experts else numel * _I64
    if leaf == "weight_offset":
        return numel * _F32
    out = h.shape[0] if h.shape else 1  # scale_bias [out, 1] or [out, 16]
    if not experts:
        return out * _F32
    row = len(h.shape) > 1 and h.shape[-1] == _ROW_SLICES
    return numel * _F32 + (out * _F32 if row else 0)


_REASONS: Mapping[Int4Holder, Mapping[tuple[str, bool], str]] = MappingProxyType({
    Int4Holder.HOST: MappingProxyType({
        ("w4a16", False): "W4A16 linears dequantized at load to {dtype} (8 weights a "
                          "packed int32), their scales at {dtype}, zero points dropped",
        ("w4a16", True): "W4A16 experts dequantized at load to {dtype} (8 weights a "
                         "packed int32), their scales, zero points and shapes dropped",
        ("w4a8", False): "W4A8_DYNAMIC linears' int4 values held one per int8 (2x the "
                         "packed bytes), scale_bias summed to one float32 column",
        ("w4a8", True): "W4A8_DYNAMIC experts' int4 values held one per int8 (2x the "
                        "packed bytes), scale_bias float32 as loaded plus down_proj's "
                        "per-rank sum",
    }),
    Int4Holder.NPU: MappingProxyType({
        ("w4a16", False): "W4A16 linears as int4 packs (the stored bytes), scales and "
                          "offsets (zero points unpacked) at {dtype}",
        ("w4a16", True): "W4A16 experts as int4 packs (the stored bytes), scales and "
                         "offsets (zero points unpacked) at {dtype}, shapes dropped",
        ("w4a8", False): "W4A8_DYNAMIC linears as int4 packs (the stored bytes), scales "
                         "as int64 bit patterns, scale_bias summed to one float32 column",
        ("w4a8", True): "W4A8_DYNAMIC experts as int4 packs (the stored bytes), float32 "
                        "scales plus their int64 bit patterns, scale_bias float32 as "
                        "loaded plus down_proj's per-rank sum",
    }),
})
