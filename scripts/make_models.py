"""Make small local Hugging Face models (random weights, real tokenizer) for tests and benchmarks.

    python scripts/make_models.py --out models/tiny-llama --style llama --size tiny

A draft model for speculative decoding, derived from a target made here:

    python scripts/make_models.py --out models/tiny-llama_repeat-eagle3
        --draft-of models/tiny-llama_repeat --draft-kind eagle3

A tiny vision-language model with its processor (styles qwen2_5_vl, qwen3_vl):

    python scripts/make_models.py --out models/tiny-qwen2_5_vl --style qwen2_5_vl

Same arguments, same files: weights come from a fixed seed and the tokenizer is trained
on this Python's standard library sources. A finished directory carries a stamp; asking
again for the same model does nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scripts/ is not a package
from model_dirs import build_once, stdlib_sources

STAMP_FILE = ".make_models.json"
# Bump when the files this script writes change, so stale model dirs are rebuilt.
SCRIPT_VERSION = 1
DENSE_STYLES = ("llama", "qwen3")
# Mixture-of-experts styles: DeepSeek-V3 (MLA with a q LoRA, first layer dense, shared
# experts, sigmoid scores with a correction bias, grouped top-k, routed scaling),
# DeepSeek-V2-Lite (MLA without q LoRA, softmax greedy top-k) and Qwen3-MoE (GQA).
MOE_STYLES = ("deepseek_v3", "deepseek_v2", "qwen3_moe")
# A Llama whose greedy continuations repeat (its lm_head leans towards the current token's
# embedding), so n-gram and suffix proposals of speculative decoding get accepted.
REPEAT_STYLES = ("llama_repeat",)
# DeepSeek-V3 with one multi-token-prediction layer (num_nextn_predict_layers=1, its
# weights under model.layers.<num_hidden_layers>, as the real checkpoint ships them) for
# vLLM's `mtp` speculative method. Its weights lean towards repeats as llama_repeat's do,
# and the MTP layer's head mostly passes the target's last hidden state on, so its
# proposals (the target's own next token, repeated) get accepted where the target repeats.
MTP_STYLES = ("deepseek_v3_mtp",)
STYLES = DENSE_STYLES + MOE_STYLES + REPEAT_STYLES + MTP_STYLES
# Draft models for speculative decoding, each derived from a target directory made here
# (make_draft): `draft` a one-layer Llama with the target's vocabulary, embeddings and
# head (vLLM's `draft_model` method); `eagle` vLLM's EAGLE format for Llama
# (EagleLlamaForCausalLM: fc over [embedding, hidden], one decoder layer, the target's
# head); `eagle3` its EAGLE-3 format (Eagle3LlamaForCausalLM: fc over three of the
# target's hidden states, one mid layer over [embedding, hidden], its own head). The
# weights pass the target's hidden state (or the current token) through mostly
# unchanged, so the drafts propose repeats, which a repeating target accepts.
DRAFT_KINDS = ("draft", "eagle", "eagle3")
# Which tokenizer and chat template each style takes (BOS-prefixed or not).
TOKENIZER_FAMILY = {
    "llama": "llama", "qwen3": "qwen3",
    "deepseek_v3": "llama", "deepseek_v2": "llama", "qwen3_moe": "qwen3",
    "llama_repeat": "llama", "deepseek_v3_mtp": "llama",
}
DTYPES = ("float32", "bfloat16")

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, IM_START, IM_END]

# Shapes per size. GQA everywhere (2-4 query heads per kv head), head sizes the
# common attention kernels accept.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "vocab_size": 4096,
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
    },
    "small": {
        "vocab_size": 8192,
        "hidden_size": 256,
        "intermediate_size": 768,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
    },
    "npu-mla": {  # the DeepSeek styles only, with NPU_MLA_SHAPE on top
        "vocab_size": 4096,
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 32,
    },
    # Qwen3-MoE for MC2 on emulated A3 NPUs, whose MC2 kernels take H in [1024, 8192].
    "npu-ep": {
        "vocab_size": 4096,
        "hidden_size": 1024,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
    },
    # npu-ep with 4 KV heads: heads, KV heads and the 8 experts divide by 4 (TP=4 + EP).
    "npu-ep4": {
        "vocab_size": 4096,
        "hidden_size": 1024,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 32,
    },
    # The shape of issue 12's measurements (~87M parameters): more layers, small vocabulary.
    "87m": {
        "vocab_size": 8000,
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "head_dim": 64,
    },
    "100m": {
        "vocab_size": 32000,
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 8,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "head_dim": 64,
    },
}
MAX_POSITIONS = 8192
# The DeepSeek styles at the shapes torch_npu's MLA attention documents (latent 512, rope
# 64, Q/K head size 192, V 128, 32 query heads), every layer dense; otherwise tiny. For
# the emulated-NPU MLA runs in bf16: with MoE layers on top, a random model this wide is
# chaotic in bf16 (transformers' own bf16 and fp32 runs disagree on the first token of 4
# prompts in 6, measured), so MoE on the NPU is tested on Qwen3-MoE instead.
NPU_MLA_SIZE = "npu-mla"
NPU_MLA_SHAPE: dict[str, Any] = {
    "num_attention_heads": 32, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 16,
    "first_k_dense_replace": 3,  # = MOE_LAYERS: no MoE layer
}
# npu-mla with the MoE layers on: one dense layer, then two MoE layers whose grouped
# sigmoid routing npu_moe_gating_top_k accepts (16 experts in 4 groups of 4, 2 groups
# kept, top-2: more than 2 experts per group). Chaotic in bf16 against transformers, as
# said above, so it is compared with the host device only (the ids of both equal).
NPU_MLA_MOE_SIZE = "npu-mla-moe"
NPU_MLA_MOE_SHAPE: dict[str, Any] = {**NPU_MLA_SHAPE, "first_k_dense_replace": 1}
SIZES[NPU_MLA_MOE_SIZE] = dict(SIZES[NPU_MLA_SIZE])  # DeepSeek-V3 only
# DeepSeek-V3 for expert parallelism with TP=2 on emulated A3 NPUs: npu-mla-moe's MLA and
# routing, with 64 query heads (32 a TP rank: the MLA op takes 32, 64 or 128) and hidden
# 1024 (A3's MC2 kernels take H in [1024, 8192]).
NPU_EP_MLA_SIZE = "npu-ep-mla"
NPU_EP_MLA_SHAPE: dict[str, Any] = {**NPU_MLA_MOE_SHAPE, "num_attention_heads": 64}
# Its MLA projections at gain 1, not 2: softer attention. At gain 2, TP=2 in bf16 (without
# expert parallelism at all) left TP=1's ids at top-2 gaps up to 0.875 nats (measured),
# too loud for the near-tie rule to judge the exchange.
NPU_EP_MLA_GAIN = 1.0
SIZES[NPU_EP_MLA_SIZE] = {
    **SIZES[NPU_MLA_SIZE], "hidden_size": 1024, "num_attention_heads": 64,
    "num_key_value_heads": 64,
}  # DeepSeek-V3 only

# What the MoE styles add to a size's shape (tiny and small only: these models test
# routing and the latent cache, not speed). Expert and latent sizes are small but keep
# every routing feature in play: 8 routed experts in 4 groups, 2 groups kept, top-2.
MOE_SHAPES: dict[str, dict[str, Any]] = {
    "deepseek_v3": {
        "num_key_value_heads": None, "head_dim": None,
        "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16, "v_head_dim": 32,
        "moe_intermediate_size": 64, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "n_shared_experts": 1, "n_group": 4, "topk_group": 2, "first_k_dense_replace": 1,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "num_nextn_predict_layers": 0,
        "rope_interleave": True,
        # What the real checkpoint's config.json says (transformers' class implies them;
        # vLLM reads them to choose the correction bias and sigmoid scoring).
        "topk_method": "noaux_tc", "scoring_func": "sigmoid",
    },
    "deepseek_v2": {
        "num_key_value_heads": None, "head_dim": None,
        "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16, "v_head_dim": 32,
        "moe_intermediate_size": 64, "n_routed_experts": 8, "num_experts_per_tok": 2,
        "n_shared_experts": 2, "first_k_dense_replace": 1, "topk_method": "greedy",
        "n_group": 1, "topk_group": 1,  # as DeepSeek-V2-Lite's config.json (one group: no grouping)
        "routed_scaling_factor": 1.0, "norm_topk_prob": False,
    },
    "qwen3_moe": {
        "moe_intermediate_size": 64, "num_experts": 8, "num_experts_per_tok": 2,
        "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    },
}
MOE_LAYERS = 3  # the DeepSeek styles: one dense layer, then MoE layers
# Text for the tokenizer: enough for a 32k vocabulary, few enough bytes to train in seconds.
CORPUS_BYTES = 6_000_000

LLAMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def make_model(
    out_dir: str | os.PathLike[str],
    style: str = "llama",
    size: str = "tiny",
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Write the model directory unless it already holds this exact model; return its path.

    Safe to call from several processes at once: one builds (under a lock file next
    to the directory) into a temporary directory that is renamed into place.
    """
    if style not in STYLES:
        raise ValueError(f"style {style!r} is not one of {STYLES}")
    if size not in SIZES:
        raise ValueError(f"size {size!r} is not one of {tuple(SIZES)}")
    if style in MTP_STYLES and size not in ("tiny", NPU_MLA_SIZE, NPU_MLA_MOE_SIZE):
        raise ValueError(f"style {style!r} comes in sizes 'tiny', {NPU_MLA_SIZE!r} and "
                         f"{NPU_MLA_MOE_SIZE!r} only")
    if size == NPU_MLA_SIZE and not style.startswith("deepseek"):
        raise ValueError(f"size {size!r} is for the DeepSeek styles (MLA), not {style!r}")
    if size == NPU_MLA_MOE_SIZE and style not in ("deepseek_v3", *MTP_STYLES):
        raise ValueError(f"size {size!r} is for the deepseek_v3 styles, not {style!r}")
    if size == NPU_EP_MLA_SIZE and style != "deepseek_v3":
        raise ValueError(f"size {size!r} is for the deepseek_v3 style, not {style!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": style, "size": size, "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION}
    return build_once(out, STAMP_FILE, stamp, lambda tmp: _build(tmp, style, size, seed, dtype))


def _build(out: Path, style: str, size: str, seed: int, dtype: str) -> None:
    import torch

    shape = SIZES[size]
    tokenizer = _train_tokenizer(shape["vocab_size"], TOKENIZER_FAMILY[style])
    tokenizer.save_pretrained(str(out))
    vocab = len(tokenizer)
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    config = _config(style, shape, vocab, ids, size)

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    with _seeded(seed):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _shape_weights(model, shape["hidden_size"], [ids[t] for t in SPECIAL_TOKENS])
        _shape_moe_weights(model, mla_gain=NPU_EP_MLA_GAIN if size == NPU_EP_MLA_SIZE else 2.0)
        if style in REPEAT_STYLES + MTP_STYLES:
            _shape_repeat_weights(model)
    _save(model, out, dtype, ids)
    if style in MTP_STYLES:
        _split_off_mtp_layer(out)


# DeepSeek-V3.2 (DSA: MLA plus the lightning indexer), its own style and builder
# (make_dsv32_model): two layers, the first dense, the second MoE with 16 experts in 4
# groups (grouped sigmoid routing that the NPU's gating op also takes); index_topk (8)
# smaller than most prompts, so the indexer's selection decides what each query sees.
DSV32_STYLE = "deepseek_v32"
DSV32_SHAPE: dict[str, Any] = {
    **MOE_SHAPES["deepseek_v3"],
    "num_hidden_layers": 2, "n_routed_experts": 16,
    "index_topk": 8, "index_n_heads": 8, "index_head_dim": 32,
}
DSV32_REVISION = 2  # bump when DSV32_SHAPE or its weights change (rebuilds only this model)


def make_dsv32_model(
    out_dir: str | os.PathLike[str], seed: int = 0, dtype: str = "float32"
) -> Path:
    """A tiny DeepSeek-V3.2 (DeepseekV32ForCausalLM) directory, as make_model writes others."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": DSV32_STYLE, "size": "tiny", "seed": seed, "dtype": dtype,
             "version": SCRIPT_VERSION, "revision": DSV32_REVISION}
    return build_once(out, STAMP_FILE, stamp, lambda tmp: _build_dsv32(tmp, seed, dtype))


def _build_dsv32(out: Path, seed: int, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, DeepseekV32Config
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    shape = SIZES["tiny"]
    tokenizer = _train_tokenizer(shape["vocab_size"], "llama")
    tokenizer.save_pretrained(str(out))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    fields = {
        **shape, **DSV32_SHAPE,
        "vocab_size": len(tokenizer), "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS], "pad_token_id": ids[PAD], "initializer_range": 0.02,
    }
    fields = {k: v for k, v in fields.items() if v is not None or k == "q_lora_rank"}
    fields["num_key_value_heads"] = shape["num_attention_heads"]
    config = DeepseekV32Config(
        **fields, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
    )
    config.architectures = ["DeepseekV32ForCausalLM"]
    with _seeded(seed):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _shape_weights(model, shape["hidden_size"], [ids[t] for t in SPECIAL_TOKENS])
        _shape_moe_weights(model)
        _shape_indexer_weights(model)
    _save(model, out, dtype, ids)


def _shape_indexer_weights(model: Any) -> None:
    """The indexer's projections scaled so index scores spread (std ~1 per head before the
    ReLU, weights of both signs) and top-k selection differs from query to query; its
    key norm keeps LayerNorm's unit weight and gets a small random bias."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".indexer." not in name:
                continue
            fan_in = param.shape[-1]
            if name.endswith(("wq_b.weight", "wk.weight")):
                param.normal_(0.0, 2.0 / fan_in**0.5)
            elif name.endswith("weights_proj.weight"):
                param.normal_(0.0, 4.0 / fan_in**0.5)
            elif name.endswith("k_norm.bias"):
                param.normal_(0.0, 0.2)


