"""One way to build a Deployment, for `vllm serve` and `ascend-doctor plan` alike.

Each caller reads what the operator asked for from its own source (vLLM's VllmConfig,
or the `vllm serve` arguments the doctor parsed) into a `Requested`; everything else
the plan looks at comes from here: the environment variables through the Environment
port and what the model files say through the ModelFiles port. So both reach the same
verdict from the same inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from attrs import evolve, field, frozen

from ascend_core.ascend_config.files import probe_referenced_files
from ascend_core.attention import batch_invariant_requested
from ascend_core.deployment import (
    BatchSettings,
    CacheSettings,
    CompilationSettings,
    CompileMode,
    Deployment,
    GraphMode,
    KvTransferRole,
    KvTransferSettings,
    ModelFacts,
    ParallelSettings,
    SpeculativeSettings,
    modality_set,
)
from ascend_core.env.mapping import MappingEnvironment
from ascend_core.env.unknown import PREFIX as ASCEND_PREFIX
from ascend_core.env_registry import OUTSIDE_VARS, read_env
from ascend_core.errors import AscendError
from ascend_core.profiling import ProfilerSettings
from ascend_core.quantization import SELECTABLE, QuantMethod, detect_quantization
from ascend_core.quantization.detection import CONFIG_FILE
from ascend_core.quantization.export_layers import QuantizedLayers, quantized_layers
from ascend_core.quantization.modelslim import DESCRIPTION_FILE
from ports.device import ChipFamily, DeviceKind
from ports.environment import Environment
from ports.local_files import LocalFiles
from ports.model_files import ModelFiles

# vLLM's MooncakeConnector reads it; the P/D pair check compares it with the HTTP ports.
BOOTSTRAP_PORT_VARIABLE = "VLLM_MOONCAKE_BOOTSTRAP_PORT"
ABORT_TIMEOUT_VARIABLE = "VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT"
# The variables outside VLLM_ASCEND_* that the plan reads as raw text (CANN's own,
# ASCEND_LAUNCH_BLOCKING and HCCL_BUFFSIZE, are registered in env.outside_vars and
# carried in Deployment.outside_env).
NPU_ALLOC_CONF = "PYTORCH_NPU_ALLOC_CONF"
OMP_NUM_THREADS = "OMP_NUM_THREADS"
V2_MODEL_RUNNER = "VLLM_USE_V2_MODEL_RUNNER"


def _frozen_mapping(raw: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(raw or {}))


@frozen
class Requested:
    """What the operator asked for: `vllm serve`'s options, as plain data."""

    parallel: ParallelSettings = field(factory=ParallelSettings)
    speculative: SpeculativeSettings = field(factory=SpeculativeSettings)
    compilation: CompilationSettings = field(factory=CompilationSettings)
    cache: CacheSettings = field(factory=CacheSettings)
    batch: BatchSettings = field(factory=BatchSettings)
    kv_transfer_role: KvTransferRole | None = None
    kv_transfer: KvTransferSettings | None = None
    additional_config: Mapping[str, Any] = field(
        factory=dict, converter=_frozen_mapping, eq=False, hash=False
    )
    user_quantization: str | None = None  # --quantization as given
    lora: bool = False  # --enable-lora
    mm_off: frozenset[str] = field(default=frozenset(), converter=modality_set)  # see Deployment
    profiler: ProfilerSettings = field(factory=ProfilerSettings)  # --profiler-config


def _with_bootstrap_port(
    kv: KvTransferSettings | None, env: Environment
) -> KvTransferSettings | None:
    """The Mooncake bootstrap port and producer hold time, which vLLM reads from its
    environment."""
    if kv is None:
        return kv
    port = (env.get(BOOTSTRAP_PORT_VARIABLE) or "").strip()
    hold = (env.get(ABORT_TIMEOUT_VARIABLE) or "").strip()
    # A value that is not a number vLLM refuses at startup, in its own words.
    if kv.bootstrap_port is None and port.isdigit():
        kv = evolve(kv, bootstrap_port=int(port))
    if kv.abort_timeout is None and hold.isdigit():
        kv = evolve(kv, abort_timeout=int(hold))
    return kv


