"""EPLB (expert-parallel load balancing): which of vLLM's `--enable-eplb` settings serve on
our devices, the redundant experts each rank holds, and the reference plugin's
`eplb_config` keys mapped onto vLLM's, each with its reason. Pure rules over plain data.

What serves: vLLM's own EplbState (load window, rebalance policy, weight rearrange over
the EP group) with our MoE method mapping each token's logical expert to a physical one
and recording the load. Synchronous only: vLLM's async EPLB moves weights from a thread
on a side CUDA stream. The weights move by torch.distributed point-to-point over the EP
group (vLLM's `torch_nccl` communicator): its gloo group on the host, its device group
(HCCL) on the NPU.

The reference's keys: `dynamic_eplb` turns EPLB on; `num_redundant_experts` is vLLM's;
`expert_heat_collection_interval` (steps of load measured) is vLLM's `window_size`; the
reference then spreads the new placement over `algorithm_execution_interval` steps, where
vLLM applies it at once, so a rebalance comes every heat + execution steps
(`step_interval`). `eplb_policy_type` has no vLLM twin (vLLM's one policy serves);
`expert_map_path` (a placement loaded from a file) has none either and is refused with
EPLB on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from ascend_core.ascend_config import EplbConfig
from ascend_core.deployment import EplbSettings
from ascend_core.errors import ConfigError
from ascend_core.quantization.export_layers import QuantFormat
from ports.device import DeviceKind

_KEY = "additional_config.eplb_config"
# vLLM's `torch_nccl` communicator is torch.distributed isend/irecv over the EP group the
# weights live on: its gloo (CPU) group for the host's tensors, its device group (HCCL) on
# the NPU. `torch_gloo` stages device tensors through host memory and waits on the
# accelerator's stream, which the host does not have: served on the NPU only.
COMMUNICATOR = {DeviceKind.CPU: "torch_nccl", DeviceKind.NPU: "torch_nccl"}
SERVED_COMMUNICATORS = {
    DeviceKind.CPU: frozenset({"torch_nccl"}),
    DeviceKind.NPU: frozenset({"torch_nccl", "torch_gloo"}),
}
# Quantized expert formats whose method vLLM's rearrange moves whole (see the docstring).
SERVED_EXPERT_FORMATS = frozenset({QuantFormat.MODELSLIM_W8A8_DYNAMIC})
# The reference's default policy (SwiftBalance); any other value given is reported.
REFERENCE_POLICY_DEFAULT = 2


@frozen
class KeyMapping:
    """One reference key and what it became in vLLM's EPLB (or why it could not)."""

    key: str  # the reference's, under additional_config.eplb_config
    vllm: str | None  # vLLM's field it set (None: not mapped)
    reason: str

    def describe(self) -> str:
        target = f"-> {self.vllm}" if self.vllm else "not mapped"
        return f"eplb_config.{self.key} {target}: {self.reason}"


@frozen
class EplbDecision:
    """vLLM's EPLB as served: the settings it runs with and where they came from."""

    redundant: int
    window_size: int
    step_interval: int
    communicator: str
    source: str  # what turned it on
    mappings: tuple[KeyMapping, ...] = ()

    def describe(self) -> str:
        return (
            f"EPLB on ({self.source}): {self.redundant} redundant experts, load window "
            f"{self.window_size} steps, rebalance every {self.step_interval} steps "
            f"(synchronous), weights moved by {self.communicator}"
        )


@frozen
class EplbFacts:
    """What the rules read from a deployment."""

    settings: EplbSettings
    reference: EplbConfig
    device_kind: DeviceKind
    ep_size: int
    is_moe: bool
    quantized: bool
    # The formats the model's quantized MoE experts are stored in (empty: none found).
    expert_formats: frozenset[QuantFormat] = frozenset()
    policy_type: object = REFERENCE_POLICY_DEFAULT  # eplb_config.eplb_policy_type


@frozen
class EplbPlan:
    decision: EplbDecision | None
    errors: tuple[ConfigError, ...] = ()
    warnings: tuple[str, ...] = ()


