"""The fake-quant oracle: the float model in transformers with each quantized linear
replaced by its ModelSlim scheme's integer math, read from the export's own tensors.

Written from the format's formulas, independently of the plugin's QuantOps adapters:
  W8A8:         x_q = clamp(round(x * (1 / input_scale) + input_offset), -128, 127)
                y = float32(x_q @ W^T + quant_bias) * deq_scale
  W8A8_DYNAMIC: s = max|x| / 127 per token, x_q = round(x / s)
                y = float32(x_q @ W^T) * weight_scale * s
  W8A16:        W_deq = (W - weight_offset) * weight_scale per output channel (ModelSlim's
                dequantization, in float32, then the model's dtype), y = x @ W_deq^T + bias
Integer products in int64 (exact); round() is torch's half-to-even.
  W4A8_DYNAMIC: W8A8_DYNAMIC's math with the int4 values of `weight` (two per byte along
                the outputs, the even output in the low nibble); scale_bias is the NPU
                kernel's correction and not part of the math
MoE experts (W8A8_DYNAMIC or W4A8_DYNAMIC, `<prefix>.<e>.{gate,up,down}_proj.*`):
transformers' experts loop with each expert's three projections as such linears; the
router stays float.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from support.hf_reference import MODELS_DIR, REPO_ROOT, local_model

F32 = torch.float32
DESCRIPTION = "quant_model_description.json"


@functools.cache
def _script(name: str) -> Any:
    """scripts/<name>.py as a module (scripts/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def local_export(
    style: str = "llama", scheme: str = "w8a8", size: str = "tiny", dtype: str | None = None
) -> Path:
    """<repo>/models/<size>-<style>-<scheme>[-<dtype>]: scripts/make_quant_exports.py of
    the shared model (float dtype of the source unless `dtype` is given)."""
    src = local_model(style, size)
    target = MODELS_DIR / "-".join(filter(None, (size, style, scheme, dtype)))
    out: Path = _script("make_quant_exports").make_export(src, target, scheme, dtype)
    return out


class FakeQuantLinear(torch.nn.Module):
    def __init__(self, scheme: str, tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.scheme = scheme
        self.w = tensors["weight"].to(torch.int64)
        if scheme == "W4A8_DYNAMIC":
            self.w = _int4_pairs(tensors["weight"])
        if scheme == "W8A8":
            self.inv_scale = 1.0 / tensors["input_scale"].to(F32).reshape(1)
            self.offset = tensors["input_offset"].to(F32).reshape(1)
            self.quant_bias = tensors["quant_bias"].to(torch.int64)
            deq = tensors["deq_scale"]
            if deq.dtype == torch.int64:
                deq = deq.to(torch.int32).view(F32)
            self.deq = deq.to(F32)
            self.bias = None  # folded into quant_bias
        elif scheme == "W8A16":
            n = self.w.shape[0]
            zero = tensors["weight_offset"].to(F32).reshape(n, 1)
            self.deq = (self.w.to(F32) - zero) * tensors["weight_scale"].to(F32).reshape(n, 1)
            self.bias = tensors.get("bias")
        else:
            self.w_scale = tensors["weight_scale"].to(F32).reshape(-1)
            self.bias = tensors.get("bias")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(F32)
        if self.scheme == "W8A16":
            y = xf @ self.deq.to(x.dtype).to(F32).T
        elif self.scheme == "W8A8":
            x_q = torch.round(xf * self.inv_scale + self.offset).clamp(-128, 127)
            acc = x_q.to(torch.int64) @ self.w.T + self.quant_bias
            y = acc.to(F32) * self.deq
        else:
            s = xf.abs().amax(dim=-1, keepdim=True) / 127.0
            x_q = torch.where(s > 0, torch.round(xf / torch.where(s > 0, s, 1.0)), 0.0)
            acc = x_q.clamp(-128, 127).to(torch.int64) @ self.w.T
            y = acc.to(F32) * self.w_scale * s
        if self.bias is not None:
            y = y + self.bias.to(F32)
        return y.to(x.dtype)


def _int4_pairs(packed: torch.Tensor) -> torch.Tensor:
    """int64 [2R, C] from int8 [R, C] holding two signed int4 per byte along R."""
    u = packed.view(torch.uint8).to(torch.int64)
    lo, hi = u & 15, u >> 4
    lo, hi = torch.where(lo > 7, lo - 16, lo), torch.where(hi > 7, hi - 16, hi)
    return torch.stack((lo, hi), dim=1).reshape(2 * packed.shape[0], packed.shape[1])


class FakeQuantExperts(torch.nn.Module):
    """transformers' experts forward(hidden, top_k_index, top_k_weights): each token's
    chosen experts, weighted, summed in expert order; projections as FakeQuantLinear."""

    def __init__(self, prefix: str, description: dict[str, str],
                 tensors: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.projections: list[dict[str, FakeQuantLinear]] = []
        e = 0
        while f"{prefix}.{e}.gate_proj.weight" in description:
            own = {}
            for name in ("gate_proj", "up_proj", "down_proj"):
                key = f"{prefix}.{e}.{name}"
                parts = {k[len(key) + 1:]: v for k, v in tensors.items()
                         if k.startswith(f"{key}.")}
                own[name] = FakeQuantLinear(description[f"{key}.weight"], parts)
            self.projections.append(own)
            e += 1

    def forward(self, hidden: torch.Tensor, top_k_index: torch.Tensor,
                top_k_weights: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(hidden)
        for e, p in enumerate(self.projections):
            token_idx, slot = torch.where(top_k_index == e)
            if token_idx.numel() == 0:
                continue
            x = hidden[token_idx]
            y = p["down_proj"](torch.nn.functional.silu(p["gate_proj"](x)) * p["up_proj"](x))
            out.index_add_(0, token_idx, (y * top_k_weights[token_idx, slot, None]).to(out.dtype))
        return out


def _export_tensors(export_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(export_dir.glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    return tensors


@functools.cache
def _load(export_dir: str, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    root = Path(export_dir)
    description = json.loads((root / DESCRIPTION).read_text())
    tensors = _export_tensors(root)
    config = AutoConfig.from_pretrained(export_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    replaced = set()
    for name, module in list(model.named_modules()):
        label = description.get(f"{name}.weight")
        if isinstance(module, torch.nn.Linear) and label not in (None, "FLOAT"):
            prefix = f"{name}."
            own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, FakeQuantLinear(label, own))
            replaced.add(prefix)
        elif description.get(f"{name}.0.gate_proj.weight") not in (None, "FLOAT"):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child,
                    FakeQuantExperts(name, description, tensors))
            replaced.add(f"{name}.")
    floats = {k: v.to(dtype) for k, v in tensors.items()
              if not any(k.startswith(p) for p in replaced)}
    missing, unexpected = model.load_state_dict(floats, strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    assert not unexpected and set(missing) <= tied, (missing, unexpected)
    model.eval()
    return model


def greedy_token_ids(
    export_dir: str | os.PathLike[str],
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    dtype: torch.dtype = F32,
) -> list[list[int]]:
    """Each prompt alone through the fake-quant model, greedy, EOS ignored."""
    return _greedy(_load(str(Path(export_dir).resolve()), dtype), prompts, max_new_tokens)


# (id of a cached reference model, prompts, max_new) -> its greedy ids: a module's engines
# (compiled and eager, one per path) ask for the same reference; the models are cached for
# the session (_load and its twins), so their ids stay theirs.
_GREEDY: dict[tuple[int, tuple[tuple[int, ...], ...], int], list[list[int]]] = {}


def _greedy(model: Any, prompts: Sequence[Sequence[int]], max_new: int) -> list[list[int]]:
    key = (id(model), tuple(tuple(p) for p in prompts), max_new)
    if key not in _GREEDY:
        _GREEDY[key] = _greedy_uncached(model, prompts, max_new)
    return [list(ids) for ids in _GREEDY[key]]


def _greedy_uncached(
    model: Any, prompts: Sequence[Sequence[int]], max_new: int
) -> list[list[int]]:
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([list(prompt)])
            for _ in range(max_new):
                logits = model(ids).logits[0, -1]
                ids = torch.cat([ids, logits.argmax().reshape(1, 1)], dim=1)
            out.append(ids[0, len(prompt):].tolist())
    return out


def _logprob_rows(model: Any, prompt: Sequence[int], gen: Sequence[int]) -> torch.Tensor:
    """log_softmax rows predicting each token of `gen` after `prompt` (teacher-forced)."""
    seq = torch.tensor([list(prompt) + list(gen)])
    logprobs = torch.log_softmax(model(seq).logits[0].float(), dim=-1)
    return logprobs[len(prompt) - 1 : len(prompt) - 1 + len(gen)]


def chosen_logprobs(
    model: Any, prompts: Sequence[Sequence[int]], generated: Sequence[Sequence[int]]
) -> list[list[float]]:
    """Teacher-forced logprob of each generated token under `model` (any HF causal LM)."""
    with torch.no_grad():
        return [
            _logprob_rows(model, p, g)[torch.arange(len(g)), torch.tensor(list(g))].tolist()
            for p, g in zip(prompts, generated, strict=True)
        ]


def fake_quant_model(export_dir: str | os.PathLike[str], dtype: torch.dtype = F32) -> Any:
    """The fake-quant model of an export (cached; do not modify)."""
    return _load(str(Path(export_dir).resolve()), dtype)


def token_gaps(
    export_dir: str | os.PathLike[str],
    prompts: Sequence[Sequence[int]],
    generated: Sequence[Sequence[int]],
    dtype: torch.dtype,
) -> list[float]:
    """Per generated token (teacher-forced): the reference's top-1 logprob minus the
    logprob of the token given."""
    model = fake_quant_model(export_dir, dtype)
    chosen = chosen_logprobs(model, prompts, generated)
    gaps: list[float] = []
    with torch.no_grad():
        for p, g, c in zip(prompts, generated, chosen, strict=True):
            best = _logprob_rows(model, p, g).max(dim=-1).values
            gaps += (best - torch.tensor(c)).tolist()
    return gaps


def teacher_forced_gaps(
    export_dir: str | os.PathLike[str],
    prompts: Sequence[Sequence[int]],
    generated: Sequence[Sequence[int]],
    dtype: torch.dtype,
) -> float:
    """The largest logprob gap between the reference's top-1 and the tokens given."""
    return max(0.0, *token_gaps(export_dir, prompts, generated, dtype))


# -- compressed-tensors (llm-compressor) int8 W8A8 -----------------------------------------
# Symmetric int8 activations: dynamic per token as W8A8_DYNAMIC above, or static per tensor
# x_q = clamp(round(x * (1 / s)), -128, 127), y = float32(x_q @ W^T) * (s * weight_scale);
# a fused layer (q/k/v, gate/up) quantizes its input once, with the largest shard scale,
# as vLLM's int8 kernels do. The float bias is added last.
FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def local_ct_export(style: str = "llama", activations: str = "dynamic",
                    size: str = "tiny", scheme: str = "int8", block: str = "64,64") -> Path:
    """<repo>/models/<size>-<style>-ct-<activations> (int8) or -ct-<scheme>, written by
    llm-compressor itself (scripts/make_ct_exports.py in its own venv, made on first use)."""
    import subprocess
    import sys

    script = REPO_ROOT / "scripts" / "make_ct_exports.py"
    out = MODELS_DIR / f"{size}-{style}-ct-{activations if scheme == 'int8' else scheme}"
    src = local_model(style, size)
    python = _ct_python()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(python), str(script), "--src", str(src), "--out", str(out),
                    "--activations", activations, "--scheme", scheme, "--block", block],
                   check=True, env=env,
                   stdout=sys.stderr)
    return out


@functools.cache
def _ct_python() -> Path:
    """The llm-compressor venv's python, checked (or made) once per process: the check
    imports llmcompressor in a child (~10 s), and the export script itself returns at once
    when the export is there."""
    python: Path = _script("make_ct_exports").ensure_venv()
    return python


class CtFakeQuantLinear(torch.nn.Module):
    def __init__(self, tensors: dict[str, torch.Tensor], input_scale: torch.Tensor | None
                 ) -> None:
        super().__init__()
        self.w = tensors["weight"].to(torch.int64)
        self.w_scale = tensors["weight_scale"].to(F32).reshape(-1)
        self.bias = tensors.get("bias")
        self.input_scale = input_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.to(F32)
        if self.input_scale is None:
            s = xf.abs().amax(dim=-1, keepdim=True) / 127.0
            x_q = torch.where(s > 0, torch.round(xf / torch.where(s > 0, s, 1.0)), 0.0)
            acc = x_q.clamp(-128, 127).to(torch.int64) @ self.w.T
            y = acc.to(F32) * self.w_scale * s
        else:
            x_q = torch.round(xf * (1.0 / self.input_scale)).clamp(-128, 127)
            acc = x_q.to(torch.int64) @ self.w.T
            y = acc.to(F32) * (self.input_scale * self.w_scale)
        if self.bias is not None:
            y = y + self.bias.to(F32)
        return y.to(x.dtype)


def _group_input_scale(name: str, tensors: dict[str, torch.Tensor]) -> torch.Tensor | None:
    parent, _, child = name.rpartition(".")
    group = next((g for g in FUSED_GROUPS if child in g), (child,))
    scales = [tensors.get(f"{parent}.{c}.input_scale") for c in group]
    if any(s is None for s in scales):
        return None
    return torch.stack([s.to(F32).reshape(()) for s in scales]).max().reshape(1)


@functools.cache
def _load_ct(export_dir: str, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    root = Path(export_dir)
    tensors = _export_tensors(root)
    config = AutoConfig.from_pretrained(export_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # built as the float model; linears replaced below
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    replaced = set()
    for name, module in list(model.named_modules()):
        if isinstance(module, torch.nn.Linear) and f"{name}.weight_scale" in tensors:
            prefix = f"{name}."
            own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            parent, _, child = name.rpartition(".")
            layer = CtFakeQuantLinear(own, _group_input_scale(name, tensors))
            setattr(model.get_submodule(parent), child, layer)
            replaced.add(prefix)
    floats = {k: v.to(dtype) for k, v in tensors.items()
              if not any(k.startswith(p) for p in replaced)}
    missing, unexpected = model.load_state_dict(floats, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    model.eval()
    return model


def ct_greedy_token_ids(export_dir: str | os.PathLike[str], prompts: Sequence[Sequence[int]],
                        max_new_tokens: int, dtype: torch.dtype = F32) -> list[list[int]]:
    """The compressed-tensors twin of greedy_token_ids."""
    return _greedy(_load_ct(str(Path(export_dir).resolve()), dtype), prompts, max_new_tokens)


# -- compressed-tensors W4A16 (pack-quantized int4) -----------------------------------------
# Read from the files alone, not through compressed-tensors: weight_packed int32 [n, k/8]
# holds eight 4-bit fields per int32, low bits first along k, each the value + 8;
# weight_zero_point (asymmetric layers) int32 [n/8, groups] packs the zero points the same
# way along n; weight_scale [n, groups]. w[o, i] = (q[o, i] - z[o, i // G]) * s[o, i // G]
# in float32, y = x @ w^T + bias.
def unpack_int4(packed: torch.Tensor, along: int) -> torch.Tensor:
    """Signed int4 values of an int32 tensor packed eight per int32 along `along`."""
    fields = [((packed >> (4 * i)) & 0xF) - 8 for i in range(8)]
    stacked = torch.stack(fields, dim=along + 1)  # the eight fields next to their int32
    shape = list(packed.shape)
    shape[along] *= 8
    return stacked.reshape(shape).to(torch.int64)


def w4a16_weight(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The float32 weight [n, k] a W4A16 layer's tensors stand for."""
    n, k = (int(v) for v in tensors["weight_shape"].tolist())
    q = unpack_int4(tensors["weight_packed"], 1)[:, :k]
    scale = tensors["weight_scale"].to(F32)
    group = k // scale.shape[1]
    zero = torch.zeros_like(q)
    if "weight_zero_point" in tensors:
        zero = unpack_int4(tensors["weight_zero_point"], 0)[:n].repeat_interleave(group, dim=1)
    return (q - zero).to(F32) * scale.repeat_interleave(group, dim=1)


@functools.cache
def _load_w4a16(export_dir: str, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    tensors = _export_tensors(Path(export_dir))
    config = AutoConfig.from_pretrained(export_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # built as the float model; weights replaced below
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    floats = {}
    for name, value in tensors.items():
        if name.endswith(".weight_packed"):
            prefix = name.removesuffix("weight_packed")
            own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            floats[f"{prefix}weight"] = w4a16_weight(own).to(dtype)
        elif not name.rpartition(".")[2].startswith(("weight_scale", "weight_zero_point",
                                                      "weight_shape")):
            floats[name] = value.to(dtype)
    missing, unexpected = model.load_state_dict(_as_fused_experts(floats), strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    model.eval()
    return model


_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$")


def _as_fused_experts(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoints store each expert's projections (`<p>.experts.<e>.{gate,up,down}_proj.
    weight`); transformers' MoE models hold them fused: `<p>.experts.gate_up_proj`
    [E, 2I, H] (gate rows, then up) and `<p>.experts.down_proj` [E, H, I]."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[tuple[int, str], torch.Tensor]] = {}
    for name, value in tensors.items():
        match = _EXPERT.match(name)
        if match is None:
            out[name] = value
        else:
            experts.setdefault(match[1], {})[int(match[2]), match[3]] = value
    for prefix, parts in experts.items():
        count = 1 + max(e for e, _ in parts)
        out[f"{prefix}.gate_up_proj"] = torch.stack(
            [torch.cat((parts[e, "gate"], parts[e, "up"])) for e in range(count)])
        out[f"{prefix}.down_proj"] = torch.stack([parts[e, "down"] for e in range(count)])
    return out


def w4a16_greedy_token_ids(export_dir: str | os.PathLike[str],
                           prompts: Sequence[Sequence[int]], max_new_tokens: int,
                           dtype: torch.dtype = F32) -> list[list[int]]:
    """Greedy ids of the W4A16 export's fake-quant model (dequantized weights, float math)."""
    return _greedy(_load_w4a16(str(Path(export_dir).resolve()), dtype), prompts,
                   max_new_tokens)


def w4a16_model(export_dir: str | os.PathLike[str], dtype: torch.dtype = F32) -> Any:
    """The W4A16 export's fake-quant model (cached; do not modify)."""
    return _load_w4a16(str(Path(export_dir).resolve()), dtype)


# -- fp8 (compressed-tensors FP8_DYNAMIC / FP8_BLOCK, the HF `fp8` block format) -------------
# Read from the files alone: weight float8_e4m3fn [n, k]; its scale `weight_scale` [n, 1]
# (per channel) or, with a block shape (config_groups' block_structure, or
# weight_block_size), [ceil(n / bn), ceil(k / bk)] named weight_scale or weight_scale_inv.
# w[o, i] = float32(q[o, i]) * scale[o // bn, i // bk]; activations stay float.
def _fp8_block(config: dict[str, Any]) -> tuple[int, int] | None:
    qconfig = config.get("quantization_config") or {}
    if qconfig.get("weight_block_size"):
        n, k = qconfig["weight_block_size"]
        return int(n), int(k)
    for group in (qconfig.get("config_groups") or {}).values():
        block = (group.get("weights") or {}).get("block_structure")
        if block:
            return int(block[0]), int(block[1])
    return None


def fp8_weight(weight: torch.Tensor, scale: torch.Tensor,
               block: tuple[int, int] | None) -> torch.Tensor:
    """The float32 weight [n, k] an fp8 weight and its scale stand for (element by element).
    A scale of one value per output channel is per channel whatever `block` says (a
    checkpoint may hold both kinds: make_ct_exports.py --scheme fp8_mixed)."""
    n, k = weight.shape
    if block is not None and tuple(scale.shape) != (-(-n // block[0]), -(-k // block[1])):
        assert scale.numel() == n, (tuple(weight.shape), tuple(scale.shape), block)
        block = None
    rows = torch.arange(n)[:, None] // (block[0] if block else n)
    cols = torch.arange(k)[None, :] // (block[1] if block else k)
    factor = scale.to(F32)[rows, cols] if block else scale.to(F32).reshape(n, 1)
    return weight.to(F32) * factor


@functools.cache
def _load_fp8(export_dir: str, dtype: torch.dtype) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    root = Path(export_dir)
    block = _fp8_block(json.loads((root / "config.json").read_text()))
    tensors = _export_tensors(root)
    config = AutoConfig.from_pretrained(export_dir)
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # built as the float model; weights replaced below
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    floats = {}
    for name, value in tensors.items():
        if value.dtype == torch.float8_e4m3fn:
            scale = tensors.get(f"{name}_scale_inv", tensors.get(f"{name}_scale"))
            assert scale is not None, name
            floats[name] = fp8_weight(value, scale, block).to(dtype)
        elif not name.endswith(("weight_scale", "weight_scale_inv")):
            floats[name] = value.to(dtype)
    missing, unexpected = model.load_state_dict(_as_fused_experts(floats), strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    model.eval()
    return model


def fp8_greedy_token_ids(export_dir: str | os.PathLike[str],
                         prompts: Sequence[Sequence[int]], max_new_tokens: int,
                         dtype: torch.dtype = F32) -> list[list[int]]:
    """Greedy ids of an fp8 export's fake-quant model (dequantized weights, float math)."""
    return _greedy(_load_fp8(str(Path(export_dir).resolve()), dtype), prompts, max_new_tokens)


def fp8_gaps(export_dir: str | os.PathLike[str], prompts: Sequence[Sequence[int]],
             generated: Sequence[Sequence[int]], dtype: torch.dtype) -> float:
    """The largest teacher-forced logprob gap between the fp8 reference's top-1 and the
    tokens given (0 where they are its greedy choices)."""
    model = _load_fp8(str(Path(export_dir).resolve()), dtype)
    chosen = chosen_logprobs(model, prompts, generated)
    worst = 0.0
    with torch.no_grad():
        for p, g, c in zip(prompts, generated, chosen, strict=True):
            best = _logprob_rows(model, p, g).max(dim=-1).values
            worst = max(worst, *(best - torch.tensor(c)).tolist())
    return worst