def files_say(files: ModelFiles | None) -> QuantMethod:
    """The quantization the model files describe (raises QuantizationError on a bad export)."""
    if files is None:
        return QuantMethod.NONE
    return detect_quantization(files, None).files_say


def export_layers(
    files: ModelFiles | None, user_quantization: str | None, detected: QuantMethod
) -> tuple[QuantizedLayers, ...]:
    """The quantized layers of the files under the method that serves them: the user's
    choice when it is one this plugin knows (it wins, as in the plan), else the files'."""
    if files is None:
        return ()
    label = (user_quantization or "").strip().lower()
    method = next((m for m in SELECTABLE if m.value == label), detected)
    if method is QuantMethod.NONE:
        return ()
    return quantized_layers(method, files.read_json(CONFIG_FILE), files.read_json(DESCRIPTION_FILE))


def build_deployment(
    model: ModelFacts,
    kind: DeviceKind,
    chip_family: ChipFamily,
    requested: Requested,
    env: Environment,
    detected: QuantMethod,
    host_cpus: int | None,
    local_files: LocalFiles | None = None,
    quantized: tuple[QuantizedLayers, ...] = (),
) -> Deployment:
    """The Deployment the core plans for; `quantized`: export_layers of the model files.

    `local_files` answers whether the files additional_config names exist (e.g. the EPLB
    expert map); without it those files are not checked.
    """
    comp = requested.compilation
    try:
        settings = read_env(env)
    except AscendError:
        # A bad VLLM_ASCEND_* value is reported by the plan (its env step parses
        # Deployment.ascend_env) together with every other problem; the Deployment is
        # built on the defaults meanwhile.
        settings = read_env(MappingEnvironment({}))
    # additional_config.enable_flashcomm1, when written, wins over the variable (the one
    # precedence rule, ascend_config.env_fallback); a non-bool value is the plan's error.
    written = requested.additional_config.get("enable_flashcomm1")
    flashcomm = written if isinstance(written, bool) else settings.enable_flashcomm1
    parallel = evolve(requested.parallel, sequence_parallel=flashcomm)
    if comp.enforce_eager:
        # vLLM turns enforce_eager into "-cc.mode=none -cc.cudagraph_mode=none" before any
        # platform hook runs; stated here so both callers hand the plan the same values.
        comp = evolve(comp, mode=CompileMode.NONE, graph_mode=GraphMode.NONE)
    return Deployment(
        model=model,
        chip_family=chip_family,
        device_kind=kind,
        parallel=parallel,
        speculative=requested.speculative,
        compilation=comp,
        cache=requested.cache,
        batch=requested.batch,
        kv_transfer_role=requested.kv_transfer_role,
        kv_transfer=_with_bootstrap_port(requested.kv_transfer, env),
        additional_config=requested.additional_config,
        user_quantization=requested.user_quantization,
        detected_quantization=detected,
        quantized_layers=quantized,
        npu_alloc_conf=env.get(NPU_ALLOC_CONF),
        omp_num_threads=env.get(OMP_NUM_THREADS),
        v2_model_runner=env.get(V2_MODEL_RUNNER),
        host_cpus=host_cpus,
        lora=requested.lora,
        mm_off=requested.mm_off,
        profiler=requested.profiler,
        training_consistency=batch_invariant_requested(env, settings),
        ascend_env=ascend_variables(env),
        outside_env={
            var.name: value for var in OUTSIDE_VARS if (value := env.get(var.name)) is not None
        },
        readable_files=(
            probe_referenced_files(requested.additional_config, local_files)
            if local_files is not None
            else {}
        ),
    )


def ascend_variables(env: Environment) -> dict[str, str]:
    """The VLLM_ASCEND_* variables that are set, by name, as written."""
    found = {}
    for name in env.names():
        value = env.get(name)
        if name.startswith(ASCEND_PREFIX) and value is not None:
            found[name] = value
    return found