# DeepSeek-V4 (compressed sparse attention, mHC), its own style and builder
# (make_dsv4_model): three layers, one of each attention kind (sliding window only; CSA:
# KV compressed 4:1 in overlapping windows with the lightning indexer picking index_topk of
# the compressed rows; HCA: KV compressed 128:1), the first layer's MoE hash-routed by token
# id, the rest routed by sqrtsoftplus scores; 4 hyper-connection streams. vLLM's V4 layers
# branch on exactly the rates 4 and 128, so those are kept; the window (16) and the top-k
# (4, over 16 tokens' worth of CSA rows) are small, so prompts of ~150+ tokens exercise
# every path. Head sizes are V4's proportions scaled down (one shared KV head, rope on the
# last quarter of each head).
DSV4_STYLE = "deepseek_v4"
DSV4_SHAPE: dict[str, Any] = {
    "hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 64, "q_lora_rank": 64, "partial_rotary_factor": 0.25,
    "layer_types": [
        "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
    ],
    "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
    "mlp_layer_types": ["hash_moe", "moe", "moe"],
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "moe_intermediate_size": 64, "sliding_window": 16, "o_groups": 2, "o_lora_rank": 32,
    "index_n_heads": 4, "index_head_dim": 32, "index_topk": 4, "hc_mult": 4,
    "num_nextn_predict_layers": 0,
}
# V4's checkpoints scale the compressed layers' rope with YaRN (factor 16 over a 64K original
# context); the tiny model does the same at its scale (factor 4 over MAX_POSITIONS / 4), so
# the rope pairs that turn less than once in the original context are interpolated within
# the tests' prompts, and an attention factor other than V4's 1.0 checks cos and sin's scale.
DSV4_COMPRESS_ROPE: dict[str, Any] = {
    "rope_type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
    "attention_factor": 1.1,
}