def plan_eplb(facts: EplbFacts) -> EplbPlan:
    """The EPLB that serves (None when off), refusals and notes."""
    settings, ref = facts.settings, facts.reference
    if not (settings.enabled or ref.dynamic_eplb):
        return EplbPlan(None)
    source = "--enable-eplb" if settings.enabled else f"{_KEY}.dynamic_eplb=true"
    errors: list[ConfigError] = []
    warnings: list[str] = []
    if not facts.is_moe:
        errors.append(ConfigError(
            f"{source} asks for expert load balancing but the model has no routed experts.",
            "serve this model without EPLB",
        ))
    elif facts.ep_size == 1:
        errors.append(ConfigError(
            f"{source} needs expert parallelism over more than one rank (EP size is 1).",
            "serve with --enable-expert-parallel and tensor, data or prefill-context "
            "parallel size > 1, or without EPLB",
        ))
    refusal = _quantized_experts_refusal(facts, source)
    if refusal is not None:
        errors.append(refusal)
    served = SERVED_COMMUNICATORS[facts.device_kind]
    if settings.communicator is not None and settings.communicator not in served:
        errors.append(ConfigError(
            f"--eplb-config communicator={settings.communicator!r} cannot move expert "
            f"weights on the {facts.device_kind.value} device (served: "
            f"{', '.join(sorted(served))}).",
            "leave communicator unset: torch_nccl, torch.distributed point-to-point over "
            "the EP group (gloo on the host, HCCL on the NPU)",
        ))
    if ref.expert_map_path is not None:
        errors.append(ConfigError(
            f"{_KEY}.expert_map_path={ref.expert_map_path!r} with EPLB on: vLLM's EPLB "
            "starts from its own placement and cannot load the reference's expert map.",
            "remove expert_map_path (the load window places the experts), or serve "
            "without EPLB",
        ))
    mappings: list[KeyMapping] = []
    defaults = EplbConfig()
    redundant = _one_of(
        "num_redundant_experts", settings, ref.num_redundant_experts,
        ref.num_redundant_experts != defaults.num_redundant_experts, errors, mappings,
        "the same count of replicas over the EP ranks",
    )
    window, step = settings.window_size, settings.step_interval
    if ref.dynamic_eplb:
        heat, execution = ref.expert_heat_collection_interval, ref.algorithm_execution_interval
        heat_given = heat != defaults.expert_heat_collection_interval
        execution_given = execution != defaults.algorithm_execution_interval
        # dynamic_eplb alone: the reference's defaults (600, 50) pace vLLM's EPLB too,
        # unless --eplb-config gave vLLM's field.
        window = _one_of(
            "window_size", settings, heat, heat_given or "window_size" not in settings.given,
            errors, mappings, "the steps whose expert load a decision reads",
            key="expert_heat_collection_interval",
        )
        step = _one_of(
            "step_interval", settings, heat + execution,
            heat_given or execution_given or "step_interval" not in settings.given,
            errors, mappings,
            f"vLLM applies a placement at once where the reference spreads it over "
            f"algorithm_execution_interval={execution} steps, so a rebalance comes every "
            f"{heat} + {execution} steps",
            key="algorithm_execution_interval",
        )
        mappings.append(KeyMapping("dynamic_eplb", "parallel_config.enable_eplb",
                                   "vLLM's EPLB balances the experts while serving"))
    if facts.policy_type != REFERENCE_POLICY_DEFAULT:
        warnings.append(
            f"{_KEY}.eplb_policy_type={facts.policy_type!r} has no vLLM twin: vLLM's "
            "default policy (its hierarchical load balancer) places the experts"
        )
        mappings.append(KeyMapping("eplb_policy_type", None,
                                   "vLLM has one policy, its default"))
    if settings.policy != "default":
        errors.append(ConfigError(
            f"--eplb-config policy={settings.policy!r} is not vLLM's default policy.",
            "leave policy unset",
        ))
    communicator = settings.communicator or COMMUNICATOR[facts.device_kind]
    decision = EplbDecision(redundant, window, step, communicator, source, tuple(mappings))
    return EplbPlan(decision, tuple(errors), tuple(warnings))


def _quantized_experts_refusal(facts: EplbFacts, source: str) -> ConfigError | None:
    """None where the experts are unquantized, or every quantized one is in a format whose
    tensors vLLM's rearrange moves whole (SERVED_EXPERT_FORMATS)."""
    if not facts.quantized:
        return None
    formats = facts.expert_formats
    if formats and formats <= SERVED_EXPERT_FORMATS:
        return None
    found = (", ".join(sorted(f.value for f in formats - SERVED_EXPERT_FORMATS))
             if formats else "no quantized experts the plan could name")
    return ConfigError(
        f"{source}: EPLB on this plugin serves unquantized and ModelSlim W8A8_DYNAMIC "
        f"experts only (this model's quantized experts: {found}); a rebalance must move "
        "every tensor an expert's method holds, and only those two keep them all as the "
        "layer's parameters.",
        "serve an unquantized (bf16/fp16) or W8A8_DYNAMIC-expert MoE model with EPLB, or "
        "turn EPLB off",
    )


def _one_of(
    field_name: str,
    settings: EplbSettings,
    reference_value: int,
    reference_given: bool,
    errors: list[ConfigError],
    mappings: list[KeyMapping],
    meaning: str,
    key: str | None = None,
) -> int:
    """vLLM's field, or the reference key's value where that one applies; both given and
    different is an error naming both."""
    key = key or field_name
    vllm_value: int = getattr(settings, field_name)
    if not reference_given:
        return vllm_value
    mappings.append(KeyMapping(key, f"eplb_config.{field_name}", meaning))
    if field_name in settings.given and vllm_value != reference_value:
        errors.append(ConfigError(
            f"{_KEY}.{key} gives {field_name}={reference_value} but --eplb-config "
            f"{field_name}={vllm_value}.",
            f"give {field_name} once: in --eplb-config, or through {_KEY}.{key}",
        ))
        return vllm_value
    return reference_value


def eplb_settings_from(enabled: bool, raw: Mapping[str, Any] | None) -> EplbSettings:
    """EplbSettings from `enable_eplb` and vLLM's eplb_config as a plain dict (vLLM's
    parser fills every field, so a field counts as given where it differs from vLLM's
    default)."""
    raw = dict(raw or {})
    defaults = EplbSettings()
    values: dict[str, Any] = {}
    for name in ("num_redundant_experts", "window_size", "step_interval", "use_async",
                 "policy", "communicator"):
        if raw.get(name) is not None:
            values[name] = raw[name]
    given = frozenset(n for n, v in values.items() if v != getattr(defaults, n))
    return EplbSettings(enabled=bool(enabled), given=given, **values)
