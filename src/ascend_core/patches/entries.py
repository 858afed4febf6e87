"""Every upstream (vLLM) patch the plugin may apply, one paragraph each.

How to add a patch
------------------
1. Find the vLLM symbol to replace and write it as `vllm.module:Attr.sub`. If other
   modules copied it with `from module import name`, list those copies in
   `also_rebind` (grep vLLM for the name), or the patch misses them.
2. Write the range of vLLM versions the patch was checked against (`>=0.33.0,<0.34`);
   a new vLLM release then shows up as "skipped: version" until someone looks again.
3. Say when it is needed with a `Condition` (device kinds, chip families, features
   required or excluded). No condition means every deployment.
4. Give the reason in one sentence: what breaks without the patch.
5. Write the function that does it in `adapters/vllm/patches/` and add the patch id to
   that adapter's table (`adapters/vllm/patches/table.py`): the core names no adapter
   module. The adapter calls it as `function(spec)` with this `PatchSpec`, once per
   process, only when the plan lists the patch. Nothing is patched at import.
6. Append the entry at the end of `ENTRIES`, add its row to docs/design.md's table
   ("Upstream patches": how it reaches vLLM, the vLLM seam that would retire it), and run
   `pytest tests/unit/core/test_patches_entries.py tests/unit/core/test_patches_doc.py
   tests/unit/vllm/test_patch_table.py tests/integration/test_patch_targets.py`: the
   entry's shape, the doc's table, the adapter's table (exactly the registry's ids), and
   its symbols in the installed vLLM.
7. Where vLLM offers an extension point (its Triton kernel-override registry names the
   kernels a platform may replace), use it rather than rebinding a function.
"""

from __future__ import annotations

from ascend_core.patches.spec import Condition, Feature, PatchRegistry, PatchSpec
from ports.device import DeviceKind

