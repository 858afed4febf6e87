"""Make compressed-tensors checkpoints of a local float model with llm-compressor.

    /tmp/quant-venv/bin/python scripts/make_ct_exports.py --src models/tiny-llama \
        --out models/tiny-llama-ct-dynamic --activations dynamic
    /tmp/quant-venv/bin/python scripts/make_ct_exports.py --src models/tiny-llama \
        --out models/tiny-llama-ct-w4a16 --scheme w4a16

llm-compressor pins transformers and compressed-tensors versions other than the project
environment's, so it lives in its own venv (see `ensure_venv`, or
tests/support/quant_reference.local_ct_export, which builds both). Weights: int8,
symmetric, per output channel. Activations: int8 symmetric, `dynamic` per token or
`static` per tensor (calibrated on this Python's standard library sources). lm_head
stays float. `--scheme w4a16`: weight-only int4 in llm-compressor's pack-quantized format
(eight values per int32, group-wise scales, minmax observer, no calibration data): the
attention projections symmetric with groups of 32, the MLP asymmetric (packed zero
points) with groups of 64, so one checkpoint holds both kinds. `--scheme fp8_dynamic`:
llm-compressor's FP8_DYNAMIC preset (float8_e4m3fn weights, one scale per output channel,
activations fp8 per token at run time; no calibration data). `--scheme fp8_block`: its
FP8_BLOCK preset (weights in [n, k] blocks with one scale each, activations fp8 in groups
of k at run time) with the block shape given by `--block N,K` (the preset's 128,128 by
default; the tiny test models take 64,64, since their k/v projections are 64 wide).
`--scheme fp8_block_hf`: the same FP8_BLOCK weights rewritten by hand in the format of
DeepSeek-V3's and Qwen3's official FP8 releases (llm-compressor does not write it):
quantization_config {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
"weight_block_size": [N, K]}, each scale named `weight_scale_inv` (the factor the fp8
weight is multiplied by, despite the name); on a MoE model every expert projection too,
the routers (mlp.gate) float and named in `ignored_layers`. `--scheme fp8_mixed`: both
presets in one checkpoint, as two config groups: the attention projections FP8_DYNAMIC
(per channel), the MLP projections (MoE experts included) FP8_BLOCK with the `--block`
shape. Same source and arguments, same files; the directory carries a stamp.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package
from model_dirs import build_once, calibration_token_ids, read_json

STAMP_FILE = ".make_ct_exports.json"
SCRIPT_VERSION = 1
LLMCOMPRESSOR = "llmcompressor==0.14.0.1"
VENV = Path("/tmp/quant-venv")
ACTIVATIONS = ("dynamic", "static")
SCHEMES = ("int8", "w4a16", "w4a16_moe", "fp8_dynamic", "fp8_block", "fp8_block_hf",
           "fp8_mixed")
DEFAULT_BLOCK = (128, 128)
CALIBRATION_SAMPLES = 8
CALIBRATION_TOKENS = 256


def ensure_venv(venv: Path = VENV, base_site: str | None = None) -> Path:
    """A venv with llm-compressor, sharing torch with `base_site` (a .pth at the lowest
    priority, so llm-compressor's own pins install into the venv and shadow the rest;
    pip leaves packages outside the venv alone). Returns its python."""
    python = venv / "bin" / "python"
    if python.exists() and subprocess.run(
        [str(python), "-c", "import llmcompressor"], capture_output=True
    ).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = subprocess.run(
        [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    shared = base_site or sysconfig.get_paths()["purelib"]
    (Path(site) / "zz_shared_base.pth").write_text(shared + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", LLMCOMPRESSOR], check=True)
    return python


def make_ct_export(src: str | Path, out: str | Path, activations: str,
                   scheme: str = "int8", block: tuple[int, int] = DEFAULT_BLOCK) -> Path:
    """Run in the llm-compressor venv: write the checkpoint unless `out` already holds it."""
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations {activations!r} is not one of {ACTIVATIONS}")
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not one of {SCHEMES}")
    src, out = Path(src).resolve(), Path(out).resolve()
    stamp = {"src": str(src), "activations": activations, "version": SCRIPT_VERSION,
             "llmcompressor": LLMCOMPRESSOR, "src_stamp": read_json(src / ".make_models.json")}
    if scheme != "int8":  # int8 stamps stay as they were: no rebuild of those exports
        stamp = {**stamp, "scheme": scheme, "activations": None}
    if scheme.startswith("fp8_block") or scheme == "fp8_mixed":
        stamp = {**stamp, "block": list(block)}
    return build_once(out, STAMP_FILE, stamp,
                      lambda tmp: _build(src, tmp, activations, scheme, block))


def _calibration(tokenizer: Any) -> Any:
    from datasets import Dataset

    ids = calibration_token_ids(tokenizer, CALIBRATION_SAMPLES * CALIBRATION_TOKENS)
    rows = [ids[i * CALIBRATION_TOKENS : (i + 1) * CALIBRATION_TOKENS]
            for i in range(CALIBRATION_SAMPLES)]
    return Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]})


# W4A16 as llm-compressor's presets write it (W4A16 / W4A16_ASYM), two groups by target.
_W4A16_WEIGHTS = {"num_bits": 4, "type": "int", "strategy": "group", "dynamic": False}
W4A16_GROUPS = {
    "group_0": {"targets": ["re:.*self_attn\\.(q|k|v|o)_proj$"],
                "weights": {**_W4A16_WEIGHTS, "symmetric": True, "group_size": 32}},
    "group_1": {"targets": ["re:.*mlp\\.(gate|up|down)_proj$"],
                "weights": {**_W4A16_WEIGHTS, "symmetric": False, "group_size": 64}},
}


ATTENTION_TARGET = "re:.*self_attn\\.(q|k|v|o)_proj$"
MLP_TARGET = "re:.*mlp\\.(experts\\.\\d+\\.)?(gate|up|down)_proj$"
# W4A16 MoE experts (a two-layer Qwen3-MoE): the attention symmetric with groups of 32;
# layer 0's experts symmetric with groups of 32, layer 1's with zero points, one scale per
# output channel (vLLM takes one scheme per MoE layer); the router stays float.
W4A16_MOE_GROUPS = {
    "group_0": {"targets": [ATTENTION_TARGET],
                "weights": {**_W4A16_WEIGHTS, "symmetric": True, "group_size": 32}},
    "group_1": {"targets": ["re:.*layers\\.0\\.mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"],
                "weights": {**_W4A16_WEIGHTS, "symmetric": True, "group_size": 32}},
    "group_2": {"targets": ["re:.*layers\\.1\\.mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"],
                "weights": {**_W4A16_WEIGHTS, "symmetric": False, "strategy": "channel"}},
}


def fp8_groups(scheme: str, block: tuple[int, int]) -> dict[str, Any]:
    """llm-compressor's FP8_DYNAMIC / FP8_BLOCK presets as config groups (block shape set);
    fp8_mixed: the attention FP8_DYNAMIC, the MLP FP8_BLOCK."""
    from compressed_tensors.quantization import preset_name_to_scheme

    if scheme == "fp8_mixed":
        attention = fp8_groups("fp8_dynamic", block)["group_0"]
        mlp = fp8_groups("fp8_block", block)["group_0"]
        return {"group_0": {**attention, "targets": [ATTENTION_TARGET]},
                "group_1": {**mlp, "targets": [MLP_TARGET]}}
    preset = preset_name_to_scheme("FP8_DYNAMIC" if scheme == "fp8_dynamic" else "FP8_BLOCK",
                                   ["Linear"]).model_dump(exclude_none=True)
    if scheme == "fp8_block":
        preset["weights"]["block_structure"] = list(block)
        preset["input_activations"]["group_size"] = block[1]
    return {"group_0": preset}


def _build(src: Path, out: Path, activations: str, scheme: str = "int8",
           block: tuple[int, int] = DEFAULT_BLOCK) -> None:
    import torch
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(src))
    groups = {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel",
                    "dynamic": False},
        "input_activations": {
            "num_bits": 8, "type": "int", "symmetric": True,
            "strategy": "token" if activations == "dynamic" else "tensor",
            "dynamic": activations == "dynamic",
        },
    }}
    if scheme == "w4a16":
        groups = W4A16_GROUPS
    elif scheme == "w4a16_moe":
        groups = W4A16_MOE_GROUPS
    elif scheme.startswith("fp8"):
        groups = fp8_groups(scheme.removesuffix("_hf"), block)
    if scheme == "fp8_block_hf":  # the decoder's projections, MoE experts included;
        # a MoE router (mlp.gate) stays float, as in the official releases
        groups = {"group_0": {**groups["group_0"], "targets": [ATTENTION_TARGET, MLP_TARGET]}}
    recipe = QuantizationModifier(config_groups=groups, ignore=["lm_head"])
    kwargs: dict[str, Any] = {}
    if activations == "static" and scheme == "int8":
        kwargs = {"dataset": _calibration(tokenizer), "num_calibration_samples":
                  CALIBRATION_SAMPLES, "max_seq_length": CALIBRATION_TOKENS}
    oneshot(model=model, recipe=recipe, **kwargs)
    model.save_pretrained(str(out), save_compressed=True)
    tokenizer.save_pretrained(str(out))
    for name in ("generation_config.json",):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    if scheme == "fp8_block_hf":
        as_hf_fp8(out, block)


def as_hf_fp8(out: Path, block: tuple[int, int]) -> None:
    """Rewrite a compressed-tensors FP8_BLOCK checkpoint in place as the HF `fp8` format
    of the official block-fp8 releases: same tensors, scales renamed weight_scale_inv."""
    import json

    from safetensors.torch import load_file, save_file

    for path in out.glob("*.safetensors"):
        tensors = load_file(str(path))
        renamed = {(k.removesuffix("weight_scale") + "weight_scale_inv"
                    if k.endswith(".weight_scale") else k): v for k, v in tensors.items()}
        save_file(renamed, str(path), metadata={"format": "pt"})
    index = out / "model.safetensors.index.json"
    if index.exists():
        data = json.loads(index.read_text())
        data["weight_map"] = {(k.removesuffix("weight_scale") + "weight_scale_inv"
                               if k.endswith(".weight_scale") else k): v
                              for k, v in data["weight_map"].items()}
        index.write_text(json.dumps(data, indent=2))
    config = json.loads((out / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                     "fmt": "e4m3", "weight_block_size": list(block)}
    # MoE routers left float: named, as vLLM's fp8 method reads ignored_layers (exact).
    names = json.loads(index.read_text())["weight_map"] if index.exists() else {
        k: None for path in out.glob("*.safetensors") for k in load_file(str(path))}
    routers = sorted(k.removesuffix(".weight") for k in names if k.endswith(".mlp.gate.weight"))
    if routers:
        config["quantization_config"]["ignored_layers"] = routers
    (out / "config.json").write_text(json.dumps(config, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--activations", choices=ACTIVATIONS, default="dynamic")
    parser.add_argument("--scheme", choices=SCHEMES, default="int8")
    parser.add_argument("--block", default=",".join(map(str, DEFAULT_BLOCK)),
                        help="fp8_block: the weight block shape N,K")
    args = parser.parse_args(argv)
    n, _, k = args.block.partition(",")
    print(make_ct_export(args.src, args.out, args.activations, args.scheme, (int(n), int(k))),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
