"""Make ModelSlim-format exports (W8A8, W8A8_DYNAMIC, W8A16, mixed, W4A8_DYNAMIC) of a float model.

    python scripts/make_quant_exports.py --src models/tiny-llama --out models/tiny-llama-w8a8 \
        --scheme w8a8

msModelSlim itself is not available here; the files follow the format as vLLM-Ascend
reads it (quant_model_description.json, quant_model_weights-0000i-of-0000N.safetensors
with an index, per-linear tensors below). Static activation scales are calibrated on
local text (this Python's standard library sources, tokenized by the model's tokenizer).

Per linear layer, with W the float weight [n, k]:
  weights (every scheme): per-channel symmetric, weight_scale[n] = max|W[n]| / 127,
    weight = saturate_int8(round_half_even(W / weight_scale)).
  W8A8 (static): per-tensor asymmetric activations from the calibrated range [lo, hi]
    (widened to hold 0): input_scale = (hi - lo) / 255,
    input_offset = round(-128 - lo / input_scale) (int8); deq_scale = input_scale * weight_scale
    (float32; int64 holding the float32 bits for a float16 model);
    quant_bias = round(bias / deq_scale) - input_offset * sum_k weight[n, k] (int32).
  W8A8_DYNAMIC: weight, weight_scale [n, 1], weight_offset [n, 1] (zeros).
  W8A16 (weight only, ModelSlim's asymmetric per-channel weights, w_sym False): from the
    row's range [lo, hi] (widened to hold 0), weight_scale = (hi - lo) / 255,
    weight_offset = round(-128 - lo / weight_scale) (the zero point, integer-valued),
    weight = saturate_int8(round_half_even(W / weight_scale) + weight_offset), so
    W ~ (weight - weight_offset) * weight_scale (ModelSlim's dequantization; the NPU op
    adds its offset, so servers negate it). weight_scale and weight_offset [n, 1] in the
    model dtype, as vLLM-Ascend declares them; the float bias stays as it is.
MoE models (transformers holds each layer's experts as 3-d gate_up_proj / down_proj):
  every routed expert is written per expert, `<layer>.mlp.experts.<e>.{gate,up,down}_proj.`
  `{weight,weight_scale,weight_offset}`, W8A8_DYNAMIC in every scheme (the one expert
  scheme served); the router (`mlp.gate`) stays FLOAT, shared experts are ordinary
  linears.
  w4a8_dynamic: the experts W4A8_DYNAMIC instead (per-channel, ModelSlim version 1.0.0, as
  vLLM-Ascend reads it), the linear layers W8A8_DYNAMIC (ModelSlim's W4A8 recipes for MoE
  models keep attention in int8): per projection with W [out, in], symmetric int4
  weight_scale[o] = max|W[o]| / 7, q = clamp(round_half_even(W / weight_scale), -8, 7);
  weight int8 [out / 2, in], byte j of a column = q[2j] in the low nibble, q[2j + 1] in the
  high one; weight_scale, weight_offset (zeros) float32 [out, 1]; scale_bias float32
  = 8 * weight_scale[o] * sum over inputs of q[o], [out, 1] for gate_proj / up_proj and
  [out, 16] for down_proj (column c sums the c-th of 16 equal slices of the inputs).
  A dense model's w4a8_dynamic export has every decoder linear W4A8_DYNAMIC in that
  layout: scale_bias [out, 16] for the layers vLLM splits along their inputs (o_proj,
  down_proj: row-parallel), [out, 1] for the others; the float bias stays as it is. Its
  description says group_size 0 (per channel): vLLM-Ascend's W4A8_DYNAMIC linear method
  takes a description without group_size as per-group with 256 inputs per group.
  MLA's kv_b_proj stays FLOAT: vLLM's MLA layer absorbs its weight into the attention
  math in float, so a quantized kv_b_proj would not compute the scheme's integer math.
Same arguments and source, same files; a finished directory carries a stamp.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package
from model_dirs import build_once, calibration_token_ids, read_json

STAMP_FILE = ".make_quant_exports.json"
SCRIPT_VERSION = 4
DESCRIPTION_FILE = "quant_model_description.json"
INDEX_FILE = "quant_model_weights.safetensors.index.json"
SCHEMES = ("w8a8", "w8a8_dynamic", "w8a16", "mixed", "w4a8_dynamic")
DTYPES = ("float32", "bfloat16", "float16")
W8A8, DYNAMIC, W8A16, FLOAT = "W8A8", "W8A8_DYNAMIC", "W8A16", "FLOAT"
W4A8 = "W4A8_DYNAMIC"
BIAS_SLICES = 16  # down_proj's scale_bias columns
ROW_PARALLEL = ("o_proj", "down_proj")  # vLLM splits these along their inputs
COPIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
)
CALIBRATION_TOKENS = 2048
CALIBRATION_CHUNK = 256

# mixed: every scheme and FLOAT appear, fused shards agree, layers differ.
_MIXED_BY_LAYER = (
    {"self_attn": W8A8, "mlp.gate_up": DYNAMIC, "mlp.down_proj": W8A8},
    {"self_attn": DYNAMIC, "mlp.gate_up": W8A8, "mlp.down_proj": FLOAT},
)


def linear_scheme(scheme: str, layer: int, module: str, dense: bool = False) -> str:
    """The ModelSlim label of `module` (e.g. `self_attn.q_proj`) of decoder layer `layer`
    (`dense`: the model has no routed experts)."""
    if module.endswith("kv_b_proj"):
        return FLOAT
    if scheme == "w4a8_dynamic" and dense:
        return W4A8
    if scheme == "w8a8":
        return W8A8
    if scheme in ("w8a8_dynamic", "w4a8_dynamic"):
        return DYNAMIC
    if scheme == "w8a16":
        return W8A16
    plan = _MIXED_BY_LAYER[layer % len(_MIXED_BY_LAYER)]
    if module.startswith("self_attn."):
        return plan["self_attn"]
    if module.endswith(("gate_proj", "up_proj")):  # mlp. or mlp.shared_experts.
        return plan["mlp.gate_up"]
    return plan["mlp.down_proj"]


def make_export(
    src: str | Path, out: str | Path, scheme: str, dtype: str | None = None
) -> Path:
    """Write the export of the float model at `src` unless `out` already holds it.

    dtype: the float dtype of the export (config.json's `dtype` and its float tensors);
    None keeps the source's. A float16 export stores deq_scale as int64 (float32 bits).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not one of {SCHEMES}")
    if dtype not in (None, *DTYPES):
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    src, out = Path(src).resolve(), Path(out).resolve()
    stamp = {"src": str(src), "scheme": scheme, "version": SCRIPT_VERSION, "dtype": dtype,
             "src_stamp": read_json(src / ".make_models.json")}
    return build_once(out, STAMP_FILE, stamp, lambda tmp: _build(src, tmp, scheme, dtype))


def _build(src: Path, out: Path, scheme: str, dtype_name: str | None) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    dtype = getattr(torch, dtype_name) if dtype_name else _dtype(src)
    ranges = calibrate(model, tokenizer)

    tensors: dict[str, torch.Tensor] = {}
    description: dict[str, str] = {}
    linears = _decoder_linears(model)
    experts = _decoder_experts(model)
    for name, param in model.state_dict().items():
        owner = name.rsplit(".", 1)[0]
        if owner in linears or owner in experts:
            continue
        tensors[name] = param.detach().to(dtype).contiguous()
        description[name] = FLOAT
    for prefix, (layer, module) in linears.items():
        linear = model.get_submodule(prefix)
        label = linear_scheme(scheme, layer, module, dense=not experts)
        if label == FLOAT:
            parts = {"weight": linear.weight.detach().to(dtype)}
            if linear.bias is not None:
                parts["bias"] = linear.bias.detach().to(dtype)
        elif label == W4A8:
            slices = BIAS_SLICES if module.endswith(ROW_PARALLEL) else 1
            parts = quantize_w4a8(linear.weight.detach(), slices)
            if linear.bias is not None:
                parts["bias"] = linear.bias.detach().to(dtype)
        elif label in (DYNAMIC, W8A16):
            quantize = quantize_dynamic if label == DYNAMIC else quantize_weight_only
            parts = quantize(linear.weight.detach(), dtype)
            if linear.bias is not None:
                parts["bias"] = linear.bias.detach().to(dtype)
        else:
            bias = None if linear.bias is None else linear.bias.detach()
            parts = quantize_static(linear.weight.detach(), bias, ranges[prefix], dtype)
        for key, value in parts.items():
            tensors[f"{prefix}.{key}"] = value.contiguous()
            description[f"{prefix}.{key}"] = label

    expert_label = W4A8 if scheme == "w4a8_dynamic" else DYNAMIC
    for prefix in experts:
        module = model.get_submodule(prefix)
        for key, value in expert_tensors(module, prefix, dtype, expert_label).items():
            tensors[key] = value.contiguous()
            description[key] = expert_label

    shard = "quant_model_weights-00001-of-00001.safetensors"
    save_file(tensors, str(out / shard), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict.fromkeys(sorted(tensors), shard)}
    (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    labels = {linear_scheme(scheme, layer, m, dense=not experts)
              for layer, m in linears.values()} - {FLOAT}
    labels |= {DYNAMIC} if experts else set()
    model_type = labels.pop() if len(labels) == 1 else "W8A8_MIX"
    meta: dict[str, Any] = {"model_quant_type": model_type, "version": "1.0.0"}
    if scheme == "w4a8_dynamic":
        meta["model_quant_type"] = W4A8
        meta["group_size"] = 0  # per channel
    (out / DESCRIPTION_FILE).write_text(json.dumps({**meta, **description}, indent=2) + "\n")

    config = json.loads((src / "config.json").read_text())
    config.pop("quantization_config", None)  # ModelSlim removes it
    config["dtype"] = str(dtype).removeprefix("torch.")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in COPIED:
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    del tokenizer
    for path in out.iterdir():
        path.chmod(0o644)


def _dtype(src: Path) -> Any:
    import torch

    config = json.loads((src / "config.json").read_text())
    name = config.get("dtype") or config.get("torch_dtype") or "float32"
    return getattr(torch, name)


def _decoder_linears(model: Any) -> dict[str, tuple[int, str]]:
    """Every nn.Linear inside a decoder layer: prefix -> (layer index, module path)."""
    import torch

    found = {}
    for name, module in model.named_modules():
        parts = name.split(".")
        if isinstance(module, torch.nn.Linear) and "layers" in parts:
            at = parts.index("layers")
            found[name] = (int(parts[at + 1]), ".".join(parts[at + 2 :]))
    return found


def _decoder_experts(model: Any) -> list[str]:
    """Prefixes of transformers' expert modules (3-d gate_up_proj [E, 2I, H], down_proj
    [E, H, I]) inside decoder layers."""
    import torch

    found = []
    for name, module in model.named_modules():
        gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
        if (isinstance(gate_up, torch.nn.Parameter) and gate_up.dim() == 3
                and isinstance(down, torch.nn.Parameter) and "layers" in name.split(".")):
            found.append(name)
    return found


def expert_tensors(module: Any, prefix: str, dtype: Any, label: str = DYNAMIC) -> dict[str, Any]:
    """ModelSlim's per-expert W8A8_DYNAMIC (or W4A8_DYNAMIC) tensors of one transformers
    experts module (gate rows first in gate_up_proj, as transformers chunks it)."""
    gate_up, down = module.gate_up_proj.detach(), module.down_proj.detach()
    inter = down.shape[2]
    out = {}
    for e in range(gate_up.shape[0]):
        weights = {"gate_proj": gate_up[e, :inter], "up_proj": gate_up[e, inter:],
                   "down_proj": down[e]}
        for projection, weight in weights.items():
            if label == W4A8:
                slices = BIAS_SLICES if projection == "down_proj" else 1
                parts = quantize_w4a8(weight, slices)
            else:
                parts = quantize_dynamic(weight, dtype)
            for key, value in parts.items():
                out[f"{prefix}.{e}.{projection}.{key}"] = value
    return out


def calibration_ids(tokenizer: Any, tokens: int = CALIBRATION_TOKENS) -> list[list[int]]:
    """Chunks of tokenized stdlib text (files from the end of the name order, so not the
    first files the tokenizer was trained on)."""
    ids = calibration_token_ids(tokenizer, tokens)
    return [ids[i : i + CALIBRATION_CHUNK] for i in range(0, len(ids), CALIBRATION_CHUNK)]


def calibrate(model: Any, tokenizer: Any) -> dict[str, tuple[float, float]]:
    """(min, max) of every decoder linear's input over the calibration text, in float32."""
    import torch

    ranges: dict[str, list[float]] = {}
    hooks = []
    for prefix in _decoder_linears(model):

        def record(_module: Any, args: Any, prefix: str = prefix) -> None:
            x = args[0].detach()
            lo, hi = float(x.min()), float(x.max())
            old = ranges.setdefault(prefix, [lo, hi])
            old[0], old[1] = min(old[0], lo), max(old[1], hi)

        hooks.append(model.get_submodule(prefix).register_forward_pre_hook(record))
    try:
        with torch.no_grad():
            for chunk in calibration_ids(tokenizer):
                model(torch.tensor([chunk]))
    finally:
        for hook in hooks:
            hook.remove()
    return {k: (v[0], v[1]) for k, v in ranges.items()}


def quantize_weight(weight: Any) -> tuple[Any, Any]:
    """(int8 [n, k], float32 scale [n]): per-channel symmetric, half-to-even."""
    import torch

    w = weight.to(torch.float32)
    scale = w.abs().amax(dim=1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def quantize_dynamic(weight: Any, dtype: Any) -> dict[str, Any]:
    import torch

    q, scale = quantize_weight(weight)
    scale = scale.to(dtype)
    return {
        "weight": q,
        "weight_scale": scale[:, None],
        "weight_offset": torch.zeros_like(scale)[:, None],
    }


def quantize_w4a8(weight: Any, slices: int) -> dict[str, Any]:
    """W4A8_DYNAMIC per-channel int4, packed in pairs along the outputs (see the top)."""
    import torch

    w = weight.to(torch.float32)
    out, inp = w.shape
    if out % 2 or inp % slices:
        raise ValueError(f"W4A8_DYNAMIC needs an even output size and inputs in {slices} "
                         f"equal slices, not [{out}, {inp}]")
    scale = w.abs().amax(dim=1) / 7.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-8, 7).to(torch.int16)
    pairs = q.reshape(out // 2, 2, inp)
    packed = (pairs[:, 0] & 0xF) | ((pairs[:, 1] & 0xF) << 4)
    packed = torch.where(packed > 127, packed - 256, packed).to(torch.int8)
    row_parts = q.to(torch.float32).reshape(out, slices, inp // slices).sum(dim=-1)
    return {
        "weight": packed,
        "weight_scale": scale[:, None],
        "weight_offset": torch.zeros(out, 1, dtype=torch.float32),
        "scale_bias": 8.0 * scale[:, None] * row_parts,
    }


def quantize_weight_only(weight: Any, dtype: Any) -> dict[str, Any]:
    """W8A16: asymmetric per-channel int8 with an integer zero point (see the top)."""
    import torch

    w = weight.to(torch.float32)
    lo = w.amin(dim=1).clamp(max=0.0)
    hi = w.amax(dim=1).clamp(min=0.0)
    scale = (hi - lo) / 255.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale)).to(dtype).to(torch.float32)
    offset = torch.round(-128.0 - lo / scale).clamp(-128, 127)
    q = (torch.round(w / scale[:, None]) + offset[:, None]).clamp(-128, 127).to(torch.int8)
    return {
        "weight": q,
        "weight_scale": scale.to(dtype)[:, None],
        "weight_offset": offset.to(dtype)[:, None],
    }


def quantize_static(
    weight: Any, bias: Any, calibrated: tuple[float, float], dtype: Any
) -> dict[str, Any]:
    import torch

    q, w_scale = quantize_weight(weight)
    lo, hi = min(calibrated[0], 0.0), max(calibrated[1], 0.0)
    # Scales pass through the model dtype in the file, so compute from what is stored.
    x_scale = torch.tensor([(hi - lo) / 255.0 or 1.0], dtype=torch.float32).to(dtype)
    x_scale32 = x_scale.to(torch.float32)
    offset = torch.round(-128.0 - lo / x_scale32).clamp(-128, 127)
    w_scale = w_scale.to(dtype).to(torch.float32)
    deq = (x_scale32 * w_scale).to(torch.float32)
    folded = torch.zeros_like(deq) if bias is None else torch.round(bias.float() / deq)
    quant_bias = folded.to(torch.int64) - offset.to(torch.int64) * q.to(torch.int64).sum(dim=1)
    parts = {
        "weight": q,
        "input_scale": x_scale,
        "input_offset": offset.to(torch.int8),  # int8, as vLLM-Ascend declares it
        "quant_bias": quant_bias.to(torch.int32),
        "deq_scale": deq if dtype != torch.float16 else _float_bits_as_int64(deq),
    }
    if bias is not None:
        parts["bias"] = bias.to(dtype)
    return parts


def _float_bits_as_int64(values: Any) -> Any:
    import torch

    return values.to(torch.float32).contiguous().view(torch.int32).to(torch.int64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="float model directory (make_models.py)")
    parser.add_argument("--out", required=True, help="export directory to write")
    parser.add_argument("--scheme", choices=SCHEMES, default="w8a8")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="float dtype of the export (default: the source's)")
    args = parser.parse_args(argv)
    out = make_export(args.src, args.out, args.scheme, args.dtype)
    print(f"{out} ready", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