def make_dsv4_model(
    out_dir: str | os.PathLike[str], seed: int = 0, dtype: str = "float32"
) -> Path:
    """A tiny DeepSeek-V4 (DeepseekV4ForCausalLM) directory, as make_model writes others."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": DSV4_STYLE, "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION,
             "compress_rope": DSV4_COMPRESS_ROPE}
    return build_once(out, STAMP_FILE, stamp, lambda tmp: _build_dsv4(tmp, seed, dtype))


def _build_dsv4(out: Path, seed: int, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, DeepseekV4Config
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _train_tokenizer(SIZES["tiny"]["vocab_size"], "llama")
    tokenizer.save_pretrained(str(out))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    config = DeepseekV4Config(
        **DSV4_SHAPE, vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS,
        rope_parameters={**DSV4_COMPRESS_ROPE,
                         "original_max_position_embeddings": MAX_POSITIONS // 4},
        rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=ids[BOS],
        eos_token_id=ids[EOS], pad_token_id=ids[PAD], initializer_range=0.02,
    )
    config.architectures = ["DeepseekV4ForCausalLM"]
    with _seeded(seed):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _shape_weights(model, DSV4_SHAPE["hidden_size"], [ids[t] for t in SPECIAL_TOKENS])
        _shape_moe_weights(model)
        _shape_dsv4_weights(model)
    _save(model, out, dtype, ids)


def _shape_dsv4_weights(model: Any) -> None:
    """After _shape_weights and _shape_moe_weights: V4's own parts away from their flat
    init. Projections by fan-in (queries, compressor and indexer 2x, so scores and pooling
    gates spread); norms near one, not exactly; sinks and compressor position biases of
    std ~1; the hyper-connections' projections data-dependent (scales near one, biases of
    both signs), so the 4 streams mix differently per token; the hash router's table a
    random distinct expert pair per token id."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            fan_in = param.shape[-1]
            if name.endswith(("q_b_proj.weight", "gate_proj.weight", "weights_proj.weight")) and (
                ".self_attn." in name
            ):
                param.normal_(0.0, 2.0 / fan_in**0.5)
            elif name.endswith(("q_a_proj.weight", "kv_proj.weight", "o_a_proj.weight",
                                "o_b_proj.weight")):
                param.normal_(0.0, 1.0 / fan_in**0.5)
            elif name.endswith("norm.weight"):
                param.normal_(1.0, 0.1)
            elif name.endswith(("self_attn.sinks", "position_bias")):
                param.normal_(0.0, 1.0)
            elif name.endswith(("_hc.fn", "hc_head.hc_fn")):
                param.normal_(0.0, 1.0 / fan_in**0.5)
            elif name.endswith(("_hc.base", "hc_head.hc_base")):
                param.normal_(0.0, 0.5)
            elif name.endswith(("_hc.scale", "hc_head.hc_scale")):
                param.uniform_(0.5, 1.5)
        for name, buf in model.named_buffers():
            if name.endswith("tid2eid"):
                experts, top_k = model.config.n_routed_experts, buf.shape[-1]
                buf.copy_(torch.stack([torch.randperm(experts)[:top_k] for _ in buf]))


