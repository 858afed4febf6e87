"""The configuration use case, in one place: VllmConfig -> Deployment -> the core's plan ->
the plan applied to VllmConfig -> the deployment's patch plan.

The platform's hooks delegate here (platform.py): `check_and_update_config` ->
`configure`, `apply_config_platform_defaults` -> `remember_given`,
`pre_register_and_update` -> `before_config`, and the worker -> `apply_patches`.
translate.py reads VllmConfig into the core's Deployment (what the doctor builds too)
and nothing else; every write to VllmConfig happens here.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from adapters.vllm.engine import translate
from adapters.vllm.engine.startup_errors import stop_on_our_errors, watch_engine_errors
from adapters.vllm.kv_transfer import module_path as kv_module_path
from ascend_core.deployment import CompileMode, Deployment, GraphMode, PluginModule
from ascend_core.errors import ConfigError
from ascend_core.moe.decision import MoeDecision
from ascend_core.plan import ModelRunner, fields
from ascend_core.plan.model_runner import (
    V2_VARIABLE,
    decide_model_runner,
    runner_variable,
    v2_requested,
)
from ascend_core.plan.runner_features import RunnerFeatures
from ports.device import ChipFamily, DeviceKind
from ports.environment import Environment
from ports.local_files import LocalFiles
from ports.model_files import ModelFiles
from ports.upstream import Upstream

if TYPE_CHECKING:
    from vllm.config import VllmConfig

    from ascend_core.patches import PatchPlan
    from ascend_core.plan.result import Change, ConfigPlan

logger = logging.getLogger("vllm.plugins.ascend")

_ENV_PREFIX = "env."
_ADDITIONAL_PREFIX = "additional_config."

# Where configure keeps the deployment's patch plan: an attribute of the config (on
# translate.plugin_attrs), so it travels with it to the worker processes.
PATCH_PLAN_ATTR = "_ascend_patch_plan"
# The Deployment configure translated, kept on the config it came from (set before
# planning, so a refused config carries what was refused); for this process only.
DEPLOYMENT_ATTR = "_ascend_deployment"
# The plan's MoE decision (ascend_core.moe.decision.MoeDecision, None for a dense model),
# on the config as the patch plan is, for the workers' MoE layers.
MOE_DECISION_ATTR = "_ascend_moe_decision"

# torch._inductor.config keys for the host's compiled model (see _device_settings).
HOST_INDUCTOR_CONFIG: dict[str, Any] = {
    "size_asserts": False,
    "nan_asserts": False,
    "cpp.dynamic_threads": True,
    "emulate_precision_casts": True,
}

# vLLM turns on its breakable CUDA graphs for some architectures (DeepSeek-V3.2 among
# them) by setting VLLM_USE_BREAKABLE_CUDAGRAPH=1 in the process's environment while it
# builds the config, and then sets the compilation mode to NONE. Those graphs are CUDA's;
# on this platform the plan decides compilation and NPU graphs, so the variable is set to
# 0 first (unless the operator set it): otherwise the model runs uncompiled, and every
# later engine of the same process too, since the variable stays set.
BREAKABLE_GRAPHS = "VLLM_USE_BREAKABLE_CUDAGRAPH"


class InThisProcess:
    """A value kept on a config for the process that made it: a pickled config (sent to a
    worker) carries None in its place, as the workers need only the patch plan."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple[type[InThisProcess], tuple[None]]:
        return (InThisProcess, (None,))


@frozen
class ConfigPorts:
    """What the use case reads beyond VllmConfig, resolved by the platform's hook."""

    environment: Environment
    model_files: Callable[[str], ModelFiles]
    host_cpus: int | None
    local_files: LocalFiles
    upstream: Upstream | None
    log_plan: bool  # VLLM_ASCEND_LOG_PLAN


# -- the use case ------------------------------------------------------------------