HOST = DeviceKind.CPU
NPU = DeviceKind.NPU
# The ranges and conditions most entries share, named once.
VLLM_0_33 = ">=0.33.0,<0.34"
HOST_WITHOUT_TRITON = Condition(device_kinds={HOST}, excludes={Feature.TRITON})
SPECULATIVE = Condition(requires={Feature.SPECULATIVE_DECODING})
MOONCAKE = "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector"
SPEC_UTILS = "vllm.v1.spec_decode.utils"
REJECTION = "vllm.v1.sample.rejection_sampler"
RAY_EXECUTOR = "vllm.v1.executor.ray_executor_v2"
_DRAFT_INPUTS = (
    "Every draft-model proposer (eagle, eagle3, mtp, draft_model) prepares the draft's "
    "inputs with Triton kernels written for CUDA (on the host they are placeholders that "
    "raise), so the launch of its kernel goes to the device's DraftInputOps "
    "(ports/draft_inputs.py): torch ops with no host read, the host's as the reference"
)
ENTRIES = (
    PatchSpec(
        id="host-slot-mapping-kernel",
        target="vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel",
        versions=VLLM_0_33,
        when=HOST_WITHOUT_TRITON,
        reason=(
            "BlockTable.compute_slot_mapping launches this Triton kernel every step, and "
            "without Triton on the host it is a placeholder that raises, so the host "
            "registers a torch implementation through vLLM's kernel-override registry."
        ),
    ),
    PatchSpec(
        id="host-shutdown-accelerator-cache",
        target="vllm.distributed.parallel_state:cleanup_dist_env_and_memory",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}),
        reason=(
            "At shutdown vLLM calls torch.accelerator.empty_cache() and empty_host_cache() "
            "on every platform but its own CPU one, and on a host with no accelerator both "
            "raise RuntimeError, so engine teardown fails unless they are skipped."
        ),
        # vllm.distributed re-exports it, and the engine core imports it from there.
        also_rebind=(
            "vllm.distributed:cleanup_dist_env_and_memory",
            "vllm.v1.engine.core:cleanup_dist_env_and_memory",
        ),
    ),
    PatchSpec(
        id="host-onednn-linear",
        target="vllm.model_executor.layers.utils:default_unquantized_gemm",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}),
        reason=(
            "Out-of-tree platforms get torch.nn.functional.linear for every unquantized "
            "linear layer and the lm_head; on the host that float32 BLAS path measured "
            "2-3.5x slower at decode shapes than oneDNN with the weight packed once, so "
            "the host swaps in the packed oneDNN GEMM (dispatch_unquantized_gemm reads "
            "this name at call time, so no copies need rebinding)."
        ),
    ),
    PatchSpec(
        id="oot-int8-scaled-mm-kernel",
        target="vllm.model_executor.kernels.linear:_POSSIBLE_INT8_KERNELS",
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "vLLM picks the int8 ScaledMM kernel of compressed-tensors W8A8 layers from a "
            "table keyed by built-in platform, with no entry for an out-of-tree one, so "
            "every such checkpoint fails with 'Failed to find a kernel that can implement "
            "the ScaledMM linear layer'; the plugin's kernel (the QuantOps port of the "
            "serving device) is added under PlatformEnum.OOT."
        ),
    ),
    PatchSpec(
        id="oot-fp8-scaled-mm-kernel",
        target="vllm.model_executor.kernels.linear:_POSSIBLE_FP8_KERNELS",
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "vLLM picks the fp8 ScaledMM kernel of compressed-tensors FP8 layers from a table "
            "keyed by built-in platform, with no entry for an out-of-tree one, so every such "
            "checkpoint fails with 'Failed to find a kernel that can implement the ScaledMM "
            "linear layer'; the plugin's kernel, which dequantizes the fp8 weights at load "
            "(A2/A3 have no fp8 matmul), is added under PlatformEnum.OOT."
        ),
    ),
    PatchSpec(
        id="oot-fp8-block-scaled-mm-kernel",
        target="vllm.model_executor.kernels.linear:_POSSIBLE_FP8_BLOCK_KERNELS",
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "Block-quantized fp8 layers (compressed-tensors FP8_BLOCK, the fp8 method's "
            "weight_block_size) pick their kernel from a second per-platform table with no "
            "out-of-tree entry; the plugin's dequantize-at-load kernel is added under "
            "PlatformEnum.OOT."
        ),
    ),
    PatchSpec(
        id="npu-slot-mapping-kernel",
        target="vllm.v1.worker.block_table:ComputeSlotMappingKernel.kernel",
        versions=VLLM_0_33,
        when=Condition(device_kinds={NPU}),
        reason=(
            "BlockTable.compute_slot_mapping launches this Triton kernel every step; the "
            "NPU runner computes the slots with torch ops on the device instead (no host "
            "read-back), so serving does not depend on triton-ascend compiling vLLM's "
            "CUDA-tuned kernel."
        ),
    ),
    PatchSpec(
        id="npu-top-k-top-p-torch",
        target="vllm.v1.sample.ops.topk_topp_sampler:apply_top_k_top_p",
        versions=VLLM_0_33,
        when=Condition(device_kinds={NPU}),
        reason=(
            "The sampler masks top-k/top-p with a Triton kernel whenever Triton imports "
            "(triton-ascend on an NPU host); the NPU path takes vLLM's torch "
            "implementation without host syncs instead of a CUDA-tuned kernel."
        ),
        also_rebind=(
            "vllm.v1.sample.rejection_sampler:apply_top_k_top_p",
            "vllm.v1.worker.gpu.sample.states:apply_top_k_top_p",
            "vllm.v1.worker.gpu.sample.sampler:apply_top_k_top_p",
            "vllm.v1.watermarking.gpu_sampler:apply_top_k_top_p",
        ),
    ),
    PatchSpec(
        id="host-moe-direct-entry",
        target="vllm.model_executor.layers.fused_moe.runner.moe_runner:MoERunner._select_forward",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}),
        reason=(
            "On an out-of-tree platform vLLM enters every MoE layer through its opaque "
            "moe_forward op, so the compiled graph stops there and the runner's Python "
            "runs eagerly at each layer (about 100 us on the host); the host calls the "
            "runner directly, as vLLM's CPU platform does, where the layer's method says "
            "its ops trace."
        ),
    ),
    PatchSpec(
        id="host-greedy-argmax",
        target="vllm.v1.sample.sampler:Sampler.greedy_sample",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}),
        reason=(
            "Greedy sampling takes torch's argmax on an out-of-tree platform, which on the "
            "host measured 110 us a step at [16, 8192] float32 logits against 32 us for "
            "the native argmax with the same answer (vLLM's CPU platform calls its own "
            "kernel), so the host's sampler takes the native one where it is built."
        ),
    ),
    PatchSpec(
        id="spec-rejection-sample-torch",
        target="vllm.v1.sample.rejection_sampler:rejection_sample",
        versions=VLLM_0_33,
        when=SPECULATIVE,
        reason=(
            "With speculative decoding the rejection sampler verifies drafts with Triton "
            "kernels written for CUDA (on the host they are placeholders that raise), so "
            "verification runs on the device's RejectionOps (ports/rejection.py): torch "
            "ops with no host read, the host's as the reference."
        ),
    ),
    PatchSpec(
        id="spec-expand-kernel-torch",
        target=f"{REJECTION}:_expand.kernel",
        versions=VLLM_0_33,
        when=SPECULATIVE,
        reason=(
            "The rejection sampler spreads each request's temperature, top-k and top-p over "
            "its draft tokens with a Triton kernel before any random verification, so the "
            "device's RejectionOps does it in torch ops, registered through vLLM's "
            "kernel-override registry, which names this kernel as a platform's to replace."
        ),
        also_rebind=(f"{REJECTION}:expand_kernel",),
    ),
    PatchSpec(
        id="host-mooncake-device-index",
        target=f"{MOONCAKE}:MooncakeConnectorWorker.__init__",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}, requires={Feature.KV_TRANSFER}),
        reason=(
            "MooncakeConnector's worker asks torch.accelerator for its device index, which "
            "raises on a host with no accelerator, so no KV connector could start there; "
            "during its construction the index is the host device's (0)."
        ),
    ),
    PatchSpec(
        id="spec-draft-step-slots-torch",
        target=f"{SPEC_UTILS}:_eagle_step_slot_mapping_metadata.kernel",
        versions=VLLM_0_33,
        when=SPECULATIVE,
        reason=_DRAFT_INPUTS + " (each draft step's positions, KV slots and lengths).",
        also_rebind=(f"{SPEC_UTILS}:eagle_step_slot_mapping_metadata_kernel",),
    ),
    PatchSpec(
        id="spec-draft-sample-indices-torch",
        target=f"{SPEC_UTILS}:_eagle_prepare_inputs_padded.kernel",
        versions=VLLM_0_33,
        when=SPECULATIVE,
        reason=_DRAFT_INPUTS + " (where each request's last accepted token is).",
        also_rebind=(f"{SPEC_UTILS}:eagle_prepare_inputs_padded_kernel",),
    ),
    PatchSpec(
        id="spec-draft-next-token-torch",
        target=f"{SPEC_UTILS}:_eagle_prepare_next_token_padded.kernel",
        versions=VLLM_0_33,
        when=SPECULATIVE,
        reason=_DRAFT_INPUTS + " (each request's next token after verification).",
        also_rebind=(f"{SPEC_UTILS}:eagle_prepare_next_token_padded_kernel",),
    ),
    PatchSpec(
        id="spec-draft-expand-inputs-torch",
        target=f"{SPEC_UTILS}:_copy_and_expand_eagle_inputs.kernel",
        versions=VLLM_0_33,
        when=SPECULATIVE,
        reason=_DRAFT_INPUTS + " (the first draft pass's tokens, positions and masks).",
        also_rebind=(f"{SPEC_UTILS}:copy_and_expand_eagle_inputs_kernel",),
    ),
    PatchSpec(
        id="gdn-layer-on-linear-attention-port",
        target=(
            "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn:"
            "QwenGatedDeltaNetAttention"
        ),
        versions=VLLM_0_33,
        when=Condition(requires={Feature.MAMBA_STATE}),
        reason=(
            "Qwen3-Next's gated-delta-net layer runs its convolution and delta rule as "
            "Triton (FLA) kernels written for CUDA (placeholders that raise on the host, "
            "unlowered for an NPU), so the plugin registers its subclass of this "
            "PluggableLayer, whose core runs on the device's LinearAttentionOps."
        ),
    ),
    PatchSpec(
        id="kda-layer-on-linear-attention-port",
        target=(
            "vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn:"
            "KimiGatedDeltaNetAttention"
        ),
        versions=VLLM_0_33,
        when=Condition(requires={Feature.MAMBA_STATE}),
        reason=(
            "Kimi-Linear's KDA layer runs its convolution and per-channel-gated delta rule "
            "as the bundled FLA Triton ops (chunk_kda_with_fused_gate, fused_recurrent_kda*) "
            "and Triton causal_conv1d, written for CUDA, so the plugin registers its subclass "
            "of this PluggableLayer, whose core runs on the device's LinearAttentionOps."
        ),
    ),
    PatchSpec(
        id="host-ray-actor-resources",
        target=f"{RAY_EXECUTOR}:RayExecutorV2._get_actor_resource_kwargs",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}, requires={Feature.RAY}),
        reason=(
            "vLLM's Ray executor asks for the platform's ray_device_key as a custom resource "
            "of each worker actor, and Ray refuses CPU there (the host device's key, which "
            "Ray has no accelerator for), so the actor asks for nothing and sits in its "
            "placement-group bundle, which holds the CPU."
        ),
    ),
    PatchSpec(
        id="host-ray-worker-devices",
        target=f"{RAY_EXECUTOR}:RayWorkerProc",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}, requires={Feature.RAY}),
        reason=(
            "vLLM's Ray worker reads the accelerator ids Ray assigned under the platform's "
            "ray_device_key, and Ray names none for CPU (KeyError before any worker "
            "starts), so on the host the executor starts a subclass that reports none."
        ),
    ),
    PatchSpec(
        id="npu-graph-capture-communicator",
        target="vllm.distributed.parallel_state:GroupCoordinator.graph_capture",
        versions=VLLM_0_33,
        when=Condition(device_kinds={NPU}),
        reason=(
            "With tensor parallelism vLLM's graph capture enters each group's context, "
            "which asserts the group's device communicator is CUDA's or XPU's (for their "
            "custom all-reduce), so NPU workers could capture no graphs; for the NPU's "
            "communicator the context only moves the capture to its stream, as vLLM's "
            "does, and every other group goes through vLLM's own."
        ),
    ),
    PatchSpec(
        id="oot-wna16-mp-kernel",
        target="vllm.model_executor.kernels.linear:_POSSIBLE_KERNELS",
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "vLLM picks the mixed-precision kernel of compressed-tensors W4A16 layers from a "
            "table keyed by built-in platform, with no entry for an out-of-tree one, so "
            "every such checkpoint fails with 'Failed to find a kernel that can implement "
            "the WNA16 linear layer'; the plugin's kernel (the Int4WeightOps port of the "
            "serving device) is added under PlatformEnum.OOT."
        ),
    ),
    PatchSpec(
        id="ct-wna16-moe-int4",
        target=(
            "vllm.model_executor.layers.quantization.compressed_tensors."
            "compressed_tensors_moe.compressed_tensors_moe:CompressedTensorsMoEMethod."
            "get_moe_method"
        ),
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "compressed-tensors W4A16 MoE experts get vLLM's CompressedTensorsWNA16MoEMethod, "
            "whose constructor finds no backend out of tree (Marlin, Triton: neither device "
            "runs them); 4-bit pack-quantized experts with group or channel scales get the "
            "plugin's method instead, on the device's W4A16 experts port (host: dequantized "
            "at load; NPU: npu_grouped_matmul's antiquant mode)."
        ),
    ),
    PatchSpec(
        id="ct-fp8-moe-dequant",
        target=(
            "vllm.model_executor.layers.quantization.compressed_tensors."
            "compressed_tensors_moe.compressed_tensors_moe:CompressedTensorsMoEMethod."
            "get_moe_method"
        ),
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "compressed-tensors fp8 MoE experts get vLLM's CompressedTensorsW8A8Fp8MoEMethod, "
            "whose kernels (Triton, CUTLASS, DeepGEMM) neither device runs and which selects "
            "none out of tree; experts with per-channel or block weight scales and dynamic "
            "activations get the plugin's method instead, which dequantizes them at load as "
            "the dense fp8 layers are and runs the float experts."
        ),
    ),
    PatchSpec(
        id="fp8-moe-dequant",
        target="vllm.model_executor.layers.quantization.fp8:Fp8Config.get_quant_method",
        versions=VLLM_0_33,
        when=Condition(),
        reason=(
            "MoE experts of fp8-method checkpoints (DeepSeek-V3's and Qwen3's official FP8 "
            "releases: weight_block_size, dynamic activations) get vLLM's Fp8MoEMethod, "
            "whose constructor finds no backend out of tree; such experts get the plugin's "
            "method instead, which dequantizes them at load (weight_scale_inv blocks) and "
            "runs the float experts, as for compressed-tensors fp8."
        ),
    ),
    PatchSpec(
        id="host-eplb-rearrange-timing",
        target="vllm.distributed.eplb.eplb_state:EplbState.rearrange",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST}, requires={Feature.EPLB}),
        reason=(
            "With --enable-eplb vLLM's rearrange times each rebalance on the main EP rank "
            "with torch.Event(enable_timing=True), which torch's CPU backend does not "
            "have, so the profile run's rebalance fails; during rearrange the host's "
            "events record the wall clock."
        ),
    ),
    PatchSpec(
        id="seeded-counter-noise",
        target="vllm.v1.sample.ops.topk_topp_sampler:random_sample",
        versions=VLLM_0_33,
        when=Condition(device_kinds={HOST, NPU}),
        reason=(
            "vLLM draws a seeded request's noise from its own generator, a launch a seeded "
            "row, with host-held state no NPU graph can replay; here a seeded row's noise is "
            "a function of its seed and the position it samples (the sampling port's "
            "exponential_noise), as the NPU's FULL decode graphs compute it: the same "
            "tokens on both devices, eager or replayed, in any batch."
        ),
    ),
)

REGISTRY = PatchRegistry(ENTRIES)