def _split_off_mtp_layer(out: Path) -> None:
    """The model was built with one layer more than its config will say: that last layer
    becomes the MTP layer's block (model.layers.<L>.*, as DeepSeek-V3 checkpoints hold
    it), with its enorm/hnorm/eh_proj and shared head added, and the config says
    num_hidden_layers=L, num_nextn_predict_layers=1. Transformers ignores those weights;
    vLLM's DeepSeekMTP loads them."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((out / "config.json").read_text())
    layers = config["num_hidden_layers"] - 1
    hidden = config["hidden_size"]
    (weights_file,) = out.glob("*.safetensors")
    weights = load_file(str(weights_file))
    mtp = f"model.layers.{layers}."
    with torch.no_grad():
        for name, tensor in weights.items():
            # The block adds little, so the hidden state passed in decides the proposal.
            if name.startswith(mtp) and name.endswith(("o_proj.weight", "down_proj.weight",
                                                       "experts.down_proj")):
                tensor.mul_(0.1)
        eye = torch.eye(hidden)
        weights[mtp + "enorm.weight"] = torch.ones(hidden)
        weights[mtp + "hnorm.weight"] = torch.ones(hidden)
        weights[mtp + "eh_proj.weight"] = torch.cat([0.1 * eye, eye], dim=1).contiguous()
        weights[mtp + "shared_head.norm.weight"] = weights["model.norm.weight"].clone()
        weights[mtp + "shared_head.head.weight"] = weights["lm_head.weight"].clone()
    save_file(weights, str(weights_file), metadata={"format": "pt"})
    config["num_hidden_layers"] = layers
    config["num_nextn_predict_layers"] = 1
    for key, value in list(config.items()):  # per-layer lists lose the MTP layer's entry
        if isinstance(value, list) and len(value) == layers + 1 and key.endswith("_types"):
            config[key] = value[:layers]
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def make_draft(out_dir: str | os.PathLike[str], target_dir: str | os.PathLike[str],
               kind: str) -> Path:
    """Write a draft model of `kind` (DRAFT_KINDS) for the Llama-style target model in
    target_dir (made by make_model); return its path. Built once per target stamp."""
    import json

    if kind not in DRAFT_KINDS:
        raise ValueError(f"draft kind {kind!r} is not one of {DRAFT_KINDS}")
    target = Path(target_dir).resolve()
    target_stamp = json.loads((target / STAMP_FILE).read_text())
    if TOKENIZER_FAMILY[target_stamp["style"]] != "llama" or target_stamp["style"] in (
        MOE_STYLES + MTP_STYLES
    ):
        raise ValueError(f"drafts are made for the Llama styles, not {target_stamp['style']!r}")
    stamp = {"draft": kind, "target": target_stamp, "version": SCRIPT_VERSION}
    out = Path(out_dir).resolve()
    return build_once(out, STAMP_FILE, stamp, lambda tmp: _build_draft(tmp, target, kind))


def _build_draft(out: Path, target: Path, kind: str) -> None:
    import json
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((target / "config.json").read_text())
    (weights_file,) = target.glob("*.safetensors")
    weights = load_file(str(weights_file))
    hidden = config["hidden_size"]
    eye = torch.eye(hidden)
    layer0 = {
        name.removeprefix("model.layers.0."): tensor
        for name, tensor in weights.items()
        if name.startswith("model.layers.0.")
    }
    with torch.no_grad():
        for name, tensor in layer0.items():
            if name.endswith(("o_proj.weight", "down_proj.weight")) and kind != "draft":
                tensor.mul_(0.1)  # the layer adds little: the input decides the proposal
    config["num_hidden_layers"] = 1
    if kind == "draft":
        draft = {f"model.layers.0.{k}": v for k, v in layer0.items()}
        for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
            draft[name] = weights[name]
        for path in target.iterdir():  # the tokenizer, so the draft is a model of its own
            if path.name.startswith("tokenizer") or path.name == "special_tokens_map.json":
                shutil.copy(path, out / path.name)
    elif kind == "eagle":
        # fc over [embedding of the token, target hidden]: the token's embedding goes
        # through, and the target's head (shared) scores it highest (llama_repeat's head
        # leans towards the input embedding).
        draft = {f"layers.0.{k}": v for k, v in layer0.items() if "input_layernorm" not in k}
        draft["fc.weight"] = torch.cat([eye, 0.1 * eye], dim=1).contiguous()
        config["architectures"] = ["EagleLlamaForCausalLM"]
        config["model_type"] = "llama"
    else:
        # fc over the target's hidden states at layer ids 0, 1 and L (the last, pre-norm):
        # mostly the last, so the draft's head (a copy of the target's) proposes what the
        # target predicted one position earlier.
        layers = json.loads((target / "config.json").read_text())["num_hidden_layers"]
        heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        head_dim = config.get("head_dim") or hidden // heads
        draft = {f"midlayer.{k}": v for k, v in layer0.items() if "_proj" not in k
                 or "mlp" in k or "o_proj" in k}
        gen = torch.Generator().manual_seed(1)
        for proj, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            w = layer0[f"self_attn.{proj}_proj.weight"]
            extra = torch.randn(rows * head_dim, hidden, generator=gen) / hidden**0.5
            draft[f"midlayer.self_attn.{proj}_proj.weight"] = torch.cat([w, extra], dim=1)
        draft["midlayer.hidden_norm.weight"] = torch.ones(hidden)
        draft["fc.weight"] = torch.cat([0.1 * eye, 0.1 * eye, eye], dim=1).contiguous()
        draft["norm.weight"] = weights["model.norm.weight"]
        draft["lm_head.weight"] = weights["lm_head.weight"]
        config["architectures"] = ["LlamaForCausalLMEagle3"]
        config["model_type"] = "llama"
        config["draft_vocab_size"] = config["vocab_size"]
        config["target_hidden_size"] = hidden
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": [0, 1, layers]}
    draft = {k: v.contiguous() for k, v in draft.items()}
    save_file(draft, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _config(
    style: str, shape: dict[str, int], vocab: int, ids: dict[str, int], size: str = "tiny"
) -> Any:
    from transformers import LlamaConfig, Qwen3Config

    family = TOKENIZER_FAMILY[style]
    common: dict[str, Any] = {
        **shape,
        "vocab_size": vocab,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS] if family == "llama" else ids[IM_END],
        "pad_token_id": ids[PAD],
        "initializer_range": 0.02,
    }
    if style in MOE_STYLES + MTP_STYLES:
        return _moe_config(style, common, size)
    if style in ("llama", *REPEAT_STYLES):
        return LlamaConfig(
            **common, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}
        )
    return Qwen3Config(
        **common,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
    )


def _moe_config(style: str, common: dict[str, Any], size: str) -> Any:
    from transformers import DeepseekV2Config, DeepseekV3Config, Qwen3MoeConfig

    mtp = style in MTP_STYLES
    if mtp:
        style = "deepseek_v3"
    fields = {**common, **MOE_SHAPES[style]}
    if size == NPU_MLA_SIZE:
        fields.update(NPU_MLA_SHAPE)
    elif size == NPU_MLA_MOE_SIZE:
        fields.update(NPU_MLA_MOE_SHAPE)
    elif size == NPU_EP_MLA_SIZE:
        fields.update(NPU_EP_MLA_SHAPE)
    if style == "qwen3_moe":
        return Qwen3MoeConfig(
            **fields,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            use_sliding_window=False,
        )
    fields = {k: v for k, v in fields.items() if v is not None or k == "q_lora_rank"}
    fields["num_hidden_layers"] = max(MOE_LAYERS, common["num_hidden_layers"]) + int(mtp)
    fields["num_key_value_heads"] = common["num_attention_heads"]
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    cls = DeepseekV3Config if style == "deepseek_v3" else DeepseekV2Config
    return cls(**fields, rope_parameters=rope)


def _shape_moe_weights(model: Any, mla_gain: float = 2.0) -> None:
    """Routing and the latent attention, scaled so neither is flat.

    Routers start at zero (Qwen3-MoE) or std 0.02, which routes every token alike;
    here logits get std ~2 so tokens pick different experts. Experts are stored as
    3-d tensors [E, out, in] and scaled by their fan-in like the dense MLPs. The
    DeepSeek-V3 correction bias is non-zero so selection and weights differ, as they
    do in the real model. MLA's query and latent up-projections are scaled like the
    dense models' q/k so attention is not uniform.
    """
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            fan_in = param.shape[-1]
            if name.endswith(("mlp.gate.weight", "experts.gate_up_proj")):
                param.normal_(0.0, 2.0 / fan_in**0.5)
            elif name.endswith("experts.down_proj"):
                param.normal_(0.0, 1.0 / fan_in**0.5)
            elif name.endswith(
                ("q_b_proj.weight", "kv_b_proj.weight", "kv_a_proj_with_mqa.weight")
            ):
                # (DeepSeek-V2-Lite's q_proj is scaled by _shape_weights, as any q_proj.)
                param.normal_(0.0, mla_gain / fan_in**0.5)
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.normal_(0.0, 0.2)


def _shape_weights(model: Any, hidden: int, special_ids: list[int]) -> None:
    """Rescale the random init so greedy decoding depends on the prompt and moves on.

    With every matrix at std 0.02 the residual stream is dominated by the current
    token's embedding and logits are nearly flat, so continuations collapse into one
    repeated token. Unit-scale embeddings, layer outputs scaled to keep attention in
    play, and an lm_head giving logits of std ~4 make continuations vary with the
    prompt. Special tokens get zero output weights, so greedy decoding never emits
    them and always runs to the requested length.
    """
    import torch

    with torch.no_grad():
        model.get_input_embeddings().weight.normal_(0.0, 1.0)
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.normal_(0.0, 1.0 / param.shape[-1] ** 0.5)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                param.normal_(0.0, 2.0 / param.shape[-1] ** 0.5)
        head = model.get_output_embeddings().weight
        head.normal_(0.0, 4.0 / hidden**0.5)
        head[special_ids] = 0.0


def _shape_repeat_weights(model: Any) -> None:
    """After _shape_weights: layer outputs at 0.8 scale and an lm_head that is mostly
    the input embedding, so the current token usually scores highest and greedy decoding
    settles into repeats; attention still moves the logits (not a pure copy model)."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.mul_(0.8)
        head = model.get_output_embeddings().weight
        special = (head == 0).all(dim=1)
        head.mul_(0.6).add_(model.get_input_embeddings().weight)
        head[special] = 0.0