def configure(
    vllm_config: VllmConfig, kind: DeviceKind, family: ChipFamily, ports: ConfigPorts
) -> None:
    """check_and_update_config: translate VllmConfig into a Deployment (once), ask the core
    for the plan, apply it, check vLLM's engine believes the plan's runner, apply the
    deployment's patches. The plan's errors stop the start with their messages alone."""
    watch_engine_errors()
    kept = translate.plugin_attrs(vllm_config)  # what travels with the config
    with stop_on_our_errors():
        deployment = translate_config(vllm_config, kind, family, ports)
        setattr(kept, DEPLOYMENT_ATTR, InThisProcess(deployment))
        plan = plan_for(deployment)
    if plan is None or deployment is None:
        return  # vLLM builds configs without a model too (e.g. in tests); nothing to plan
    quantization = vllm_config.model_config.quantization
    apply_changes(vllm_config, plan.changes, log=ports.log_plan)
    setattr(kept, MOE_DECISION_ATTR, plan.decisions.moe)
    if vllm_config.model_config.quantization != quantization:
        _rebuild_quant_config(vllm_config)
    _size_torch_threads(plan.changes_to(fields.OMP_NUM_THREADS))
    if vllm_config.parallel_config.worker_cls == "auto":
        from adapters.vllm.engine.device_classes import DEVICE_CLASSES

        vllm_config.parallel_config.worker_cls = DEVICE_CLASSES[plan.worker_kind].worker
    _device_settings(vllm_config, kind)
    with stop_on_our_errors():
        require_runner_agrees(vllm_config, plan)
    patches = _patch_plan(deployment)
    setattr(kept, PATCH_PLAN_ATTR, patches)  # the workers apply it without translating
    _apply_patch_plan(patches)


def translate_config(
    vllm_config: VllmConfig, kind: DeviceKind, family: ChipFamily, ports: ConfigPorts
) -> Deployment | None:
    """The core's Deployment of this config: the same builder the doctor uses, with the
    operator's VLLM_USE_V2_MODEL_RUNNER (before_config wrote ours over it)."""
    import attrs

    model = vllm_config.model_config
    directory = getattr(model, "model", None) if model is not None else None
    files = ports.model_files(directory) if directory and os.path.isdir(directory) else None
    deployment = translate.deployment(
        vllm_config, kind, family, ports.environment, files, ports.host_cpus,
        ports.local_files, ports.upstream,
    )
    if deployment is None:
        return None
    return attrs.evolve(
        deployment, v2_model_runner=operator_runner_variable(deployment.v2_model_runner)
    )


_noted: set[str] = set()


def plan_for(deployment: Deployment | None) -> ConfigPlan | None:
    """The core's plan (raising its errors together), or None before the model is known."""
    if deployment is None:
        return None
    from ascend_core.plan import plan_config
    from ascend_core.plan.npugraph_ex import npugraph_ex_note

    plan = plan_config(deployment)
    for warning in plan.warnings:
        logger.warning("Ascend plan: %s", warning)
    note = npugraph_ex_note(deployment, plan)
    if note is not None and note not in _noted:  # once per process, as the changes are
        _noted.add(note)
        logger.info("Ascend plan: %s", note)
    # Under DP the graph decision is said whether it changed anything or not.
    dp_graphs = plan.decisions.dp_graphs
    if dp_graphs and dp_graphs not in _noted:
        _noted.add(dp_graphs)
        logger.info("Ascend plan: %s", dp_graphs)
    # V1 is the default (vLLM's engine is told through its variable, a logged change);
    # V2, asked for and served, changes nothing: said here, once per process.
    runner = f"model runner: {plan.decisions.model_runner_reason}"
    if plan.model_runner is ModelRunner.V2 and runner not in _noted:
        _noted.add(runner)
        logger.info("Ascend plan: %s", runner)
    return plan.require_ok()


# -- apply: a plan's changes back into VllmConfig -------------------------------------


