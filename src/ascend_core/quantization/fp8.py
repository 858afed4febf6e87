"""FP8 checkpoints: what serves them on each chip, and which block shapes a layer takes.

Atlas A2/A3 (and 310P) have no fp8 matmul. vllm-ascend serves block-wise fp8 checkpoints
there by dequantizing the weights to the model dtype at load (on Ascend 950 it
re-quantizes them to MXFP8 at load instead), and refuses per-tensor weights and static
activation scales. This plugin takes the dequantize-at-load path on every chip and on the
host: w = float(w_fp8) * scale, one scale per output channel or per [n, k] block, then a
float matmul. Activations stay in the model dtype (fp8 only saves weight bytes on disk;
in memory the layer holds the model dtype).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import frozen

from ports.device import ChipFamily, DeviceKind


class Fp8Path(enum.Enum):
    """How fp8 weights are served; the value is how the plan and the doctor name it."""

    DEQUANTIZE_AT_LOAD = "dequantize at load to the model dtype, float matmul"
    NATIVE = "native fp8 matmul"


@frozen
class Fp8Serving:
    path: Fp8Path
    reason: str

    def describe(self) -> str:
        return f"fp8 weights: {self.path.value} ({self.reason})"


_NO_FP8_MATMUL = (
    "{chip} has no fp8 matmul; vllm-ascend dequantizes block fp8 checkpoints to the model "
    "dtype at load there too"
)
_A5 = (
    "Ascend 950 has fp8 matmuls (vllm-ascend re-quantizes block fp8 to MXFP8 at load), but "
    "this build has no fp8 or MXFP8 op on its NPU port, so A5 takes the A2/A3 path"
)
_HOST = "the host device is the reference: the same dequantized weights, float matmul"


def fp8_serving(chip: ChipFamily, device: DeviceKind) -> Fp8Serving:
    """The path fp8 checkpoints take on this chip, with its reason."""
    if device is DeviceKind.CPU or chip is ChipFamily.HOST:
        return Fp8Serving(Fp8Path.DEQUANTIZE_AT_LOAD, _HOST)
    if chip is ChipFamily.A5:
        return Fp8Serving(Fp8Path.DEQUANTIZE_AT_LOAD, _A5)
    names = {ChipFamily.A2: "Atlas A2", ChipFamily.A3: "Atlas A3", ChipFamily.P310: "310P"}
    return Fp8Serving(Fp8Path.DEQUANTIZE_AT_LOAD,
                      _NO_FP8_MATMUL.format(chip=names.get(chip, chip.value)))


@frozen
class Projection:
    """A linear layer as vLLM builds it: its shards' output sizes, its input size, and
    whether tensor parallelism splits its input (row parallel) or its outputs; floors: the
    smallest slice per shard (one KV head, replicated when TP exceeds the KV heads)."""

    name: str
    outputs: tuple[int, ...]
    input: int
    row_parallel: bool
    floors: tuple[int, ...] = ()

    def slices(self, tp: int) -> tuple[int, ...]:
        """Each shard's output features on one rank."""
        if self.row_parallel:
            return self.outputs
        floors = self.floors or (1,) * len(self.outputs)
        return tuple(max(o // tp, f) for o, f in zip(self.outputs, floors, strict=True))


def dense_projections(config: Mapping[str, Any]) -> tuple[Projection, ...]:
    """The decoder layer's linear layers of a Llama/Qwen-style config; () when the sizes
    are not all there."""
    hidden = config.get("hidden_size")
    heads = config.get("num_attention_heads")
    inter = config.get("intermediate_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, heads, inter)):
        return ()
    assert isinstance(hidden, int) and isinstance(heads, int) and isinstance(inter, int)
    kv = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    q, kv_width = heads * head_dim, kv * head_dim
    return (
        Projection("self_attn.qkv_proj", (q, kv_width, kv_width), hidden, False,
                   (head_dim, head_dim, head_dim)),
        Projection("self_attn.o_proj", (hidden,), q, True),
        Projection("mlp.gate_up_proj", (inter, inter), hidden, False),
        Projection("mlp.down_proj", (hidden,), inter, True),
    )


def expert_projections(config: Mapping[str, Any]) -> tuple[Projection, ...]:
    """A MoE layer's routed experts as vLLM builds them (every expert alike): gate/up fused
    column parallel over the intermediate size, down row parallel; () when the sizes are
    not all there."""
    hidden = config.get("hidden_size")
    inter = config.get("moe_intermediate_size")
    if not all(isinstance(v, int) and v > 0 for v in (hidden, inter)):
        return ()
    assert isinstance(hidden, int) and isinstance(inter, int)
    return (
        Projection("mlp.experts.w13 (gate/up)", (inter, inter), hidden, False),
        Projection("mlp.experts.w2 (down)", (hidden,), inter, True),
    )


def block_shape_problem(projections: Sequence[Projection], block: tuple[int, int],
                        tp: int) -> str | None:
    """Why a [block_n, block_k] weight block does not fit these layers on `tp` ranks (the
    blocks of a rank's slice, and of each fused shard but the last, must be whole, or a
    scale lands on the wrong rows), or None. The rule is vLLM's validate_fp8_block_shape."""
    block_n, block_k = block
    for p in projections:
        if p.row_parallel and tp > 1 and (p.input // tp) % block_k:
            return (f"{p.name}'s input slice of {p.input // tp} features per rank (TP={tp}) "
                    f"is not a whole number of {block_k}-column blocks")
        shards = p.slices(tp)
        checked = shards if tp > 1 and not p.row_parallel else shards[:-1]
        for size in checked:
            if size % block_n:
                where = f" per rank (TP={tp})" if tp > 1 else ""
                return (f"{p.name} has a fused shard of {size} output features{where}, not a "
                        f"whole number of {block_n}-row blocks")
    return None