def _corpus() -> list[str]:
    """Stdlib module sources, in name order, up to CORPUS_BYTES characters."""
    texts: list[str] = []
    total = 0
    for text in stdlib_sources():
        texts.append(text)
        total += len(text)
        if total >= CORPUS_BYTES:
            break
    if total < 100_000:
        raise RuntimeError(f"too little standard-library text to train a tokenizer ({total} chars)")
    return texts


def _train_tokenizer(vocab_size: int, style: str) -> Any:
    """style: a TOKENIZER_FAMILY value ("llama" puts BOS first, "qwen3" does not)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    if style == "llama":
        # Llama tokenizers put BOS in front of every encoded text.
        bos_id = tok.token_to_id(BOS)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS if style == "llama" else IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END] if style == "llama" else [IM_START],
        chat_template=LLAMA_CHAT_TEMPLATE if style == "llama" else QWEN3_CHAT_TEMPLATE,
        model_max_length=MAX_POSITIONS,
        padding_side="left",
        add_bos_token=style == "llama",
    )


# Qwen3-Next (hybrid): three gated-delta-net (linear attention) layers, then one full
# attention layer with its output gate, every layer a sparse MoE with a gated shared
# expert. Tiny, for the hybrid state cache and the GDN ops; the qwen3 tokenizer.
QWEN3_NEXT_STAMP_FILE = ".make_qwen3_next.json"
QWEN3_NEXT_SHAPE: dict[str, Any] = {
    "vocab_size": 4096, "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "partial_rotary_factor": 0.5,
    # Head dims 128: torch_npu's npu_chunk_gated_delta_rule takes Dk = Dv = 128 only.
    "linear_num_key_heads": 1, "linear_num_value_heads": 2,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "norm_topk_prob": True,
}


def make_qwen3_next(
    out_dir: str | os.PathLike[str], seed: int = 0, dtype: str = "float32"
) -> Path:
    """Write the tiny Qwen3-Next model directory unless it already holds it; its path."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": "qwen3_next", "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION}
    return build_once(
        out, QWEN3_NEXT_STAMP_FILE, stamp, lambda tmp: _build_qwen3_next(tmp, seed, dtype)
    )


def _build_qwen3_next(out: Path, seed: int, dtype: str) -> None:
    from transformers import Qwen3NextConfig

    _build_hybrid(out, Qwen3NextConfig, QWEN3_NEXT_SHAPE, seed, dtype, moe=True)