def _to_vllm(value: Any) -> Any:
    """Core values -> the types vLLM's config fields hold."""
    from vllm.config import CompilationMode, CUDAGraphMode

    if isinstance(value, CompileMode):
        return CompilationMode[value.name]
    if isinstance(value, GraphMode):
        return CUDAGraphMode[value.name]
    if isinstance(value, PluginModule):
        return kv_module_path(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    return value


def apply_change(vllm_config: VllmConfig, change: Change) -> None:
    """Set the field a Change names; env.* go to os.environ, additional_config.* to that dict."""
    path = change.field
    if path.startswith(_ENV_PREFIX):
        name = path.removeprefix(_ENV_PREFIX)
        if change.new is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(change.new)
        return
    if path.startswith(_ADDITIONAL_PREFIX):
        vllm_config.additional_config[path.removeprefix(_ADDITIONAL_PREFIX)] = change.new
        return
    *parents, attr = path.split(".")
    owner: Any = vllm_config
    for name in parents:  # e.g. compilation_config.pass_config.fuse_norm_quant
        owner = getattr(owner, name)
    setattr(owner, attr, _to_vllm(change.new))


_logged: set[str] = set()


def apply_changes(vllm_config: VllmConfig, changes: tuple[Change, ...], log: bool = True) -> None:
    """Apply each change, logging it once per process with its reason (VLLM_ASCEND_LOG_PLAN)."""
    for change in changes:
        apply_change(vllm_config, change)
        line = change.describe()
        if log and line not in _logged:
            _logged.add(line)
            logger.info("Ascend plan: %s", line)


def _rebuild_quant_config(vllm_config: VllmConfig) -> None:
    """The plan chose a method from the model files (a ModelSlim description names no
    method in config.json): vLLM built its quant config before asking us, so again."""
    from vllm.config import VllmConfig as _VllmConfig

    vllm_config.quant_config = _VllmConfig.get_quantization_config(
        vllm_config.model_config, vllm_config.load_config
    )


def _size_torch_threads(changes: tuple[Change, ...]) -> None:
    """The plan's OMP_NUM_THREADS in this process's torch too, before vLLM starts any.

    A spawned process reads the variable when it imports torch; a forked one (vLLM's
    engine and workers by default) inherits torch's setting from this process, which
    imported torch before the plan set the variable. vLLM sizes the pool the same
    way before it forks workers, and skips that when OMP_NUM_THREADS is set.
    """
    import torch

    for change in changes:
        if change.new is not None:
            torch.set_num_threads(int(change.new))


def _device_settings(vllm_config: VllmConfig, kind: DeviceKind) -> None:
    """Settings that follow from where tensors live rather than from a plan decision
    (vLLM resolves async_scheduling before the hook, so the plan never sees it as given).

    On the host: one step at a time, and Inductor's CPU code generation settings when the
    plan compiles (as vLLM's own CPU platform sets them): no size/NaN asserts in the
    generated code, threads read at run time (a cached graph may have been compiled under
    another thread count), and eager's rounding at every dtype cast, so bf16 results keep
    the reference ops' semantics instead of fusing casts away."""
    if kind is not DeviceKind.CPU:
        return
    from vllm.config import CompilationMode

    vllm_config.scheduler_config.async_scheduling = False
    compilation = vllm_config.compilation_config
    if compilation.mode != CompilationMode.NONE:
        compilation.inductor_compile_config.update(HOST_INDUCTOR_CONFIG)


# -- the model runner vLLM's engine believes in ------------------------------------

# The operator's VLLM_USE_V2_MODEL_RUNNER, kept when before_config writes ours over it
# (this process's Deployment reads it from here, the doctor from the environment).
_runner_variable: dict[str, str | None] = {}


def before_config(
    kind: DeviceKind,
    environ: MutableMapping[str, str] = os.environ,
    features: RunnerFeatures | None = None,
) -> None:
    """First thing in EngineArgs.create_engine_config: the plan's runner variable
    (ascend_core.plan.model_runner) written before VllmConfig exists, because
    VllmConfig.__post_init__ reads vLLM's runner choice before any platform hook (its
    async-scheduling rules differ for V1 and V2). The plan writes the same again, with
    its reason, in check_and_update_config; VLLM_BREAKABLE_CUDAGRAPH likewise early.
    features: the EngineArgs' features the NPU's V2 runner does not serve
    (runner_features), so a fallback to V1 is already what vLLM's engine believes."""
    if BREAKABLE_GRAPHS not in environ:
        environ[BREAKABLE_GRAPHS] = "0"
        logger.info(
            "%s=0: vLLM's breakable CUDA graphs are a CUDA feature (it would turn them on "
            "for some architectures and compile nothing); the Ascend plan decides "
            "compilation and graphs",
            BREAKABLE_GRAPHS,
        )
    given = operator_runner_variable(environ.get(V2_VARIABLE))
    # The graph mode is not planned yet: an eager decision here (the NPU's V2 serves every
    # graph mode, so the plan's own decision agrees; the host's is V1 either way), on the
    # EngineArgs' features (a model made hybrid only by vLLM's later reading, or a
    # speculators checkpoint, is turned to V1 by the plan in check_and_update_config).
    written = runner_variable(decide_model_runner(kind, given, GraphMode.NONE, features).runner)
    _runner_variable["given"] = given
    _runner_variable["written"] = written
    environ[V2_VARIABLE] = written


def features_matter(kind: DeviceKind, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether before_config's runner decision reads the EngineArgs' features: only on
    the NPU with V2 asked for (the host builds V1 either way, and V1 is the default), so
    a deployment that cannot take V2 does not read its model's files before the one
    translation does."""
    given = operator_runner_variable(environ.get(V2_VARIABLE))
    return kind is DeviceKind.NPU and v2_requested(given)


def runner_features(engine_args: Any, files: ModelFiles | None) -> RunnerFeatures:
    """vLLM's EngineArgs (before any config exists) as the runner decision's features:
    the same the plan reads from its Deployment. files: the model directory's (whether
    it is hybrid), None when not local."""
    from ascend_core.model_facts import config_is_hybrid

    spec = getattr(engine_args, "speculative_config", None)
    method = spec.get("method") if isinstance(spec, dict) else getattr(spec, "method", None)
    if spec is not None and not isinstance(method, str):
        method = "the method vLLM infers"  # any method falls back (runner_features)
    config = files.read_json("config.json") if files is not None and files.exists() else None
    return RunnerFeatures(
        speculative_method=method if spec is not None else None,
        kv_transfer=getattr(engine_args, "kv_transfer_config", None) is not None,
        hybrid=isinstance(config, Mapping) and config_is_hybrid(config),
    )


def operator_runner_variable(current: str | None) -> str | None:
    """VLLM_USE_V2_MODEL_RUNNER as the operator set it: the environment's value, unless it
    is still the value before_config wrote over theirs."""
    if "written" in _runner_variable and current == _runner_variable["written"]:
        return _runner_variable["given"]
    return current


def require_runner_agrees(
    vllm_config: VllmConfig, plan: ConfigPlan, has_triton: bool | None = None
) -> None:
    """vLLM's engine (VllmConfig.use_v2_model_runner, read by its scheduler, input
    processor and engine client) must believe the runner the worker builds. vLLM forces
    V2 for some features (HiSparse, watermarking) whatever the variable says. V2 needs
    Triton with an active driver (vLLM's HAS_TRITON; triton-ascend on an NPU host): without
    it vLLM's worker would stop with a traceback, so it is refused here first."""
    want_v2 = plan.model_runner is ModelRunner.V2
    if want_v2:
        if has_triton is None:
            from vllm.triton_utils import HAS_TRITON as has_triton
        if not has_triton:
            raise ConfigError(
                f"{plan.decisions.model_runner_reason}, but vLLM's V2 runner launches Triton "
                "kernels and Triton has no active driver in this process (triton-ascend's "
                "on an NPU host).",
                "Install triton-ascend (the version matching your CANN), or unset "
                "VLLM_USE_V2_MODEL_RUNNER to serve on the V1 runner.",
            )
    try:
        believes_v2 = bool(vllm_config.use_v2_model_runner)
        error = None
    except ValueError as refused:  # vLLM's own refusal, e.g. HiSparse with V2 turned off
        believes_v2, error = True, str(refused)
    if believes_v2 == want_v2:
        return
    runner = plan.model_runner.name
    raise ConfigError(
        f"vLLM's engine would run model runner {'V2' if believes_v2 else 'V1'} "
        f"({error or 'a feature of this config needs it'}), but the worker builds "
        f"{runner}: {plan.decisions.model_runner_reason}.",
        "Leave out what needs vLLM's V2 runner (HiSparse, watermarking) on this platform.",
    )


# -- the patch plan ------------------------------------------------------------------


def _patch_plan(deployment: Deployment) -> PatchPlan:
    from adapters.vllm.patches import deployment_patch_plan

    return deployment_patch_plan(deployment)


def _apply_patch_plan(plan: PatchPlan) -> None:
    from adapters.vllm.patches import apply_plan

    apply_plan(plan)


def apply_patches(
    vllm_config: VllmConfig, kind: DeviceKind, family: ChipFamily, ports: Callable[[], ConfigPorts]
) -> None:
    """In a worker: the patch plan its config carries, or, for a config configure did not
    plan, the plan of its deployment (translated here)."""
    plan: PatchPlan | None = getattr(translate.plugin_attrs(vllm_config), PATCH_PLAN_ATTR, None)
    if plan is None:
        deployment = translate_config(vllm_config, kind, family, ports())
        if deployment is None:
            return
        plan = _patch_plan(deployment)
    _apply_patch_plan(plan)


def moe_decision_of(vllm_config: VllmConfig) -> MoeDecision | None:
    """The MoE decision the plan made for this config (None: a dense model, or a config
    configure did not plan)."""
    decision: MoeDecision | None = getattr(
        translate.plugin_attrs(vllm_config), MOE_DECISION_ATTR, None
    )
    return decision


def remember_given(vllm_config: VllmConfig) -> None:
    """apply_config_platform_defaults: the compilation settings as the operator gave them,
    before vLLM resolves unset ones, so the plan sees what `ascend-doctor plan` sees."""
    translate.remember_given_compilation(vllm_config)
