"""Step: a MoE model's expert-parallel communication method, its experts per rank and
MC2's HCCL buffer, refused before any weight loads where they cannot serve."""

from __future__ import annotations

from ascend_core.ascend_config import AscendConfig
from ascend_core.deployment import Deployment, GraphMode, ParallelSettings
from ascend_core.env.outside_vars import HCCL_BUFFSIZE, given
from ascend_core.errors import ConfigError, EnvironmentVariableError
from ascend_core.moe.comm_method import MoeCommFacts, MoeCommMethod, MoeCommPlan, plan_moe_comm
from ascend_core.moe.decision import HcclBuffer, MoeDecision
from ascend_core.moe.forced import force_method
from ascend_core.moe.hccl_buffer import mc2_buffer_mb
from ascend_core.moe.in_graphs import captures, in_graphs
from ascend_core.moe.placement import place_experts
from ascend_core.plan.capture_sizes import default_capture_sizes
from ascend_core.plan.result import Draft
from ascend_core.quantization.methods import QuantMethod
from ports.device import ChipFamily

# The reference sends A3 to its fused dispatch_ffn_combine kernel when enable_fused_mc2 is
# 1 and the EP group has at most this many ranks (_select_a3_moe_comm_method).
FUSED_MC2_MAX_EP = 32


def ep_size(parallel: ParallelSettings) -> int:
    """vLLM's expert-parallel group: DP x PCP x TP ranks with enable_expert_parallel."""
    if not parallel.expert_parallel:
        return 1
    return parallel.tp * parallel.dp * parallel.pcp


def decide_moe_comm(deployment: Deployment, draft: Draft) -> Draft:
    """For a MoE model whose batch limits are known: the method per step size (the
    reference's rules, or the one VLLM_ASCEND_MOE_COMM_METHOD forces), the experts each
    rank holds, and MC2's HCCL buffer against HCCL_BUFFSIZE."""
    model = deployment.model
    config, settings = draft.decisions.ascend_config, draft.decisions.env
    batch = deployment.batch
    if not model.is_moe or config is None or settings is None:
        return draft
    ep = ep_size(deployment.parallel)
    eplb = draft.decisions.eplb
    given = config.eplb_config.num_redundant_experts
    if eplb is None and given:
        draft = draft.fail(
            ConfigError(
                f"additional_config.eplb_config.num_redundant_experts={given} without EPLB: "
                "vLLM places redundant experts only when its EPLB balances them.",
                "set additional_config.eplb_config.dynamic_eplb=true or serve with "
                "--enable-eplb (and --enable-expert-parallel), or remove the count",
            )
        )
    redundant = 0 if eplb is None else eplb.redundant
    placement, misplaced = place_experts(max(1, model.num_experts), redundant, ep)
    if misplaced is not None:
        draft = draft.fail(
            ConfigError(
                f"num_redundant_experts ({eplb.source if eplb else 'EPLB'}): {misplaced}.",
                "choose a count that makes the physical experts a multiple of the EP "
                "size (and serve with --enable-expert-parallel), or 0",
            )
        )
    fused = config.reference_value("enable_fused_mc2", 0)
    if fused == 1 and deployment.chip_family is ChipFamily.A3 and 1 < ep <= FUSED_MC2_MAX_EP:
        draft = draft.fail(
            ConfigError(
                f"enable_fused_mc2=1 (additional_config or VLLM_ASCEND_ENABLE_FUSED_MC2) "
                f"asks for the fused dispatch_ffn_combine kernel on A3 with EP {ep}, which "
                "this build does not have.",
                "set enable_fused_mc2 to 0: MC2's dispatch/combine v2 then serves these "
                "steps, as in vllm-ascend without the fused kernel",
            )
        )
    if batch.max_num_batched_tokens is None or batch.max_num_seqs is None:
        return draft
    facts = MoeCommFacts(
        chip_family=deployment.chip_family,
        hidden_size=model.hidden_size,
        num_experts=max(1, model.num_experts),
        experts_per_token=max(1, model.experts_per_token),
        ep_size=ep,
        tp=deployment.parallel.tp,
        decode_tokens=_decode_tokens(deployment, draft),
        max_num_batched_tokens=batch.max_num_batched_tokens,
        prefill_mc2=config.enable_prefill_mc2,
        lora=deployment.lora,
    )
    forced = settings.moe_comm_method.method
    comm: MoeCommPlan
    if forced is None:
        comm = plan_moe_comm(facts)
    else:
        try:
            comm = force_method(facts, forced)
        except ConfigError as error:
            return draft.fail(error)
    buffer = None
    if MoeCommMethod.MC2 in comm.methods():
        buffer, problem = _hccl_buffer(deployment, facts, comm, placement.most_per_rank, config)
        if problem is not None:
            draft = draft.fail(problem)
    graphs = None
    if draft.decisions.graph_mode not in (None, GraphMode.NONE):
        graphs = in_graphs(comm, facts.decode_tokens)
        refusal = dp_capture_refusal(deployment.parallel, comm, facts.decode_tokens)
        if refusal is not None:
            draft = draft.fail(refusal)
    decision = MoeDecision(comm, placement, buffer, _token_dtype(deployment, comm), graphs)
    return draft.decide(moe=decision)


