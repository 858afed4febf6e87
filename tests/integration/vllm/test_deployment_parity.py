"""`ascend-doctor plan` and `vllm serve` build the same Deployment from the same arguments.

For each argv, the doctor's path (vLLM's own `vllm serve` parser -> ServeArgs ->
adapters.doctor.plan.config.build_deployment) and the serving path (the same parser ->
EngineArgs -> VllmConfig, whose check_and_update_config builds the Deployment our
platform plans with) are compared field by field. Every input the core reads from the
config is varied by at least one case, so an input that one side leaves at its default
fails here. (Sleep mode is left out: vLLM refuses it before any platform hook runs; the
doctor/serve agreement table covers it.)
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any

import attrs
import pytest

from adapters.container import container
from adapters.doctor.plan.config import build_deployment
from adapters.doctor.plan.model import Target, read_model
from adapters.doctor.serve_args import ServeArgs
from adapters.system.model_files import LocalModelFiles
from adapters.vllm.engine.doctor_args import _serve_parser, parse_serve_args
from ascend_core.deployment import Deployment, ModelFacts
from ascend_core.deployment_builder import export_layers, files_say
from ports.device import ChipFamily, DeviceKind

HOST = Target(DeviceKind.CPU, ChipFamily.HOST, 8 << 30, 1, "test")

# (argv after the model, extra environment). Each row changes inputs the core reads.
CASES: list[tuple[list[str], dict[str, str]]] = [
    ([], {}),
    (["--enforce-eager", "--block-size", "64", "--max-model-len", "256"], {}),
    (["--no-enable-prefix-caching", "--kv-cache-dtype", "auto", "--dtype", "float32"], {}),
    (["--disable-custom-all-reduce", "--tensor-parallel-size", "1"], {}),
    (["--compilation-config", json.dumps({"cudagraph_mode": "NONE", "mode": 0})], {}),
    (["--compilation-config", json.dumps({"custom_ops": ["-rms_norm"]})], {}),
    (["--compilation-config", json.dumps({"cudagraph_capture_sizes": [1, 2, 4]})], {}),
    (["--quantization", "fp8"], {}),
    (["--enable-lora"], {}),
    (
        ["--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": "/tmp/t",
                                          "torch_profiler_record_shapes": True})],
        {},
    ),
    (["--additional-config", json.dumps({"enable_cpu_binding": False})], {}),
    ([], {"ASCEND_LAUNCH_BLOCKING": "1", "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:64"}),
    ([], {"OMP_NUM_THREADS": "3"}),  # a value no shell here sets
    ([], {"VLLM_ASCEND_TRAINING_CONSISTENCY": "1"}),
    ([], {"VLLM_BATCH_INVARIANT": "1"}),  # vLLM's switch for the same kernels
    ([], {"VLLM_USE_V2_MODEL_RUNNER": "1"}),  # overridden: the plan's runner is V1
    ([], {"VLLM_ASCEND_ENABLE_PREFETCH_MLP": "1"}),  # reaches the plan as ascend_env
    (  # the expert map is probed through LocalFiles into readable_files
        ["--additional-config", json.dumps({"eplb_config": {"expert_map_path": "/no/map.json"}})],
        {},
    ),
    (["--model-files", "modelslim"], {}),  # the model with a ModelSlim description
    # The batch limits and HCCL_BUFFSIZE (an outside variable) the MoE step reads.
    (["--max-num-seqs", "8", "--max-num-batched-tokens", "512"], {"HCCL_BUFFSIZE": "300"}),
]


@pytest.fixture(scope="module")
def modelslim_dir(model_dirs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """The tiny Qwen3's files plus a ModelSlim description (nothing is loaded)."""
    import shutil

    out = tmp_path_factory.mktemp("modelslim") / "tiny-qwen3-w8a8"
    shutil.copytree(model_dirs["qwen3"], out)
    names = [h.name for h in LocalModelFiles(str(out)).tensor_headers()]
    description = {"model_quant_type": "W8A8", "version": "1.0.0"}
    description.update({n: "FLOAT" for n in names})
    (out / "quant_model_description.json").write_text(json.dumps(description))
    return str(out)


def _argv(extra: list[str], model_dirs: dict[str, str], modelslim: str) -> list[str]:
    if extra[:2] == ["--model-files", "modelslim"]:
        return [modelslim, *extra[2:]]
    return [model_dirs["qwen3"], *extra]


def _doctor_deployment(argv: list[str]) -> Deployment:
    args = ServeArgs.from_parsed(parse_serve_args(argv))
    files = LocalModelFiles(args.model)
    c = container()
    model = read_model(files, args, c.environment())
    assert isinstance(model, ModelFacts), model
    detected = files_say(files)
    return build_deployment(
        args, model, HOST, c.environment(), detected, c.host_cpus(), c.local_files(),
        export_layers(files, args.quantization, detected),
    )


