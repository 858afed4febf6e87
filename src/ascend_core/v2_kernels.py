"""vLLM's Model Runner V2 Triton kernels (vLLM 0.33.0, vllm/v1/worker/gpu), and how the
NPU runs each: the table the doctor shows beside the runner decision (docs/npu-ops.md).

V2 prepares its inputs, samples, counts and drafts with `@triton.jit` functions. On the
NPU each either runs as Triton through triton-ascend or is replaced by a torch twin on the
device; today every one is left to triton-ascend (none is replaced), and on the emulated
NPU Triton's interpreter runs them (TRITON_INTERPRET=1) over the `npu` tensors.
`exercised` marks the kernels the V2 runs on the emulated NPU launch (Llama eager; Qwen3,
Qwen3-MoE and DeepSeek-V3 with FULL decode graphs; greedy with top-2 logprobs;
tests/integration/npu/test_v2_runner_on_emulated_npu.py records the launches and checks
they are these: each step's input preparation, slot mapping, staged writes and sampling,
and the profiling pass's sampler warmup: temperature, min-p, penalties, bias, bad words,
logprobs). None has
been lowered for Ascend (triton-ascend's compiler, BiShengIR, is not here) nor run on
Ascend hardware: `lowered` stays False until `make kernels-check` covers it.
"""

from __future__ import annotations

import enum

from attrs import frozen

VLLM_VERSION = "0.33.0"
PACKAGE = "vllm/v1/worker/gpu"


class KernelPath(enum.Enum):
    """How the NPU runs one of V2's kernels."""

    TRITON_ASCEND = "triton-ascend"  # vLLM's kernel, compiled for Ascend by triton-ascend
    TORCH_TWIN = "torch twin"  # replaced through vLLM's kernel overrides, torch on device


@frozen
class V2Kernel:
    module: str  # under vllm/v1/worker/gpu, without .py
    name: str  # the @triton.jit function (helpers inlined into kernels included)
    role: str  # what V2 uses it for
    path: KernelPath = KernelPath.TRITON_ASCEND
    exercised: bool = False  # launched by the V2 runs on the emulated NPU
    lowered: bool = False  # lowered for A2/A3 by `make kernels-check`

    def row(self) -> dict[str, object]:
        return {
            "kernel": f"{self.module}.{self.name}",
            "role": self.role,
            "path": self.path.value,
            "exercised": self.exercised,
            "lowered": self.lowered,
        }


def _group(module: str, role: str, names: str, exercised: str = "") -> tuple[V2Kernel, ...]:
    ran = set(exercised.split())
    return tuple(V2Kernel(module, n, role, exercised=n in ran) for n in names.split())


