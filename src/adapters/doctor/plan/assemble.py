"""`ascend-doctor plan`: what the plugin will do with these `vllm serve` arguments, before
any weight is loaded. Every decision is the core's; this module only gathers inputs."""

from __future__ import annotations

from typing import Any

import attrs

from adapters.doctor.plan.attention import attention_items
from adapters.doctor.plan.config import (
    build_deployment,
    config_plan_items,
    engine_execution,
    speculative_facts,
)
from adapters.doctor.plan.graphs import graph_items
from adapters.doctor.plan.items import PASS
from adapters.doctor.plan.memory import memory_items
from adapters.doctor.plan.model import Target, model_items, read_model
from adapters.doctor.plan.moe import moe_items
from adapters.doctor.plan.patches import patch_items
from adapters.doctor.plan.quantization import quantization_items
from adapters.doctor.plan.ray import ray_items
from adapters.doctor.plan.registration import registration_item
from adapters.doctor.plan.roofline import RooflineAsk, roofline_items
from adapters.doctor.report import Report, Section
from adapters.doctor.serve_args import ServeArgs
from ascend_core.deployment_builder import export_layers
from ascend_core.plan import ConfigPlan, ModelRunner
from ascend_core.plan.speculative import PROPOSER_PACKAGES
from ascend_core.preflight import CheckItem
from ascend_core.quantization import QuantMethod
from ascend_core.v2_kernels import KERNELS
from ports.cluster import RayCluster
from ports.device import DeviceKind
from ports.environment import Environment
from ports.local_files import LocalFiles
from ports.model_files import ModelFiles
from ports.upstream import Upstream


def plan_report(
    args: ServeArgs,
    files: ModelFiles,
    env: Environment,
    upstream: Upstream,
    target: Target,
    host_cpus: int | None = None,
    local_files: LocalFiles | None = None,
    draft_files: ModelFiles | None = None,
    ray_cluster: RayCluster | None = None,
    ray_address: str | None = None,
    roofline: RooflineAsk | None = None,
) -> Report:
    """Every section of `plan`; a failing section does not stop the others. `draft_files`:
    the draft model of speculative_config.model, when one is given. With the Ray executor,
    a section says what Ray must provide, and checks the cluster at `ray_address` through
    `ray_cluster` when both are given. `roofline`: the per-chip bound is shown when asked
    (`--chip`, or a probed NPU) for an NPU target."""
    sections: list[Section] = []
    data: dict[str, Any] = {"model": files.location, "target": attrs.asdict(target)}
    model = read_model(files, args, env)
    if isinstance(model, list):
        return Report("plan", [Section("model", model)], data)
    registration, data["registration"] = registration_item(model.architecture)
    sections.append(Section("model", [*model_items(model, args, target), registration]))

    quant_items, detection = quantization_items(files, args)
    detected = detection.files_say if detection is not None else QuantMethod.NONE
    quantized = export_layers(files, args.quantization, detected)
    deployment = build_deployment(
        args, model, target, env, detected, host_cpus, local_files, quantized
    )
    speculative = speculative_facts(args, files, draft_files)
    if speculative is not None:  # MTP's layers, vocabulary, draft model, as serving reads them
        package = PROPOSER_PACKAGES.get(speculative.method or "")
        if package is not None:  # suffix: whether its package imports, as serving asks
            installed = upstream.has_symbol(package.symbol)
            speculative = attrs.evolve(speculative, proposer_installed=installed)
        deployment = attrs.evolve(deployment, speculative=speculative)
    plan_items, plan = config_plan_items(deployment)
    sections.append(Section("config plan", plan_items))
    graphs, graph_data = graph_items(args, deployment, plan, target) if plan else ([], None)
    if plan is not None:
        sections.append(Section("graphs", graphs))
    moe, data["expert_parallel"] = moe_items(plan) if plan is not None else ([], None)
    if moe:
        sections.append(Section("expert parallelism", moe))
    sections.append(Section("attention", attention_items(model, target, env)))
    if plan is not None and plan.decisions.fp8 is not None:  # the chip's fp8 path, why
        quant_items.append(CheckItem("fp8", PASS, plan.decisions.fp8.describe()))
    sections.append(Section("quantization", quant_items))
    patches, patch_data = patch_items(deployment, upstream)
    sections.append(Section("patches", patches))
    block_size = (plan.block_size if plan is not None else None) or args.block_size
    memory, memory_data = memory_items(
        args, files, model, target, block_size, detection, draft_files
    )
    sections.append(Section("memory budget", memory))
    if roofline is not None and target.kind is DeviceKind.NPU:
        bound, data["roofline"] = roofline_items(
            args, files, model, target, detection, roofline, draft_files
        )
        sections.append(Section("roofline", bound))
    if args.distributed_executor_backend == "ray":
        ray, data["ray"] = ray_items(args, target.kind, ray_cluster, ray_address)
        sections.append(Section("ray", ray))
    data.update(
        {
            "plan": plan.describe() if plan is not None else None,
            "execution": _execution(plan, deployment.device_kind) if plan is not None else None,
            "model_runner": _runner_data(plan) if plan is not None else None,
            "graphs": graph_data,
            "changes": [c.describe() for c in plan.changes] if plan is not None else [],
            "patches": patch_data,
            "memory": memory_data,
        }
    )
    return Report("plan", sections, data)


def _execution(plan: ConfigPlan, device: DeviceKind) -> dict[str, str]:
    """What the engine will run: its graph mode (not necessarily the plan's) and how."""
    graphs, how = engine_execution(plan, device)
    compile_mode = plan.compile_mode.name if plan.compile_mode is not None else None
    return {"graph_mode": graphs.name, "compile_mode": compile_mode or "unset", "how": how}


def _runner_data(plan: ConfigPlan) -> dict[str, object]:
    """The runner the worker builds and why; with V2, its Triton kernels and how the NPU
    runs each (ascend_core.v2_kernels)."""
    data: dict[str, object] = {
        "runner": plan.model_runner.name,
        "reason": plan.decisions.model_runner_reason,
    }
    if plan.model_runner is ModelRunner.V2:
        data["kernels"] = [k.row() for k in KERNELS]
    return data
