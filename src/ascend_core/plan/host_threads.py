"""Step: on the host device, torch computes on every usable core, split between the
local workers (OMP_NUM_THREADS)."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind

# The operator's knob is OMP_NUM_THREADS itself: torch, OpenMP and vLLM all read it, so
# a VLLM_ASCEND_* twin would only add a precedence rule and a way for them to disagree.
REASON = (
    "the host device computes the model on the CPU, and vLLM drops an accelerator "
    "platform's engine and workers to 1 torch thread unless OMP_NUM_THREADS is set; "
    "set OMP_NUM_THREADS yourself to choose another count"
)


def decide_host_threads(deployment: Deployment, draft: Draft) -> Draft:
    """Set OMP_NUM_THREADS to each local worker's share of the usable cores on the host
    device, unless the user set it.

    Every worker process (tensor x pipeline x data parallel ranks; the host device runs
    them all on this machine) inherits the variable, so the whole count for each would
    run workers x cores threads on the cores, and they would preempt each other.
    """
    if deployment.device_kind is not DeviceKind.CPU:
        return draft  # on an NPU the host threads only feed the device: vLLM's 1 is right
    if deployment.omp_num_threads is not None:
        return draft  # the user's choice stands, and vLLM honours it as well
    if deployment.host_cpus is None:
        return draft.warn(
            "Could not count the CPUs this process may use, so OMP_NUM_THREADS is left "
            "unset and vLLM will compute on 1 torch thread; set OMP_NUM_THREADS to the "
            "number of cores to use."
        )
    p = deployment.parallel
    workers = p.tp * p.pp * p.dp
    threads = max(1, deployment.host_cpus // workers)
    if workers == 1:
        why = f"{deployment.host_cpus} usable cores"
    else:
        why = (
            f"{deployment.host_cpus} usable cores / {workers} local workers "
            f"(tp {p.tp} x pp {p.pp} x dp {p.dp})"
        )
    if deployment.host_cpus < workers:
        draft = draft.warn(
            f"{workers} local workers on {deployment.host_cpus} usable cores: each computes "
            "on 1 thread and they take turns on the cores; lower --tensor-parallel-size "
            "(the host device gains nothing from TP on one machine)."
        )
    return draft.change(fields.OMP_NUM_THREADS, None, str(threads), f"{why}: {REASON}")