def _serve_deployment(argv: list[str]) -> Deployment:
    """The Deployment check_and_update_config planned with, read off the config it keeps it
    on; for a config the plan refused, off the config in the refusal's traceback."""
    from vllm.config import VllmConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    from adapters.vllm.engine.configure import DEPLOYMENT_ATTR
    from adapters.vllm.engine.translate import plugin_attrs

    ns = _serve_parser().parse_args(argv)
    ns.model = ns.model_tag or ns.model  # as `vllm serve MODEL` does
    try:
        # As `vllm serve` does: its batch defaults (max_num_seqs, max_num_batched_tokens)
        # are the API server's, which the doctor assumes.
        config = AsyncEngineArgs.from_cli_args(ns).create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER
        )
    except (Exception, SystemExit) as exc:  # a refusal (StartupError) comes after the build
        tb, configs = exc.__traceback__, []
        while tb is not None:
            configs += [v for v in tb.tb_frame.f_locals.values() if isinstance(v, VllmConfig)]
            tb = tb.tb_next
        planned = [
            c for c in configs if getattr(plugin_attrs(c), DEPLOYMENT_ATTR, None) is not None
        ]
        if not planned:
            raise AssertionError(f"vLLM refused the arguments before planning: {exc!r}") from exc
        config = planned[0]
    deployment = getattr(plugin_attrs(config), DEPLOYMENT_ATTR).value
    assert isinstance(deployment, Deployment), "check_and_update_config never planned"
    return deployment


def _fields(d: Deployment) -> dict[str, Any]:
    """Every field, sub-records flattened to `section.field`."""
    out: dict[str, Any] = {}
    for key, value in attrs.asdict(d, recurse=True).items():
        if isinstance(value, dict) and key != "additional_config":
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    out["additional_config"] = dict(d.additional_config)
    return out


@pytest.mark.parametrize(("extra", "env"), CASES, ids=[" ".join(a) or "-" for a, _ in CASES])
def test_doctor_and_serve_build_the_same_deployment(
    model_dirs: dict[str, str], modelslim_dir: str, extra: list[str], env: dict[str, str]
) -> None:
    saved = dict(os.environ)
    try:
        # An earlier serve in this process wrote VLLM_USE_V2_MODEL_RUNNER=0 (configure.py);
        # a doctor in a process of its own sees the operator's environment without it.
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        for name, value in env.items():
            os.environ[name] = value
        argv = _argv(extra, model_dirs, modelslim_dir)
        doctor = _fields(_doctor_deployment(argv))
        serve = _fields(_serve_deployment(argv))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    differing = {k: (doctor[k], serve[k]) for k in doctor if doctor[k] != serve[k]}
    assert not differing, differing


def test_the_cases_vary_every_requested_input(
    model_dirs: dict[str, str], modelslim_dir: str
) -> None:
    """The converse: each field of the serving Deployment that comes from the arguments
    or the environment takes a non-default value in at least one case."""
    base = _fields(_doctor_deployment([model_dirs["qwen3"]]))
    varied: set[str] = set()
    for extra, env in CASES:
        saved = dict(os.environ)
        try:
            os.environ.update(env)
            row = _fields(_doctor_deployment(_argv(extra, model_dirs, modelslim_dir)))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        varied |= {key for key, value in row.items() if value != base[key]}
    expected = {
        "compilation.enforce_eager", "compilation.mode", "compilation.graph_mode",
        "compilation.capture_sizes", "compilation.custom_ops", "cache.block_size",
        "cache.enable_prefix_caching",
        "user_quantization", "lora",
        "additional_config", "outside_env", "npu_alloc_conf", "omp_num_threads",
        "training_consistency", "detected_quantization", "quantized_layers", "ascend_env",
        "readable_files",
        "model.max_model_len", "model.dtype",
    }
    assert expected <= varied, expected - varied


def test_check_and_update_config_translates_the_config_once(model_dirs: dict[str, str]) -> None:
    """One translation (one reading of the model files, through the container's
    model_files) per hook; the patch plan it chose travels on the config, so a worker
    applies it without translating again."""
    from dependency_injector import providers
    from vllm.config.utils import replace
    from vllm.engine.arg_utils import AsyncEngineArgs

    from adapters.vllm.engine.configure import PATCH_PLAN_ATTR
    from adapters.vllm.engine.platform import AscendHostPlatform
    from adapters.vllm.engine.translate import plugin_attrs

    readers: list[int] = []  # the ModelFiles that read something of the model's files

    class Counting(LocalModelFiles):
        def read_json(self, name):  # type: ignore[no-untyped-def]
            if id(self) not in readers:
                readers.append(id(self))
            return super().read_json(name)

    def counting(directory: str) -> LocalModelFiles:
        return Counting(directory)

    with container().model_files.override(providers.Factory(counting)):
        ns = _serve_parser().parse_args([model_dirs["qwen3"]])
        ns.model = ns.model_tag or ns.model
        config = AsyncEngineArgs.from_cli_args(ns).create_engine_config()
    assert len(readers) == 1, "the model's files were read by more than one translation"
    assert config.compilation_config.cudagraph_capture_sizes == []  # the plan's change
    plan = getattr(plugin_attrs(config), PATCH_PLAN_ATTR)
    assert plan.ids, "the host deployment applies patches"
    in_worker = pickle.loads(pickle.dumps(config))  # as it reaches a worker process
    assert getattr(plugin_attrs(in_worker), PATCH_PLAN_ATTR).ids == plan.ids
    # The speculative proposers copy the config for their draft with vLLM's replace(),
    # which refuses attributes that are not dataclass fields: none of ours is on it.
    copy = replace(config, model_config=config.model_config)
    assert copy.model_config is config.model_config
    AscendHostPlatform.apply_deployment_patches(in_worker)  # as the worker does
    assert len(readers) == 1