KERNELS: tuple[V2Kernel, ...] = (
    *_group(
        "block_table", "block tables and slot mapping",
        "_gather_block_tables_kernel _compute_slot_mappings_kernel",
        "_gather_block_tables_kernel _compute_slot_mappings_kernel",
    ),
    *_group(
        "buffer_utils", "staged writes into persistent device buffers",
        "_apply_write_kernel _load_ptr", "_apply_write_kernel",
    ),
    *_group("cp_utils", "decode context parallel", "_dcp_local_seq_lens_kernel cp_local_slot"),
    *_group(
        "input_batch", "input preparation and post-step update",
        "_prepare_prefill_inputs_kernel _prepare_pos_seq_lens_kernel "
        "_combine_sampled_and_draft_tokens_kernel _get_num_sampled_and_rejected_kernel "
        "_post_update_kernel _post_update_num_computed_tokens_kernel "
        "_expand_idx_mapping_kernel",
        "_prepare_prefill_inputs_kernel _prepare_pos_seq_lens_kernel "
        "_combine_sampled_and_draft_tokens_kernel _get_num_sampled_and_rejected_kernel "
        "_post_update_kernel",
    ),
    *_group("metrics/logits", "NaN count in logits (metrics)", "_num_nans_kernel"),
    *_group("mm/rope", "M-RoPE positions (multimodal)", "_prepare_rope_positions_kernel"),
    *_group(
        "model_states/mamba_hybrid", "hybrid (Mamba) state with speculation",
        "_scatter_num_accepted_kernel _fill_num_accepted_kernel",
    ),
    *_group("model_states/prompt_embeds", "prompt embeddings", "_apply_prompt_embeds_kernel"),
    *_group(
        "model_states/recoverssm", "SSM state recovery", "_postprocess_recoverssm_align_kernel"
    ),
    *_group("sample/bad_words", "bad words", "_bad_words_kernel", "_bad_words_kernel"),
    *_group(
        "sample/batch_shard", "sampling sharded across ranks",
        "_build_shard_plan_kernel _pack_sampler_output_kernel _unpack_gathered_output_kernel "
        "_pack_logprobs_kernel _unpack_logprobs_kernel",
    ),
    *_group(
        "sample/gumbel", "temperature and Gumbel-max sampling (greedy included)",
        "_temperature_kernel tl_rand32 spec_step_seed _murmur3_rotl32 _murmur3_mix "
        "_murmur3_fmix32 murmur3_hash32 murmur3_uniform32 _uniform64_from_random53 "
        "murmur3_uniform64 _log1p_neg_stable gumbel_noised_argmax gumbel_block_argmax "
        "_gumbel_sample_kernel",
        "_gumbel_sample_kernel _temperature_kernel",
    ),
    *_group(
        "sample/logit_bias", "logit bias, allowed tokens, min tokens", "_bias_kernel",
        "_bias_kernel",
    ),
    *_group(
        "sample/logprob", "logprobs",
        "_topk_log_softmax_kernel _ranks_kernel _fill_logprob_token_ids_kernel",
        "_topk_log_softmax_kernel _ranks_kernel",
    ),
    *_group("sample/min_p", "min-p", "_min_p_kernel", "_min_p_kernel"),
    *_group("sample/output", "sampling mask output", "_compact_sampling_mask_kernel"),
    *_group("sample/penalties", "repetition/frequency/presence penalties",
            "_penalties_kernel _bincount_kernel", "_penalties_kernel _bincount_kernel"),
    *_group("sample/prompt_logprob", "prompt logprobs", "_prompt_logprobs_token_ids_kernel"),
    *_group(
        "sample/thinking_budget", "thinking budget",
        "_load_effective_token _update_committed_marker_cache_kernel _thinking_budget_kernel",
    ),
    *_group("sample/trace_replay", "sampling trace replay", "_trace_replay_kernel"),
    *_group(
        "sample/watermark", "watermarking",
        "_repeated_context_mask_kernel _mulhilo32 _philox4x32_10 _uint32_to_uniform "
        "_philox_context_state _philox_candidate_words _philox_gumbel_from_logits "
        "_gumbel_value philox_gumbel_block_argmax _select_max _philox_gumbel_kernel "
        "_draft_step_kernel",
    ),
    *_group(
        "spec_decode/acceptance_estimator", "speculative acceptance estimate",
        "_accumulate_kernel _refit_kernel _local_max_sumexp_kernel _predict_kernel",
    ),
    *_group("spec_decode/dflash/speculator", "DFlash drafting", "_prepare_dflash_inputs_kernel"),
    *_group("spec_decode/dflash2/speculator", "DFlash2 drafting",
            "_selector_walk_kernel _cache_draft_logits_kernel"),
    *_group(
        "spec_decode/multi_module_mtp/speculator", "MTP / EAGLE drafting",
        "_prepare_input_buffers_kernel _prepare_input_hidden_states_and_embeddings_kernel "
        "_pad_trailing_draft_slots_kernel _cache_inputs_kernel _shift_input_ids_kernel "
        "_shift_input_embeds_kernel",
    ),
    *_group("spec_decode/ngram/speculator", "n-gram drafting",
            "_ngram_scan_kernel _ngram_finalize_kernel"),
    *_group("spec_decode/rejection_sampler", "rejection sampling",
            "_flatten_sampled_kernel _gather_draft_sampled_kernel"),
    *_group(
        "spec_decode/rejection_sampler_utils", "rejection sampling",
        "_compute_max_and_sumexp _compute_global_logsumexp _compute_global_residual_mass "
        "_compute_global_target_argmax _compute_global_logprobs_and_logsumexp _is_bonus_logit "
        "_compute_local_logits_stats_kernel _compute_cumulative_log_p_kernel "
        "_compute_local_residual_mass_kernel _rejection_kernel _seeded_resample_argmax "
        "_resample_kernel _insert_resampled_kernel",
    ),
    *_group("spec_decode/standalone_ar/speculator", "draft-model drafting",
            "_prepare_prefill_inputs_kernel"),
    *_group(
        "spec_decode/target_dependent_ar/speculator", "EAGLE-style drafting",
        "_prepare_prefill_inputs_kernel _prepare_decode_inputs_kernel "
        "_update_draft_inputs_kernel",
    ),
    *_group(
        "spec_decode/xpress/kernels", "Xpress drafting",
        "_xpress_add_argmax_partial_kernel _xpress_latent_kernel "
        "_xpress_add_argmax_reduce_to_blk_kernel _xpress_topc_argmax_to_blk_kernel",
    ),
    *_group("structured_outputs", "structured outputs (grammar bitmask)",
            "_apply_grammar_bitmask_kernel"),
)


def kernels_summary() -> str:
    """One line: how many of V2's kernels take each path, exercised and lowered."""
    by_path = {p: sum(k.path is p for k in KERNELS) for p in KernelPath}
    paths = ", ".join(f"{n} {p.value}" for p, n in by_path.items() if n)
    exercised = sum(k.exercised for k in KERNELS)
    lowered = sum(k.lowered for k in KERNELS)
    return (
        f"vLLM {VLLM_VERSION}'s V2 runner: {len(KERNELS)} Triton functions under {PACKAGE} "
        f"({paths}); {exercised} run interpreted on the emulated NPU, {lowered} lowered "
        "for Ascend"
    )
