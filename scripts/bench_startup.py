"""One fresh-process sample of vLLM's start, with or without the plugin.

    python scripts/bench_startup.py --mode plugin --model models/100m-llama --out s.json

Times, in order: `import vllm`; our `register()` called cold (plugin mode only; its
imports are then cached for vLLM's own call); resolving `current_platform` (vLLM
scans the platform entry points and probes its built-in platforms); loading the
general plugins (ours: custom ops, attention backend name, patch plan); then, in both
modes, importing the vLLM modules any Llama serve loads anyway (engine args, the model,
the worker, the attention registry): our plugin imports some of them early, so the
sum including this stage is the fair "what the plugin adds" comparison. In plugin
mode it then builds the real VllmConfig for the model and times our
`check_and_update_config` inside it (translate + core plan + apply, cold) and the
core's `plan_config` alone on that config (warm, median of repeats).
vLLM alone (`VLLM_PLUGINS` matching no plugin) resolves to UnspecifiedPlatform,
which cannot build a VllmConfig, so config timing exists only in plugin mode.

`--mode plugin-late` times the plugin's own start work alone, in one process: vLLM and
the serve imports first, then `register()`, the platform module and `register_general()`
(wall and CPU). The difference of two 7-second process totals (plugin minus vllm) moves
by hundreds of ms on a busy host, and a full garbage collection (about 9 per start,
20-400 ms each in both modes) lands on whichever stage allocates at the time; this one
interval does not carry vLLM's own variance, so it A/Bs two trees of the plugin. It is
a lower bound: what the plugin imports that a serve imports later is not counted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from typing import Any

PLAN_REPEATS = 50
# What the engine process of any `vllm serve` of a Llama model imports, plugin or not.
SERVE_IMPORTS = (
    "vllm.engine.arg_utils",
    "vllm.model_executor.models.llama",
    "vllm.v1.attention.backends.registry",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def sample(mode: str, model: str) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode}
    cpu = time.process_time()  # user+sys of this process: steadier than wall on a busy host
    t = time.perf_counter()
    import vllm  # noqa: F401

    out["import_vllm_ms"] = _ms(t)

    out["register_ms"] = 0.0
    if mode == "plugin":
        t = time.perf_counter()
        from adapters.vllm.engine.plugin import register

        path = register()
        out["register_ms"] = _ms(t)
        out["register_returned"] = path

    t = time.perf_counter()
    from vllm.platforms import current_platform

    out["platform"] = type(current_platform).__name__
    out["resolve_platform_ms"] = _ms(t)

    t = time.perf_counter()
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    out["general_plugins_ms"] = _ms(t)
    out["start_total_ms"] = sum(
        out[k] for k in ("import_vllm_ms", "register_ms", "resolve_platform_ms",
                         "general_plugins_ms")
    )
    t = time.perf_counter()
    for name in SERVE_IMPORTS:
        importlib.import_module(name)
    out["serve_imports_ms"] = _ms(t)
    out["start_with_serve_imports_ms"] = out["start_total_ms"] + out["serve_imports_ms"]
    out["start_with_serve_imports_cpu_ms"] = (time.process_time() - cpu) * 1000.0
    if mode == "plugin":
        out.update(_config_times(model, type(current_platform)))
    return out


def sample_late() -> dict[str, Any]:
    import vllm  # noqa: F401

    for name in SERVE_IMPORTS:
        importlib.import_module(name)
    wall, cpu = time.perf_counter(), time.process_time()
    modules = len(sys.modules)
    from adapters.vllm.engine.plugin import register, register_general

    path = register()
    if path is not None:
        importlib.import_module(path.rpartition(".")[0])
    register_general()
    return {
        "mode": "plugin-late",
        "plugin_alone_ms": _ms(wall),
        "plugin_alone_cpu_ms": (time.process_time() - cpu) * 1000.0,
        "plugin_alone_modules": len(sys.modules) - modules,
        "platform_path": path,
    }


def _config_times(model: str, platform_cls: type) -> dict[str, Any]:
    from vllm.engine.arg_utils import EngineArgs

    from ascend_core.plan import plan_config

    # Wrap the hook on the class for this process only, to time vLLM's real call.
    original = platform_cls.check_and_update_config.__func__  # type: ignore[attr-defined]
    timings: list[float] = []

    def timed(cls: type, vllm_config: Any) -> None:
        t0 = time.perf_counter()
        original(cls, vllm_config)
        timings.append(_ms(t0))

    platform_cls.check_and_update_config = classmethod(timed)  # type: ignore[assignment]
    t = time.perf_counter()
    config = EngineArgs(model=model, dtype="float32", max_model_len=512).create_engine_config()
    create_ms = _ms(t)
    platform_cls.check_and_update_config = classmethod(original)  # type: ignore[assignment]

    # The platform's own translation (the builder the doctor uses too), warm.
    from adapters.vllm.engine.configure import translate_config

    args = (platform_cls.device_kind, platform_cls.chip_family(),  # type: ignore[attr-defined]
            platform_cls.config_ports())  # type: ignore[attr-defined]
    deployment = translate_config(config, *args)
    t = time.perf_counter()
    translate_config(config, *args)
    translate_ms = _ms(t)
    plans = []
    for _ in range(PLAN_REPEATS):
        t = time.perf_counter()
        plan_config(deployment)
        plans.append(_ms(t))
    return {
        "create_engine_config_ms": create_ms,
        "check_and_update_config_ms": sum(timings),
        "check_and_update_config_calls": len(timings),
        "translate_warm_ms": translate_ms,
        "plan_config_warm_ms": statistics.median(plans),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=("vllm", "plugin", "plugin-late"), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with open(args.out, "w") as f:
        json.dump(sample_late() if args.mode == "plugin-late" else sample(args.mode, args.model), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
