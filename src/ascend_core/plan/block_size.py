"""Step: the KV cache block size (tokens per block), with the model-specific exceptions.

- NPU default 128: Ascend's paged-attention kernels are tuned for 128-token blocks.
- MHA/GQA on the NPU: what npu_fused_infer_attention_score takes with a paged cache in
  prefill (ascend_core.op_limits: a multiple of 128 up to 512).
- Other NPU kernels: a user-set size must be a multiple of 16: the cube unit works on 16x16
  fractal tiles and the KV cache is laid out in them.
- Compressed-attention models (DeepSeek-V4 style) take only 32, 64 or 128: the sizes
  their compressor and indexer kernels are built for on Ascend.
- Hybrid attention + mamba models: 128 too, which vLLM then raises to the smallest
  multiple of 128 whose attention page holds a mamba state page (it takes the block size
  set as its alignment), so the NPU's paged-attention op still reads 128-multiples.
- MLA, DSA and 310P take the NPU default (no exception): their kernels read 128-token blocks.
- Host device: 128 as well, so the host (the reference the NPU is compared against)
  schedules, pages and prefix-caches exactly as the NPU does.
- A size the NPU's kernels accept stays as the user chose it, prefix caching or not; a
  warning says that vllm-ascend would have set 128 there (docs/differences-from-vllm-ascend.md).
"""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.errors import ConfigError
from ascend_core.op_limits import block_size_error, uses_paged_mha_op
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind

DEFAULT_BLOCK_SIZE = 128
NPU_BLOCK_ALIGNMENT = 16
COMPRESSED_ATTENTION_BLOCK_SIZES = (32, 64, 128)


def decide_block_size(deployment: Deployment, draft: Draft) -> Draft:
    """Keep a valid user choice, refuse an invalid one with a hint, else pick the default."""
    chosen = deployment.cache.block_size
    model = deployment.model
    on_npu = deployment.device_kind is DeviceKind.NPU
    if chosen is not None:
        if (
            on_npu
            and model.compressed_attention
            and chosen not in (COMPRESSED_ATTENTION_BLOCK_SIZES)
        ):
            return draft.fail(
                ConfigError(
                    f"cache_config.block_size={chosen} (--block-size): {model.architecture} "
                    "uses compressed attention, whose Ascend kernels take only "
                    f"{list(COMPRESSED_ATTENTION_BLOCK_SIZES)}.",
                    f"Use --block-size {DEFAULT_BLOCK_SIZE} or omit it.",
                )
            ).decide(block_size=chosen)
        op_refusal = block_size_error(chosen, decode_only=False)
        if uses_paged_mha_op(deployment) and op_refusal:
            return draft.fail(
                ConfigError(
                    f"cache_config.block_size={chosen} (--block-size): "
                    f"npu_fused_infer_attention_score refuses it: {op_refusal}.",
                    f"Use --block-size {DEFAULT_BLOCK_SIZE} (the tuned default) or omit it.",
                )
            ).decide(block_size=chosen)
        if on_npu and chosen % NPU_BLOCK_ALIGNMENT:
            return draft.fail(
                ConfigError(
                    f"cache_config.block_size={chosen} (--block-size) is not a multiple of "
                    f"{NPU_BLOCK_ALIGNMENT}: the NPU lays the KV cache out in 16x16 tiles.",
                    f"Use --block-size {DEFAULT_BLOCK_SIZE} (the tuned default) or another "
                    f"multiple of {NPU_BLOCK_ALIGNMENT}, or omit it.",
                )
            ).decide(block_size=chosen)
        # vllm-ascend's refresh_block_size leaves hybrid and compressed-attention models be.
        reference_rewrites = not (model.hybrid or model.compressed_attention)
        if (
            on_npu
            and reference_rewrites
            and chosen != DEFAULT_BLOCK_SIZE
            and deployment.cache.enable_prefix_caching
        ):
            draft = draft.warn(prefix_caching_note(chosen))
        return draft.decide(block_size=chosen)
    if model.hybrid:
        return draft.change(
            fields.BLOCK_SIZE,
            None,
            DEFAULT_BLOCK_SIZE,
            "unset; vLLM raises a hybrid model's attention block to the smallest multiple "
            "of it whose page holds a mamba/GDN state page, so blocks stay 128-multiples "
            "(what Ascend's paged-attention op reads)",
        ).decide(block_size=DEFAULT_BLOCK_SIZE)
    reason = (
        "unset; Ascend's paged-attention kernels are tuned for 128-token blocks"
        if on_npu
        else "unset; the host uses the NPU's block size so it pages and prefix-caches "
        "like the NPU it is the reference for"
    )
    return draft.change(fields.BLOCK_SIZE, None, DEFAULT_BLOCK_SIZE, reason).decide(
        block_size=DEFAULT_BLOCK_SIZE
    )


def prefix_caching_note(chosen: int) -> str:
    """The warning for a user's block size other than 128 with prefix caching on an NPU."""
    return (
        f"cache_config.block_size={chosen} (--block-size) with prefix caching: vllm-ascend "
        f"sets {DEFAULT_BLOCK_SIZE} whenever prefix caching or chunked prefill is on (its "
        f"kernels are tuned for {DEFAULT_BLOCK_SIZE}-token blocks); kept as you chose, since "
        f"the NPU's kernels accept it. Omit --block-size for {DEFAULT_BLOCK_SIZE}."
    )
