"""What of a deployment the NPU's V2 runner does not serve yet, each with its reason.

The runner decision (plan.model_runner) reads these: where V2 is asked for on the NPU and
one of them is in the deployment, V1 serves, with every reason here in the plan's
decision (logged, and shown by `ascend-doctor plan`). Both places that make the decision
fill the same record: the plan from its Deployment, and the engine's early hook
(adapters/vllm/engine/configure.before_config, before VllmConfig exists) from vLLM's
EngineArgs, so the variable vLLM's engine reads first already says what the worker builds.

vLLM's own rules (VllmConfig._get_v2_model_runner_unsupported_features, 0.33) are kept as
vLLM words them where a deployment can express them: the speculative methods `suffix` and
`custom_class`. vLLM skips those rules once VLLM_USE_V2_MODEL_RUNNER is set (as the plan
always sets it), so they are applied here. Its other rules (parallel drafting, draft
models of another vocabulary) are speculative decoding, which the NPU's V2 does not serve
at all; pipeline parallelism under an external launcher and micro-batching (DBO) are not
served on the NPU on either runner.

Served on V2, so not listed here: LoRA (V2 keeps each request's adapter in its LoraState
and activates a step's adapters through the platform's punica wrapper, whose shrink and
expand on the NPU's LoRA port read each row's slot from buffers written in place, so a
FULL graph captured for one of V2's active-adapter counts (vllm/v1/worker/gpu/lora_utils.py)
replays for any mix of adapters, the logits it records with the LM head's adapter; checked
with the plan's graphs, tests/integration/npu/test_lora_on_emulated_npu.py), tensor
parallelism (its collectives run in the model on either runner, and V2's FULL graphs
record them as V1's do; checked at TP=2 with the plan's graphs,
tests/integration/npu/test_tensor_parallel_graphs_on_emulated_npu.py), and sleep mode
(the worker's sleep port releases the weights and the KV cache whichever runner holds
them; where their addresses come back elsewhere it drops V2's FULL graphs from its graph
manager beside the pieces' and captures both again on waking; checked at levels 1 and 2
with the plan's graphs, tests/integration/npu/test_sleep_on_emulated_npu.py).
"""

from __future__ import annotations

from attrs import frozen

from ascend_core.deployment import Deployment

# vLLM 0.33's V2 runner has no proposer for these (config/vllm.py).
VLLM_V2_UNSUPPORTED_METHODS = frozenset({"suffix", "custom_class"})

# Why each feature is served on V1, not on the NPU's V2 runner (issue 48).
WHY_SPECULATIVE = (
    "V2 drafts with its own speculators (vllm/v1/worker/gpu/spec_decode): their graph "
    "managers give the NPU's attention no per-replay lengths and their Triton kernels are "
    "not checked on the NPU; V1's drafters serve it"
)
WHY_KV_TRANSFER = (
    "V2 drives a connector through its own wrapper (vllm/v1/worker/gpu/kv_connector.py), "
    "not checked with the NPU's connectors; V1 serves P/D"
)
WHY_HYBRID = (
    "V2 keeps mamba/linear-attention state in its own model state "
    "(vllm/v1/worker/gpu/model_states/mamba_hybrid.py, Triton kernels the NPU does not run "
    "yet); V1 serves hybrid models with the NPU's state cache"
)


@frozen
class RunnerFeatures:
    """The features of a deployment the runner decision reads."""

    speculative_method: str | None = None  # None: no speculative decoding
    kv_transfer: bool = False  # a KV connector (P/D disaggregation, KV offload)
    hybrid: bool = False  # attention plus mamba/linear-attention layers

    @classmethod
    def of(cls, deployment: Deployment) -> RunnerFeatures:
        speculative = deployment.speculative.method
        return cls(
            speculative_method=speculative,
            kv_transfer=deployment.kv_transfer_role is not None
            or deployment.kv_transfer is not None,
            hybrid=deployment.model.hybrid,
        )


def v2_not_served(features: RunnerFeatures) -> tuple[str, ...]:
    """Each feature the NPU's V2 runner does not serve, as "feature: why"; () serves V2."""
    found: list[str] = []
    method = features.speculative_method
    if method is not None:
        if method.strip().lower() in VLLM_V2_UNSUPPORTED_METHODS:
            found.append(
                f"speculative method '{method}': vLLM's V2 runner does not support it "
                "(VllmConfig._get_v2_model_runner_unsupported_features)"
            )
        else:
            found.append(f"speculative decoding ('{method}'): {WHY_SPECULATIVE}")
    if features.kv_transfer:
        found.append(f"a KV connector (P/D): {WHY_KV_TRANSFER}")
    if features.hybrid:
        found.append(f"a hybrid model: {WHY_HYBRID}")
    return tuple(found)
