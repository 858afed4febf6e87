"""Documented limits of the torch_npu ops the NPU adapter calls, checked at plan time.

From torch_npu 2.14.0's op docs (torch_npu/_op_plugin_docs.py) for
`npu_fused_infer_attention_score` with a paged KV cache in the BSH layout, the call the
NPU adapter makes for MHA/GQA. The plan, `ascend-doctor plan` and `vllm serve` refuse
the same configurations here, before weights load, instead of at the first prefill.
The adapter's ops read the same constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ascend_core.errors import ConfigError
from ports.device import DeviceKind

if TYPE_CHECKING:  # annotations only: the platform imports ATTENTION_DTYPES in every process
    from ascend_core.deployment import Deployment

# Query (and so model) dtypes the op takes without int8 quantization parameters.
ATTENTION_DTYPES = ("float16", "bfloat16")
# Paged KV with more than one query token per sequence (prefill, chunked prefill):
# block_size a multiple of 128 in [128, 512]. With one query token (decode): a multiple
# of 16 up to 512. A served model prefills, so the first rule binds.
PREFILL_BLOCK_MULTIPLE = 128
DECODE_BLOCK_MULTIPLE = 16
MAX_BLOCK_SIZE = 512
MAX_HEAD_SIZE = 512  # D <= 512
HEAD_SIZE_ALIGNMENT = 16  # D 16-aligned for fp16/bf16 inputs
MAX_QUERY_HEADS = 256  # N <= 256
MAX_HIDDEN_PER_ROW = 65535  # N*D < 65535 in BSH; KV_N*D <= 65535 for a (blocks, size, H) cache
MAX_GQA_RATIO = 64  # num_heads / num_key_value_heads, which must divide evenly

_OP = "npu_fused_infer_attention_score"

# MLA through the same op (adapters/npu/mla.py). Decode: BSND with query_rope/key_rope,
# paged, latent D 512, rope D 64, 32/64/128 query heads, one KV head, block size 16 or
# 128. Prefill: TND without rope inputs, Q/K D 192, V D 128 or 192, bfloat16 only.
MLA_LATENT, MLA_ROPE = 512, 64
MLA_DECODE_HEADS = (32, 64, 128)
MLA_BLOCK_SIZES = (16, 128)
MLA_PREFILL_QK, MLA_PREFILL_V = 192, (128, 192)
MLA_DTYPE = "bfloat16"


def mla_shape_problems(
    heads: int, latent: int, rope: int, qk: int, v: int, block_size: int, dtype: str
) -> list[str]:
    """What the NPU's MLA calls refuse in these shapes (per device); qk/v 0: not known."""
    problems = []
    if (latent, rope) != (MLA_LATENT, MLA_ROPE):
        problems.append(f"kv_lora_rank {latent} and qk_rope_head_dim {rope} (the decode call "
                        f"takes {MLA_LATENT} and {MLA_ROPE})")
    if heads not in MLA_DECODE_HEADS:
        problems.append(f"{heads} query heads per device (the decode call takes "
                        f"{', '.join(map(str, MLA_DECODE_HEADS))})")
    if block_size and block_size not in MLA_BLOCK_SIZES:
        problems.append(f"block size {block_size} (the decode call takes 16 or 128)")
    if (qk and qk != MLA_PREFILL_QK) or (v and v not in MLA_PREFILL_V):
        problems.append(f"query/key head size {qk} and value head size {v} (the TND prefill "
                        f"takes {MLA_PREFILL_QK} and 128 or 192)")
    if dtype != MLA_DTYPE:
        problems.append(f"dtype {dtype} (the TND prefill takes bfloat16 only)")
    return problems