def _build_hybrid(
    out: Path, config_class: Any, shape: dict[str, Any], seed: int, dtype: str, moe: bool,
    architecture: str | None = None,
) -> None:
    """A Qwen3-Next-layout model (GDN layers, then full attention) of `config_class`, its
    weights shaped so the routing (moe) and the GDN states matter; the qwen3 tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _train_tokenizer(shape["vocab_size"], "qwen3")
    tokenizer.save_pretrained(str(out))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    config = config_class(
        **{**shape, "vocab_size": len(tokenizer)},
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=ids[BOS],
        eos_token_id=ids[IM_END],
        pad_token_id=ids[PAD],
        initializer_range=0.02,
        rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5
        },
    )
    if architecture is not None:
        config.architectures = [architecture]
    with _seeded(seed):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _shape_weights(model, shape["hidden_size"], [ids[t] for t in SPECIAL_TOKENS])
        if moe:
            _shape_moe_weights(model)
        _shape_gdn_weights(model)
    _save(model, out, dtype, ids)



# Qwen3.5 (text; dense and MoE): Qwen3-Next's hybrid layout with Qwen3.5's layers: the
# gated delta net's input projections stored apart (in_proj_qkv, in_proj_z, in_proj_b,
# in_proj_a, not interleaved per key head), zero-centred norms, the full attention's
# output gate. Three GDN layers then one full attention layer; the qwen3 tokenizer.
QWEN3_5_STAMP_FILE = ".make_qwen3_5.json"
QWEN3_5_STYLES = ("qwen3_5", "qwen3_5_moe")
QWEN3_5_SHAPE: dict[str, Any] = {
    key: value for key, value in QWEN3_NEXT_SHAPE.items()
    if key not in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                   "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
                   "norm_topk_prob")
}
QWEN3_5_MOE_SHAPE: dict[str, Any] = {
    **QWEN3_5_SHAPE, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64,
}


def make_qwen3_5(
    out_dir: str | os.PathLike[str], style: str = "qwen3_5", seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Write the tiny Qwen3.5 text model (style qwen3_5: dense MLPs; qwen3_5_moe: sparse MoE
    with a gated shared expert) unless the directory already holds it; its path."""
    if style not in QWEN3_5_STYLES:
        raise ValueError(f"style {style!r} is not one of {QWEN3_5_STYLES}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": style, "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION}
    return build_once(
        out, QWEN3_5_STAMP_FILE, stamp, lambda tmp: _build_qwen3_5(tmp, style, seed, dtype)
    )


def _build_qwen3_5(out: Path, style: str, seed: int, dtype: str) -> None:
    from transformers import Qwen3_5MoeTextConfig, Qwen3_5TextConfig

    moe = style == "qwen3_5_moe"
    config_class = Qwen3_5MoeTextConfig if moe else Qwen3_5TextConfig
    shape = QWEN3_5_MOE_SHAPE if moe else QWEN3_5_SHAPE
    architecture = "Qwen3_5MoeForCausalLM" if moe else "Qwen3_5ForCausalLM"
    _build_hybrid(out, config_class, shape, seed, dtype, moe, architecture)


def _save(model: Any, out: Path, dtype: str, ids: dict[str, int]) -> None:
    """The model in its dtype, with the greedy generation config every test model carries."""
    import torch
    from transformers import GenerationConfig

    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.config.dtype = dtype
    model.generation_config = GenerationConfig(
        bos_token_id=ids[BOS],
        eos_token_id=[ids[EOS], ids[IM_END]],
        pad_token_id=ids[PAD],
        do_sample=False,
    )
    model.save_pretrained(str(out))

def _shape_gdn_weights(model: Any) -> None:
    """The linear-attention layers, scaled so their state matters: projections by fan-in
    (values and keys of unit size, the output like o_proj), a short causal convolution of
    unit-size taps, decays exp(-A softplus(a + dt_bias)) mostly in (0.3, 1) so the state
    carries over many tokens, norms and the shared-expert gate away from their flat init."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            fan_in = param.shape[-1]
            if name.endswith(
                ("in_proj_qkvz.weight", "in_proj_ba.weight", "linear_attn.out_proj.weight",
                 "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                 "in_proj_a.weight")
            ):
                param.normal_(0.0, 1.0 / fan_in**0.5)
            elif name.endswith("conv1d.weight"):
                param.normal_(0.0, 0.5)
            elif name.endswith("A_log"):
                param.copy_(torch.empty_like(param).uniform_(0.05, 0.5).log())
            elif name.endswith("dt_bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith("shared_expert_gate.weight"):
                param.normal_(0.0, 1.0 / fan_in**0.5)
            elif name.endswith(("norm.weight", "q_norm.weight", "k_norm.weight")):
                param.normal_(0.0, 0.1)  # (1 + weight) norms: near one, not exactly


# Kimi-Linear (KimiLinearForCausalLM): three Kimi-delta-attention (KDA) layers, then one NoPE
# MLA layer (Moonshot's published layout, 1-based layer lists in linear_attn_config, the
# form vLLM's config and transformers' converter both read); layer 0 a dense MLP, the rest
# sparse MoE (sigmoid routing with a correction bias, one shared expert); the qwen3 tokenizer.
KIMI_LINEAR_STAMP_FILE = ".make_kimi_linear.json"
KIMI_LINEAR_SHAPE: dict[str, Any] = {
    "vocab_size": 4096, "hidden_size": 128, "intermediate_size": 256,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "q_lora_rank": None, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
    "v_head_dim": 32, "mla_use_nope": True,
    "num_experts": 8, "num_experts_per_token": 2, "moe_intermediate_size": 64,
    "num_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "moe_renormalize": True, "moe_router_activation_func": "sigmoid",
    "routed_scaling_factor": 2.0, "use_grouped_topk": True, "num_expert_group": 1,
    "topk_group": 1,
    "linear_attn_config": {
        "head_dim": 32, "num_heads": 4, "short_conv_kernel_size": 4,
        "kda_layers": [1, 2, 3], "full_attn_layers": [4],
    },
}


# Kimi-Linear with its NoPE MLA layer at the shapes torch_npu's MLA attention documents
# (NPU_MLA_SHAPE: latent 512, rope 64, Q/K head 192, V 128, 32 query heads), for the
# emulated-NPU runs; the KDA layers and the MoE as the tiny one.
KIMI_LINEAR_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {},
    NPU_MLA_SIZE: {
        "num_attention_heads": 32, "num_key_value_heads": 32, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    },
}


def make_kimi_linear(
    out_dir: str | os.PathLike[str], seed: int = 0, dtype: str = "float32", size: str = "tiny"
) -> Path:
    """Write the Kimi-Linear model directory (size "tiny" or "npu-mla", the MLA layer at the
    NPU op's shapes) unless it already holds it; its path."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    if size not in KIMI_LINEAR_SIZES:
        raise ValueError(f"size {size!r} is not one of {tuple(KIMI_LINEAR_SIZES)}")
    out = Path(out_dir).resolve()
    stamp: dict[str, Any] = {
        "style": "kimi_linear", "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION
    }
    if size != "tiny":
        stamp["size"] = size  # the tiny model's stamp as before: its directories stay valid
    return build_once(
        out, KIMI_LINEAR_STAMP_FILE, stamp,
        lambda tmp: _build_kimi_linear(tmp, seed, dtype, KIMI_LINEAR_SIZES[size]),
    )


def _build_kimi_linear(out: Path, seed: int, dtype: str, shape: dict[str, Any]) -> None:
    import json

    import torch
    from transformers import AutoModelForCausalLM, KimiLinearConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _train_tokenizer(KIMI_LINEAR_SHAPE["vocab_size"], "qwen3")
    tokenizer.save_pretrained(str(out))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    published = {
        **KIMI_LINEAR_SHAPE,
        **shape,
        "vocab_size": len(tokenizer),
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "max_position_embeddings": MAX_POSITIONS,
        # 1e-5: vLLM's KDA output norm takes its default eps, transformers' the config's.
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[IM_END],
        "pad_token_id": ids[PAD],
        "initializer_range": 0.02,
        "hidden_act": "silu",
        "dtype": dtype,
    }
    # transformers' config names some keys its own way; it reads linear_attn_config itself.
    config = KimiLinearConfig(
        **{k: v for k, v in published.items()
           if k not in ("num_experts_per_token", "moe_renormalize", "num_shared_experts",
                        "moe_router_activation_func", "use_grouped_topk", "moe_layer_freq",
                        "num_expert_group", "mla_use_nope", "architectures", "model_type",
                        "dtype", "num_experts")},
        num_experts_per_tok=KIMI_LINEAR_SHAPE["num_experts_per_token"],
        norm_topk_prob=True,
        n_shared_experts=1,
        num_local_experts=KIMI_LINEAR_SHAPE["num_experts"],
        n_group=1,
    )
    with _seeded(seed):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _shape_weights(model, KIMI_LINEAR_SHAPE["hidden_size"], [ids[t] for t in SPECIAL_TOKENS])
        _shape_moe_weights(model)
        _shape_kda_weights(model)
    _save(model, out, dtype, ids)
    # The published config (what vLLM's KimiLinearConfig reads), not transformers' re-keyed one.
    (out / "config.json").write_text(json.dumps(published, indent=2) + "\n")
    _dense_mlp_names(out / "model.safetensors")


def _dense_mlp_names(path: Path) -> None:
    """transformers writes the dense first layer's MLP under block_sparse_moe (its converter
    reverses the MoE's renaming for every mlp); the published checkpoints, and vLLM's loader,
    keep it under mlp (transformers reads either)."""
    import re

    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path))
    dense = re.compile(r"(\.layers\.\d+\.)block_sparse_moe\.((gate|up|down)_proj\.weight)$")
    save_file({dense.sub(r"\1mlp.\2", k): v for k, v in tensors.items()}, str(path),
              metadata={"format": "pt"})


