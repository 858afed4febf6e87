"""The config plan: one pure pass of the steps, in order, over a deployment."""

from __future__ import annotations

from collections.abc import Callable

from ascend_core.deployment import Deployment
from ascend_core.plan.additional_config import validate_additional_config
from ascend_core.plan.allocator import plan_allocator
from ascend_core.plan.ascend_env import check_ascend_env
from ascend_core.plan.block_size import decide_block_size
from ascend_core.plan.encoder_graphs import decide_encoder_graphs
from ascend_core.plan.eplb import decide_eplb
from ascend_core.plan.gpu_settings import fix_gpu_only_settings
from ascend_core.plan.graph import decide_graph_mode
from ascend_core.plan.host_threads import decide_host_threads
from ascend_core.plan.hybrid_cache import decide_hybrid_prefix_caching
from ascend_core.plan.kv_transfer import check_kv_transfer
from ascend_core.plan.limits import check_op_limits, check_support
from ascend_core.plan.model_runner import pick_model_runner
from ascend_core.plan.moe_comm import decide_moe_comm
from ascend_core.plan.parallel import validate_parallel
from ascend_core.plan.profiler import check_profiler
from ascend_core.plan.quantization import check_quantized_layers, resolve_quantization
from ascend_core.plan.result import ConfigPlan, Decisions, Draft
from ascend_core.plan.speculative import check_speculative
from ascend_core.plan.worker import pick_worker

Step = Callable[[Deployment, Draft], Draft]

# The support matrix comes first: a refused feature is the first thing an operator reads.
# Order matters where a step reads an earlier decision: graph sizes read the
# sequence-parallel decision of validate_parallel, the graph step reads the parsed
# additional_config, which reads the variables check_ascend_env parsed. Every step
# runs even after errors, so the operator sees every problem in one pass.
STEPS: tuple[Step, ...] = (
    check_support,
    check_ascend_env,
    validate_parallel,
    validate_additional_config,
    resolve_quantization,
    check_quantized_layers,
    fix_gpu_only_settings,
    decide_graph_mode,
    decide_encoder_graphs,
    pick_worker,
    pick_model_runner,
    decide_block_size,
    decide_hybrid_prefix_caching,
    check_op_limits,
    decide_eplb,
    decide_moe_comm,
    plan_allocator,
    decide_host_threads,
    check_kv_transfer,
    check_speculative,
    check_profiler,
)


def plan_config(deployment: Deployment, steps: tuple[Step, ...] = STEPS) -> ConfigPlan:
    """Every change the deployment needs, with reasons, and every error, with hints."""
    draft = Draft(
        Decisions(
            sequence_parallel=deployment.parallel.sequence_parallel,
            custom_ops=deployment.compilation.custom_ops,
            compile_mode=deployment.compilation.mode,
            capture_sizes=deployment.compilation.capture_sizes,
            block_size=deployment.cache.block_size,
            npu_alloc_conf=deployment.npu_alloc_conf,
        )
    )
    for step in steps:
        draft = step(deployment, draft)
    return draft.finish()