def dp_capture_refusal(
    parallel: ParallelSettings, comm: MoeCommPlan, captured_tokens: int
) -> ConfigError | None:
    """Under data parallelism with expert parallelism, the steps captured in graphs must
    exchange by a method a capture records (MC2): each DP rank brings its own tokens, so
    the partial sums that captured TP steps fall back to (in_graphs) would add other
    ranks' tokens. None where the captured steps exchange, or without DP + EP."""
    if parallel.dp == 1 or ep_size(parallel) == 1:
        return None
    method = comm.for_tokens(captured_tokens).method
    if captures(method):
        return None
    return ConfigError(
        f"data parallel {parallel.dp} with expert parallelism captures NPU graphs whose "
        f"steps (up to {captured_tokens} tokens) the plan gives {method.value} "
        f"({comm.for_tokens(captured_tokens).reason}), which reads its splits on the host "
        "and cannot run inside a capture; each DP rank brings its own tokens, so the "
        "captured steps cannot fall back to summing the ranks' partial outputs.",
        "force MC2 where the chip takes it (VLLM_ASCEND_MOE_COMM_METHOD=mc2), or serve "
        "with --enforce-eager (eager steps exchange by any method)",
    )


def _decode_tokens(deployment: Deployment, draft: Draft) -> int:
    """The step the MC2 capacity is sized for: the largest captured size when graphs are
    captured, else max_num_seqs x (1 + k) (the reference's set_mc2_tokens_capacity)."""
    batch = deployment.batch
    assert batch.max_num_seqs is not None and batch.max_num_batched_tokens is not None
    query = 1 + deployment.speculative.num_speculative_tokens
    if draft.decisions.graph_mode is GraphMode.NONE:
        return batch.max_num_seqs * query
    sizes = draft.decisions.capture_sizes
    if sizes is None:
        sizes = default_capture_sizes(batch.max_num_seqs, batch.max_num_batched_tokens, query)
    return max(sizes) if sizes else batch.max_num_seqs * query


def _hccl_buffer(
    deployment: Deployment,
    facts: MoeCommFacts,
    comm: MoeCommPlan,
    experts_per_rank: int,
    config: AscendConfig,
) -> tuple[HcclBuffer | None, ConfigError | EnvironmentVariableError | None]:
    try:
        set_mb = given(deployment.outside_env, HCCL_BUFFSIZE)
    except ValueError:
        raw = deployment.outside_env[HCCL_BUFFSIZE.name]
        return None, EnvironmentVariableError(
            f"HCCL_BUFFSIZE={raw!r} is not {HCCL_BUFFSIZE.accepted} (MB).",
            "set it to the MB of HCCL buffer each rank may use, or unset it for CANN's 200",
        )
    buffsize = HCCL_BUFFSIZE.default if set_mb is None else set_mb
    hierarchy = config.reference_value("mc2_comm_alg", "") == "hierarchy" or bool(
        config.reference_value("enable_mc2_hierarchy_comm", False)
    )
    needed = mc2_buffer_mb(
        facts.chip_family,
        tokens_per_rank=comm.capacity // facts.tp,
        ep_size=facts.ep_size,
        experts_per_rank=experts_per_rank,
        hidden_size=facts.hidden_size,
        top_k=facts.experts_per_token,
        num_experts=facts.num_experts,
        hierarchy=hierarchy,
    )
    buffer = HcclBuffer(needed, buffsize, set_mb is not None)
    if buffer.fits:
        return buffer, None
    return buffer, ConfigError(
        f"MC2 needs an HCCL buffer of {needed} MB a rank ({comm.capacity // facts.tp} "
        f"tokens a rank, EP {facts.ep_size}, {experts_per_rank} experts a rank, hidden "
        f"{facts.hidden_size}, top-k {facts.experts_per_token}; CANN's "
        f"aclnnMoeDistributeDispatchV2 formula) and HCCL_BUFFSIZE gives {buffsize} MB"
        + ("" if set_mb is not None else " (unset: CANN's default)")
        + ".",
        f"export HCCL_BUFFSIZE={needed} (or more) on every rank, or lower the tokens a "
        "step carries (--max-num-seqs, the capture sizes), or set "
        "VLLM_ASCEND_MOE_COMM_METHOD=alltoall",
    )


def _token_dtype(deployment: Deployment, comm: MoeCommPlan) -> str:
    """What dispatch sends: W8A8_DYNAMIC ModelSlim experts take int8 tokens with per-token
    scales (MC2's quant_mode 2), known per layer only when the weights' description is
    read; otherwise the model dtype."""
    dtype = deployment.model.dtype
    if MoeCommMethod.MC2 in comm.methods() and deployment.detected_quantization in (
        QuantMethod.ASCEND,
    ):
        return f"{dtype}, or int8 with per-token scales for W8A8_DYNAMIC experts (quant_mode 2)"
    return dtype
