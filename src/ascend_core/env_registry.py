"""Every VLLM_ASCEND_* variable the plugin reads, and reading them through the Environment port;
the variables of other software the plan reads (OUTSIDE_VARS) with their owner's meaning.

Public: ENV_VARS, ENV_REGISTRY, RETIRED_VARS, OUTSIDE_VARS, OUTSIDE_REGISTRY, LAUNCH_BLOCKING,
EnvVar, VarType, EnvSettings, read_env, unknown_variables, UnknownVariable, RetiredVariable,
DeviceRequest (the VLLM_ASCEND_DEVICE values), TritonKernelsRequest (the
VLLM_ASCEND_TRITON_KERNELS values).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar, cast

from attrs import frozen

from ascend_core.device_selection import DeviceRequest
from ascend_core.env.outside_vars import LAUNCH_BLOCKING, OUTSIDE_VARS
from ascend_core.env.reading import ResolvedVar, resolve
from ascend_core.env.reference_vars import REFERENCE_ONLY_VARS, RETIRED_REFERENCE_VARS
from ascend_core.env.unknown import RetiredVariable, UnknownVariable, find_unknown
from ascend_core.env.variables import EnvVar, VarType, bool_var, choice_var, int_var
from ascend_core.moe.forced import MoeCommRequest
from ascend_core.triton_kernels import TritonKernelsRequest
from ports.environment import Environment

__all__ = [
    "ENV_REGISTRY",
    "ENV_VARS",
    "LAUNCH_BLOCKING",
    "OUTSIDE_REGISTRY",
    "OUTSIDE_VARS",
    "RETIRED_VARS",
    "DeviceRequest",
    "EnvSettings",
    "EnvVar",
    "MoeCommRequest",
    "ResolvedVar",
    "RetiredVariable",
    "TritonKernelsRequest",
    "UnknownVariable",
    "VarType",
    "read_env",
    "unknown_variables",
]

T = TypeVar("T")

# One constant per variable, so callers get typed values from EnvSettings.get;
# adding a variable is a constant here plus its name in ENV_VARS.
DEVICE = choice_var(
    "VLLM_ASCEND_DEVICE",
    DeviceRequest,
    DeviceRequest.AUTO,
    "Which device serves: auto takes a usable NPU or declines, npu requires one, "
    "cpu serves on the host.",
)
LOG_PLAN = bool_var(
    "VLLM_ASCEND_LOG_PLAN",
    True,
    "Log each configuration change the plugin makes, with its reason.",
)
ENABLE_NZ = int_var(
    "VLLM_ASCEND_ENABLE_NZ",
    1,
    "Weights in the NPU's fractal NZ layout: 0 never, 1 where it is known to pay off, "
    "2 for every eligible weight (fallback of additional_config.weight_nz_mode).",
    choices=(0, 1, 2),
    no_effect="it sets additional_config.weight_nz_mode, and no op here converts weights to NZ",
    deprecated="additional_config.weight_nz_mode",
)
ENABLE_MLAPO = bool_var(
    "VLLM_ASCEND_ENABLE_MLAPO",
    True,
    "Run MLA attention preprocessing (norms, projections, rope) as one fused kernel "
    "(fallback of additional_config.enable_mlapo).",
    no_effect="it sets additional_config.enable_mlapo, and this build has no MLAPO kernel",
    deprecated="additional_config.enable_mlapo",
)
ENABLE_FLASHCOMM1 = bool_var(
    "VLLM_ASCEND_ENABLE_FLASHCOMM1",
    False,
    "Sequence parallelism for dense models: reduce-scatter and all-gather replace all-reduce.",
    deprecated="vLLM's own sequence parallelism (compilation_config.pass_config.enable_sp)",
)
ENABLE_PREFETCH_MLP = bool_var(
    "VLLM_ASCEND_ENABLE_PREFETCH_MLP",
    False,
    "Prefetch MLP weights into on-chip cache while the preceding computation runs.",
    no_effect="this build does not prefetch weights",
)
ENABLE_MATMUL_ALLREDUCE = bool_var(
    "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
    False,
    "Fuse a row-parallel matmul with its all-reduce into one kernel.",
    no_effect="this build has no fused matmul-allreduce kernel",
)
BALANCE_SCHEDULING = bool_var(
    "VLLM_ASCEND_BALANCE_SCHEDULING",
    False,
    "Balance the requests scheduled on each data-parallel rank so no rank waits on another "
    "(fallback of additional_config.scheduler_config.enable_balance_scheduling).",
    no_effect="vLLM's scheduler schedules; balance scheduling is a vllm-ascend scheduler",
    deprecated="additional_config.scheduler_config.enable_balance_scheduling",
)
TRAINING_CONSISTENCY = bool_var(
    "VLLM_ASCEND_TRAINING_CONSISTENCY",
    False,
    "Batch-invariant kernels: a request's output does not depend on what it is batched with.",
)
TRITON_KERNELS = choice_var(
    "VLLM_ASCEND_TRITON_KERNELS",
    TritonKernelsRequest,
    TritonKernelsRequest.AUTO,
    "The NPU's Triton kernels (kernels/triton: slot mapping, top-k/top-p, rejection "
    "sampler): auto launches them where triton-ascend imports with its Ascend backend, "
    "off keeps the torch path, interpret runs them in Triton's interpreter (the emulated "
    "NPU's tests; host copies of each argument, never for serving).",
)
MOE_COMM_METHOD = choice_var(
    "VLLM_ASCEND_MOE_COMM_METHOD",
    MoeCommRequest,
    MoeCommRequest.AUTO,
    "How MoE layers move tokens between expert-parallel ranks: auto lets the plan choose "
    "per chip and step size (as vllm-ascend does); allgather, mc2 or alltoall force one "
    "for every step, or the plan refuses with the reason.",
)

ENV_VARS: tuple[EnvVar[Any], ...] = (
    DEVICE,
    LOG_PLAN,
    ENABLE_NZ,
    ENABLE_MLAPO,
    ENABLE_FLASHCOMM1,
    ENABLE_PREFETCH_MLP,
    ENABLE_MATMUL_ALLREDUCE,
    BALANCE_SCHEDULING,
    TRAINING_CONSISTENCY,
    TRITON_KERNELS,
    MOE_COMM_METHOD,
    *REFERENCE_ONLY_VARS,
)

ENV_REGISTRY: Mapping[str, EnvVar[Any]] = MappingProxyType({v.name: v for v in ENV_VARS})

# Variables other software defines that the plan reads (ascend_core/env/outside_vars.py):
# registered with their owner's meaning (type, default), read through the same Environment
# port, never renamed or prefixed; unknown_variables leaves their names alone.
OUTSIDE_REGISTRY: Mapping[str, EnvVar[Any]] = MappingProxyType({v.name: v for v in OUTSIDE_VARS})

# Names the reference plugin read that this one does not, so the doctor can
# say what became of them instead of only "unknown".
RETIRED_VARS: tuple[RetiredVariable, ...] = (
    RetiredVariable(
        "VLLM_ASCEND_ENABLE_FLASHCOMM",
        "VLLM_ASCEND_ENABLE_FLASHCOMM1",
        "the switch was numbered when a second FlashComm variant appeared",
    ),
    RetiredVariable(
        "VLLM_ASCEND_ENABLE_DENSE_OPTIMIZE",
        None,
        "its parts are separate switches (VLLM_ASCEND_ENABLE_FLASHCOMM1, "
        "VLLM_ASCEND_ENABLE_PREFETCH_MLP)",
    ),
    *(
        RetiredVariable(name, None, f"older vllm-ascend releases read it for {what}")
        for name, what in RETIRED_REFERENCE_VARS
    ),
)


@frozen
class EnvSettings:
    """The typed value of every registered variable, and whether the environment set it."""

    resolved: tuple[ResolvedVar, ...]

    def get(self, var: EnvVar[T]) -> T:
        """The value of `var`, typed as the variable's type."""
        for item in self.resolved:
            if item.name == var.name:
                return cast(T, item.value)
        raise KeyError(f"{var.name} is not in these settings; register it in ENV_VARS")

    def is_set(self, var: EnvVar[Any]) -> bool:
        """Whether the environment set `var` (False: its default applies)."""
        return any(item.name == var.name and item.from_environment for item in self.resolved)

    def describe(self) -> tuple[str, ...]:
        """One 'NAME=value (set|default)' line per variable, for logs."""
        return tuple(item.describe() for item in self.resolved)

    @property
    def device(self) -> DeviceRequest:
        return self.get(DEVICE)

    @property
    def log_plan(self) -> bool:
        return self.get(LOG_PLAN)

    @property
    def enable_nz(self) -> int:
        return self.get(ENABLE_NZ)

    @property
    def enable_mlapo(self) -> bool:
        return self.get(ENABLE_MLAPO)

    @property
    def enable_flashcomm1(self) -> bool:
        return self.get(ENABLE_FLASHCOMM1)

    @property
    def enable_prefetch_mlp(self) -> bool:
        return self.get(ENABLE_PREFETCH_MLP)

    @property
    def enable_matmul_allreduce(self) -> bool:
        return self.get(ENABLE_MATMUL_ALLREDUCE)

    @property
    def balance_scheduling(self) -> bool:
        return self.get(BALANCE_SCHEDULING)

    @property
    def training_consistency(self) -> bool:
        return self.get(TRAINING_CONSISTENCY)

    @property
    def triton_kernels(self) -> TritonKernelsRequest:
        return self.get(TRITON_KERNELS)

    @property
    def moe_comm_method(self) -> MoeCommRequest:
        return self.get(MOE_COMM_METHOD)


def read_env(env: Environment, registry: tuple[EnvVar[Any], ...] = ENV_VARS) -> EnvSettings:
    """Typed values of the registered variables.

    Raises EnvironmentVariableError naming the variable, its value and what it
    accepts; PlanErrors when several values are bad. Unknown names are not an
    error here: `unknown_variables` reports them.
    """
    return EnvSettings(resolve(env, registry))


def unknown_variables(env: Environment) -> tuple[UnknownVariable, ...]:
    """Set VLLM_ASCEND_* names nothing reads: retired ones say what replaced them,
    misspelt ones get a did-you-mean."""
    return find_unknown(env, ENV_REGISTRY, RETIRED_VARS)