def mla_limit_errors(deployment: Deployment) -> tuple[ConfigError, ...]:
    """The NPU MLA calls' documented limits this deployment breaks, as one error."""
    model = deployment.model
    if (
        deployment.device_kind is not DeviceKind.NPU
        or model.mla is None
        or model.use_sparse
        or model.compressed_attention
    ):
        return ()  # sparse and compressed MLA have their own kernels (and are refused)
    mla = model.mla
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim if mla.qk_nope_head_dim else 0
    problems = mla_shape_problems(
        max(1, model.num_attention_heads // deployment.parallel.tp), mla.kv_lora_rank,
        mla.qk_rope_head_dim, qk, mla.v_head_dim, deployment.cache.block_size or 0, model.dtype,
    )
    if not problems:
        return ()
    return (
        ConfigError(
            f"{model.architecture} on an NPU: {_OP}'s MLA calls cannot run "
            + "; ".join(problems) + ".",
            "Serve it on the host device (VLLM_ASCEND_DEVICE=cpu), or change what the "
            "message names (e.g. --tensor-parallel-size, --dtype bfloat16).",
        ),
    )


# Sparse MLA (DSA; adapters/npu/sparse_mla.py): npu_lightning_indexer and
# npu_sparse_flash_attention, each token its own batch (TND query, PA_BSND paged keys).
# Their docs: query, keys and weights fp16/bf16; sparse_count 1-2048 or one of
# 3072-8192 in steps of 1024; sparse_mode 0 or 3; lengths and block tables int32.
SPARSE_DTYPES = ("float16", "bfloat16")
SPARSE_COUNTS = (*range(1, 2049), 3072, 4096, 5120, 6144, 7168, 8192)
SPARSE_OPS = "npu_lightning_indexer / npu_sparse_flash_attention"


def sparse_mla_shape_problems(topk: int, dtype: str) -> list[str]:
    """What the NPU's sparse MLA calls refuse: the indexer's top-k and the model dtype."""
    problems = []
    if topk not in SPARSE_COUNTS:
        problems.append(f"index_topk {topk} (sparse_count takes 1-2048, 3072, 4096, 5120, "
                        "6144, 7168 or 8192)")
    if dtype not in SPARSE_DTYPES:
        problems.append(f"dtype {dtype} (the ops take float16 and bfloat16)")
    return problems


def sparse_mla_limit_errors(deployment: Deployment) -> tuple[ConfigError, ...]:
    """The NPU sparse MLA calls' documented limits this deployment breaks, as one error."""
    model = deployment.model
    if (
        deployment.device_kind is not DeviceKind.NPU
        or not model.use_mla
        or model.index_topk is None
        or model.compressed_attention
    ):
        return ()
    problems = sparse_mla_shape_problems(model.index_topk, model.dtype)
    if not problems:
        return ()
    return (
        ConfigError(
            f"{model.architecture} on an NPU: {SPARSE_OPS} cannot run "
            + "; ".join(problems) + ".",
            "Serve it on the host device (VLLM_ASCEND_DEVICE=cpu), or --dtype bfloat16.",
        ),
    )


# A vision tower's attention (adapters/npu/vision.py): the same op without a cache, BSND,
# every image (or window) one batch row padded to the longest. Its docs for Q_S > 1:
# N <= 256, D <= 512, N * D < 65535 in BSH/BSND, a D whose bytes are not a multiple of
# 32 only up to 128, B <= 65536. (Its TND layout, the other encoder layout, takes only
# Q/K D 192 with N 8..128: an MLA prefill's shape, never a ViT's.)
ENCODER_LAYOUT = "BSND"
ALIGNED_BYTES = 32
MAX_UNALIGNED_HEAD_SIZE = 128
TOWER_FIX = (
    "Serve it on the host device (VLLM_ASCEND_DEVICE=cpu), or without its images and "
    "videos (--limit-mm-per-prompt '{\"image\": 0, \"video\": 0}' or "
    "--language-model-only) so the tower never runs."
)


def encoder_attention_problems(heads: int, head_size: int, dtype_bytes: int) -> list[str]:
    """What the NPU's encoder attention call (BSND, no cache) refuses in a tower's heads
    per device of this width (dtype_bytes: 2 for float16/bfloat16)."""
    problems = []
    if heads > MAX_QUERY_HEADS:
        problems.append(f"{heads} heads per device (at most {MAX_QUERY_HEADS})")
    if head_size > MAX_HEAD_SIZE:
        problems.append(f"head size {head_size} (at most {MAX_HEAD_SIZE})")
    elif (head_size * dtype_bytes) % ALIGNED_BYTES and head_size > MAX_UNALIGNED_HEAD_SIZE:
        problems.append(
            f"head size {head_size} ({head_size * dtype_bytes} bytes, not a multiple of "
            f"{ALIGNED_BYTES}: such a head size only up to {MAX_UNALIGNED_HEAD_SIZE})"
        )
    if heads * head_size >= MAX_HIDDEN_PER_ROW:
        problems.append(
            f"heads x head size {heads * head_size} (below {MAX_HIDDEN_PER_ROW} in "
            f"{ENCODER_LAYOUT})"
        )
    return problems


def encoder_attention_limit_errors(deployment: Deployment) -> tuple[ConfigError, ...]:
    """The NPU encoder attention's documented limits the model's vision tower breaks, as
    one error; nothing when the tower is idle (no image or video input) or its heads are
    not known. Its heads split over tensor parallelism as vLLM's Qwen-VL towers split them."""
    model = deployment.model
    if (
        deployment.device_kind is not DeviceKind.NPU
        or not (model.vision or model.video)
        or {"image", "video"} <= deployment.mm_off
        or not (model.vision_heads and model.vision_head_size)
        or model.dtype not in ATTENTION_DTYPES  # refused with the model's own attention
    ):
        return ()
    heads = max(1, model.vision_heads // deployment.parallel.tp)
    problems = encoder_attention_problems(heads, model.vision_head_size, 2)
    if not problems:
        return ()
    return (
        ConfigError(
            f"{model.architecture} on an NPU: its vision tower's attention "
            f"({model.vision_heads} heads of size {model.vision_head_size}, vision_config) "
            f"cannot run through {_OP} in its {ENCODER_LAYOUT} encoder layout: "
            + "; ".join(problems) + ".",
            TOWER_FIX,
        ),
    )


def uses_paged_mha_op(deployment: Deployment) -> bool:
    """Whether attention goes through the op these limits describe (MHA/GQA on an NPU)."""
    return deployment.device_kind is DeviceKind.NPU and not deployment.model.use_mla


def block_size_error(block_size: int, decode_only: bool) -> str | None:
    """Why the op refuses this paged block size, or None when it takes it."""
    multiple = DECODE_BLOCK_MULTIPLE if decode_only else PREFILL_BLOCK_MULTIPLE
    if block_size % multiple or not multiple <= block_size <= MAX_BLOCK_SIZE:
        return (
            f"{'decode' if decode_only else 'prefill'} with a paged KV cache needs a multiple "
            f"of {multiple} up to {MAX_BLOCK_SIZE}"
        )
    return None


def attention_limit_errors(deployment: Deployment) -> tuple[ConfigError, ...]:
    """Every documented limit the deployment's MHA/GQA attention breaks on an NPU, besides
    the block size (the block-size step asks `block_size_error`)."""
    model = deployment.model
    if not uses_paged_mha_op(deployment):
        return ()
    tp = deployment.parallel.tp
    arch = model.architecture
    errors: list[ConfigError] = []
    if model.dtype not in ATTENTION_DTYPES:
        errors.append(
            ConfigError(
                f"model_config.dtype={model.dtype} (--dtype): {_OP} takes float16 or bfloat16 "
                f"queries only, so {arch} cannot be served on an NPU in {model.dtype}.",
                "Use --dtype bfloat16 (or float16).",
            )
        )
    d = model.head_size
    if d > MAX_HEAD_SIZE or d % HEAD_SIZE_ALIGNMENT:
        errors.append(
            ConfigError(
                f"{arch} has head_size {d}: {_OP} takes a head size up to {MAX_HEAD_SIZE} "
                f"that is a multiple of {HEAD_SIZE_ALIGNMENT} (for float16/bfloat16).",
                "This model's attention cannot run on the NPU kernels; serve it on the host "
                "device (VLLM_ASCEND_DEVICE=cpu) or choose another model.",
            )
        )
    q_heads = max(1, model.num_attention_heads // tp)
    kv_heads = max(1, model.num_kv_heads // tp)
    if q_heads > MAX_QUERY_HEADS or q_heads * d >= MAX_HIDDEN_PER_ROW:
        errors.append(
            ConfigError(
                f"{arch} has {q_heads} query heads of size {d} per device at "
                f"tensor_parallel_size={tp}: {_OP} takes at most {MAX_QUERY_HEADS} heads and "
                f"heads x head_size below {MAX_HIDDEN_PER_ROW} in its BSH layout.",
                "Raise --tensor-parallel-size so each device holds fewer heads.",
            )
        )
    if kv_heads * d > MAX_HIDDEN_PER_ROW:
        errors.append(
            ConfigError(
                f"{arch} has {kv_heads} KV heads of size {d} per device: a paged cache laid out "
                f"as (blocks, block_size, KV heads x head_size) must stay within "
                f"{MAX_HIDDEN_PER_ROW} per row for {_OP}.",
                "Raise --tensor-parallel-size so each device holds fewer KV heads.",
            )
        )
    if q_heads % kv_heads or q_heads // kv_heads > MAX_GQA_RATIO:
        errors.append(
            ConfigError(
                f"{arch} has {q_heads} query heads over {kv_heads} KV heads per device at "
                f"tensor_parallel_size={tp}: {_OP} needs the query heads to be a multiple of "
                f"the KV heads, at most {MAX_GQA_RATIO} per KV head.",
                "Choose a --tensor-parallel-size that divides both head counts.",
            )
        )
    return tuple(errors)