def _shape_kda_weights(model: Any) -> None:
    """The KDA layers, scaled so their states and per-channel gates matter: q/k/v by fan-in,
    unit-size convolution taps, forget-gate logits that spread the channels' decays over
    (0.2, 1) (A per head, dt_bias per channel), beta logits of std ~1, an output gate and norm
    away from their flat init; the MoE's shared expert by fan-in."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            fan_in = param.shape[-1]
            if ".self_attn." not in name and "shared_experts" not in name:
                continue
            if name.endswith(("v_proj.weight", "b_proj.weight", "g_a_proj.weight",
                              "g_b_proj.weight", "f_a_proj.weight", "f_b_proj.weight",
                              "shared_experts.gate_proj.weight",
                              "shared_experts.up_proj.weight")):
                param.normal_(0.0, 1.0 / fan_in**0.5)
            elif name.endswith("conv1d.weight"):
                param.normal_(0.0, 0.5)
            elif name.endswith("A_log"):
                param.copy_(torch.empty_like(param).uniform_(0.05, 0.5).log())
            elif name.endswith("dt_bias"):
                param.normal_(-1.0, 1.0)
            elif name.endswith("o_norm.weight"):
                param.normal_(1.0, 0.2)


# Vision-language (Qwen2.5-VL, Qwen3-VL): the qwen3 tokenizer with the vision special tokens,
# a chat template that places each image, the image and video processors (small images: at
# most VL_MAX_PIXELS, so a picture is a few dozen patches), a two-block vision tower and a
# two-layer language model with 3-D (M-RoPE) rotary sections. Weights scaled as the text
# styles' (_shape_weights) and the tower's by fan-in, so what an image holds moves the ids.
VL_STAMP_FILE = ".make_vl.json"
VL_STYLES = ("qwen2_5_vl", "qwen3_vl")
VL_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
VL_MIN_PIXELS = 32 * 32
VL_MAX_PIXELS = 128 * 128
VL_TEXT_SHAPE: dict[str, Any] = {
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
}
VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' or item['type'] == 'image_url' or 'image' in item %}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def make_vl_model(
    out_dir: str | os.PathLike[str], style: str = "qwen2_5_vl", seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Write the tiny vision-language model (style qwen2_5_vl or qwen3_vl) with its
    processor unless the directory already holds it; its path."""
    if style not in VL_STYLES:
        raise ValueError(f"style {style!r} is not one of {VL_STYLES}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": style, "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION}
    return build_once(out, VL_STAMP_FILE, stamp, lambda tmp: _build_vl(tmp, style, seed, dtype))


def _vl_processor(style: str, tokenizer: Any) -> Any:
    from transformers import (
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
        Qwen3VLProcessor,
        Qwen3VLVideoProcessor,
    )

    patch = 14 if style == "qwen2_5_vl" else 16
    size = {"shortest_edge": VL_MIN_PIXELS, "longest_edge": VL_MAX_PIXELS}
    image = Qwen2VLImageProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2,
                                  size=size)
    if style == "qwen2_5_vl":
        video = Qwen2VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2,
                                      size=size)
        return Qwen2_5_VLProcessor(image, tokenizer, video, chat_template=VL_CHAT_TEMPLATE)
    video = Qwen3VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2,
                                  size=size)
    return Qwen3VLProcessor(image, tokenizer, video, chat_template=VL_CHAT_TEMPLATE)


def _vl_config(style: str, vocab: int, ids: dict[str, int]) -> Any:
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    text: dict[str, Any] = {
        **VL_TEXT_SHAPE, "vocab_size": vocab, "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6, "bos_token_id": ids[BOS], "eos_token_id": ids[IM_END],
        "pad_token_id": ids[PAD], "initializer_range": 0.02, "tie_word_embeddings": False,
        # head_dim 32: 16 rotary frequencies split over (time, height, width)
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "mrope_section": [4, 6, 6]},
    }
    vision: dict[str, Any] = {
        "depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
        "out_hidden_size": VL_TEXT_SHAPE["hidden_size"], "spatial_merge_size": 2,
        "temporal_patch_size": 2, "in_channels": 3,
    }
    tokens = {
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"], "tie_word_embeddings": False,
    }
    if style == "qwen2_5_vl":
        vision.update(patch_size=14, window_size=56, fullatt_block_indexes=[1],
                      hidden_act="silu", tokens_per_second=2)
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
        config.architectures = ["Qwen2_5_VLForConditionalGeneration"]
    else:
        text["rope_parameters"]["mrope_interleaved"] = True
        vision.update(patch_size=16, num_position_embeddings=64, deepstack_visual_indexes=[0],
                      hidden_act="gelu_pytorch_tanh")
        config = Qwen3VLConfig(text_config=text, vision_config=vision, **tokens)
        config.architectures = ["Qwen3VLForConditionalGeneration"]
    return config


def _build_vl(out: Path, style: str, seed: int, dtype: str) -> None:
    import torch
    from transformers import AutoModelForImageTextToText
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _train_tokenizer(4096, "qwen3")
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, *VL_TOKENS]})
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS + VL_TOKENS}
    _vl_processor(style, tokenizer).save_pretrained(str(out))
    config = _vl_config(style, len(tokenizer), ids)
    with _seeded(seed):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        _shape_weights(model, VL_TEXT_SHAPE["hidden_size"],
                       [ids[t] for t in SPECIAL_TOKENS + VL_TOKENS])
        _shape_vision_weights(model)
    _save(model, out, dtype, ids)


def _shape_vision_weights(model: Any) -> None:
    """The tower's matrices by fan-in (unit-size activations through its blocks and the
    merger), so the image's pixels, not the init's bias, decide what it feeds the text."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if "visual" in name and name.endswith("weight") and param.dim() >= 2:
                fan_in = param[0].numel()
                param.normal_(0.0, 1.0 / fan_in**0.5)


# LoRA adapters for a dense model, made with peft (a real producer; a dev extra).
LORA_STAMP_FILE = ".make_lora.json"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_RANK = 8


def make_lora_adapter(
    out_dir: str | os.PathLike[str], base_dir: str | os.PathLike[str], seed: int = 1
) -> Path:
    """Write a peft LoRA adapter (rank LORA_RANK on the attention and MLP projections) for
    the model in `base_dir` unless `out_dir` already holds it; return its path.

    Both A and B are random (peft's init leaves B zero, which would change nothing), scaled
    so the adapter moves greedy ids away from the base model's. Needs `peft`.
    """
    out = Path(out_dir).resolve()
    base = Path(base_dir).resolve()
    stamp = {"base": str(base), "seed": seed, "rank": LORA_RANK, "version": SCRIPT_VERSION}
    return build_once(out, LORA_STAMP_FILE, stamp, lambda tmp: _build_lora(tmp, base, seed))


def _build_lora(out: Path, base: Path, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    config = LoraConfig(
        r=LORA_RANK, lora_alpha=2 * LORA_RANK, target_modules=list(LORA_TARGETS),
        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", init_lora_weights=False,
    )
    with _seeded(seed):
        peft_model = get_peft_model(model, config)
        for name, param in peft_model.named_parameters():
            if "lora_A" in name or "lora_B" in name:
                with torch.no_grad():
                    param.normal_(0.0, 0.25)
    peft_model.save_pretrained(str(out))


# gpt-oss (GptOssForCausalLM): sliding-window layers alternating with full ones (layer 0
# slides, as in transformers and vLLM), learned per-head attention sinks, biased
# attention projections, and MoE experts with a router bias, interleaved gate/up
# columns, the clamped SwiGLU (alpha 1.702, limit 7) and expert biases. Tiny, and a
# window (16) shorter than the tests' prompts. bf16 and float32 like the other styles.
GPT_OSS_STAMP_FILE = ".make_gpt_oss.json"
GPT_OSS_SHAPE: dict[str, Any] = {
    "vocab_size": 4096, "hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 16,
}
GPT_OSS_ROPE: dict[str, Any] = {  # gpt-oss's yarn, scaled down to this model's positions
    "rope_type": "yarn", "rope_theta": 150000.0, "factor": 2.0, "beta_fast": 32.0,
    "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096,
}


def make_gpt_oss_model(
    out_dir: str | os.PathLike[str], seed: int = 0, dtype: str = "float32"
) -> Path:
    """Write the tiny gpt-oss model unless `out_dir` already holds it; return its path."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {DTYPES}")
    out = Path(out_dir).resolve()
    stamp = {"style": "gpt_oss", "seed": seed, "dtype": dtype, "version": SCRIPT_VERSION}
    return build_once(out, GPT_OSS_STAMP_FILE, stamp, lambda tmp: _build_gpt_oss(tmp, seed, dtype))


def _build_gpt_oss(out: Path, seed: int, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, GptOssConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _train_tokenizer(GPT_OSS_SHAPE["vocab_size"], "llama")
    tokenizer.save_pretrained(str(out))
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in SPECIAL_TOKENS}
    config = GptOssConfig(
        **{**GPT_OSS_SHAPE, "vocab_size": len(tokenizer)},
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters=dict(GPT_OSS_ROPE),
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
        initializer_range=0.02,
    )
    with _seeded(seed):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _shape_weights(model, GPT_OSS_SHAPE["hidden_size"], [ids[t] for t in SPECIAL_TOKENS])
        _shape_gpt_oss_weights(model)
    _save(model, out, dtype, ids)


def _shape_gpt_oss_weights(model: Any) -> None:
    """After _shape_weights: sinks of std 1 (some heads keep much of their weight on the
    sink, some little), routers with logits of std ~2 and a bias, experts scaled by
    their fan-in ([E, in, out] here) with biases, attention biases small but non-zero."""
    import torch

    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("self_attn.sinks"):
                param.normal_(0.0, 1.0)
            elif name.endswith("router.weight"):
                param.normal_(0.0, 2.0 / param.shape[-1] ** 0.5)
            elif name.endswith("router.bias"):
                param.normal_(0.0, 0.5)
            elif name.endswith("experts.gate_up_proj"):
                param.normal_(0.0, 2.0 / param.shape[1] ** 0.5)
            elif name.endswith("experts.down_proj"):
                param.normal_(0.0, 1.0 / param.shape[1] ** 0.5)
            elif name.endswith(("_proj_bias", "_proj.bias")):
                param.normal_(0.0, 0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="model directory to write")
    parser.add_argument(
        "--style", choices=(*STYLES, DSV32_STYLE, DSV4_STYLE, *VL_STYLES), default="llama"
    )
    parser.add_argument("--size", choices=tuple(SIZES), default="tiny")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument(
        "--draft-of", metavar="TARGET_DIR", help="write a draft model for this target instead"
    )
    parser.add_argument("--draft-kind", choices=DRAFT_KINDS, default="eagle3")
    parser.add_argument(
        "--lora-base", help="write a peft LoRA adapter for this model dir to --out instead"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.draft_of:
        out = make_draft(args.out, args.draft_of, args.draft_kind)
    elif args.lora_base:
        out = make_lora_adapter(args.out, args.lora_base, args.seed)
    elif args.style in VL_STYLES:
        out = make_vl_model(args.out, args.style, args.seed, args.dtype)
    elif args.style == DSV32_STYLE:
        out = make_dsv32_model(args.out, args.seed, args.dtype)
    elif args.style == DSV4_STYLE:
        out = make_dsv4_model(args.out, args.seed, args.dtype)
    else:
        out = make_model(args.out, args.style, args.size, args.seed, args.dtype)
    print(f"{out} ready in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
