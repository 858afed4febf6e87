"""Plan step: eager vs NPU graphs, graph mode and capture sizes."""

from __future__ import annotations

import pytest

from ascend_core.deployment import CompileMode, GraphMode
from ascend_core.plan import fields, plan_config
from ascend_core.plan.graph import NPU_FULL_GRAPH_MODES
from ports.device import ChipFamily
from unit.core.plan_fixtures import host, npu


def test_npu_default_for_a_dense_model_is_full_and_piecewise_with_a_reason() -> None:
    """vllm-ascend's default since v0.23: decode steps whole, the rest in pieces."""
    plan = plan_config(npu())
    assert plan.graph_mode is GraphMode.FULL_AND_PIECEWISE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert (change.old, change.new) == (None, GraphMode.FULL_AND_PIECEWISE)
    assert "v0.23" in change.reason


@pytest.mark.parametrize("is_moe", [False, True], ids=["mla", "mla-moe"])
def test_npu_default_for_an_mla_model_is_the_references_full_decode_only(is_moe: bool) -> None:
    """The MLA backend captures uniform decode steps whole, MoE layers inside."""
    from ascend_core.plan.graph import DEFAULT_MLA_REASON
    from unit.core.plan_fixtures import mla_model

    plan = plan_config(npu(mla_model(is_moe=is_moe)))
    assert plan.graph_mode is GraphMode.FULL_DECODE_ONLY
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert (change.old, change.new, change.reason) == (
        None, GraphMode.FULL_DECODE_ONLY, DEFAULT_MLA_REASON
    )


@pytest.mark.parametrize(
    "mode",
    [GraphMode.PIECEWISE, GraphMode.NONE, GraphMode.FULL_DECODE_ONLY, GraphMode.FULL_AND_PIECEWISE],
)
def test_a_users_graph_mode_on_npu_is_kept(mode: GraphMode) -> None:
    plan = plan_config(npu(compilation={"graph_mode": mode, "mode": CompileMode.VLLM_COMPILE}))
    assert plan.graph_mode is mode
    assert not plan.changes_to(fields.GRAPH_MODE)


def test_host_captures_no_graphs_and_traces_once_instead_of_piecewise() -> None:
    plan = plan_config(
        host(compilation={"graph_mode": GraphMode.FULL, "mode": CompileMode.VLLM_COMPILE})
    )
    assert plan.graph_mode is GraphMode.NONE
    assert plan.compile_mode is CompileMode.DYNAMO_TRACE_ONCE
    (graph,) = plan.changes_to(fields.GRAPH_MODE)
    (compile_,) = plan.changes_to(fields.COMPILE_MODE)
    assert "host device" in graph.reason
    assert (compile_.old, compile_.new) == (CompileMode.VLLM_COMPILE, CompileMode.DYNAMO_TRACE_ONCE)
    assert "enforce_eager" in compile_.reason  # says how to run eagerly instead


@pytest.mark.parametrize("sizes", [None, (1, 2, 4)])
@pytest.mark.parametrize("eager", [False, True])
def test_the_host_plan_empties_capture_sizes(sizes: tuple[int, ...] | None, eager: bool) -> None:
    """A change of the plan (so `ascend-doctor plan` lists it), not a platform setting."""
    plan = plan_config(host(compilation={"capture_sizes": sizes, "enforce_eager": eager}))
    (change,) = plan.changes_to(fields.CAPTURE_SIZES)
    assert (change.old, change.new) == (sizes, ())
    assert "captures no graphs" in change.reason
    assert not plan_config(host(compilation={"capture_sizes": ()})).changes_to(fields.CAPTURE_SIZES)


@pytest.mark.parametrize(
    "mode", [CompileMode.NONE, CompileMode.STOCK_TORCH_COMPILE, CompileMode.DYNAMO_TRACE_ONCE]
)
def test_a_users_compile_mode_on_the_host_stands(mode: CompileMode) -> None:
    plan = plan_config(host(compilation={"mode": mode}))
    assert plan.compile_mode is mode
    assert not plan.changes_to(fields.COMPILE_MODE)


@pytest.mark.parametrize("mode", [None, CompileMode.VLLM_COMPILE, CompileMode.DYNAMO_TRACE_ONCE])
def test_enforce_eager_on_the_host_runs_every_op_eagerly(mode: CompileMode | None) -> None:
    plan = plan_config(host(compilation={"enforce_eager": True, "mode": mode}))
    assert plan.compile_mode is CompileMode.NONE
    (compile_,) = plan.changes_to(fields.COMPILE_MODE)
    assert (compile_.old, compile_.new) == (mode, CompileMode.NONE)
    assert "enforce_eager" in compile_.reason


def test_enforce_eager_turns_graphs_and_compilation_off() -> None:
    plan = plan_config(
        npu(
            compilation={
                "enforce_eager": True,
                "graph_mode": GraphMode.PIECEWISE,
                "mode": CompileMode.VLLM_COMPILE,
            }
        )
    )
    assert plan.graph_mode is GraphMode.NONE
    assert plan.compile_mode is CompileMode.NONE
    assert all("enforce_eager" in c.reason for c in plan.changes_to(fields.GRAPH_MODE))


def test_enforce_eager_already_eager_needs_no_change() -> None:
    plan = plan_config(
        npu(
            compilation={
                "enforce_eager": True,
                "graph_mode": GraphMode.NONE,
                "mode": CompileMode.NONE,
            }
        )
    )
    assert not plan.changes_to(fields.GRAPH_MODE)
    assert not plan.changes_to(fields.COMPILE_MODE)


def test_launch_blocking_drops_graphs_but_keeps_compilation_with_a_reason() -> None:
    plan = plan_config(
        npu(
            compilation={"graph_mode": GraphMode.FULL, "mode": CompileMode.VLLM_COMPILE},
            outside_env={"ASCEND_LAUNCH_BLOCKING": "1"},
        )
    )
    assert plan.ok
    assert plan.graph_mode is GraphMode.NONE
    assert plan.compile_mode is CompileMode.VLLM_COMPILE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert "ASCEND_LAUNCH_BLOCKING=1" in change.reason
    assert not plan.changes_to(fields.COMPILE_MODE)


def test_piecewise_without_the_piecewise_compiler_becomes_none_with_a_reason() -> None:
    plan = plan_config(
        npu(compilation={"graph_mode": GraphMode.PIECEWISE, "mode": CompileMode.NONE})
    )
    assert plan.graph_mode is GraphMode.NONE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert "VLLM_COMPILE" in change.reason


def test_unset_graph_mode_under_a_non_piecewise_compiler_is_none() -> None:
    plan = plan_config(npu(compilation={"mode": CompileMode.STOCK_TORCH_COMPILE}))
    assert plan.graph_mode is GraphMode.NONE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert change.old is None
    assert "VLLM_COMPILE" in change.reason


def test_capture_sizes_are_filtered_to_multiples_of_tp_under_sequence_parallel() -> None:
    plan = plan_config(
        npu(
            parallel={"tp": 4, "sequence_parallel": True},
            compilation={"capture_sizes": [1, 2, 4, 8, 12, 16]},
        )
    )
    (change,) = plan.changes_to(fields.CAPTURE_SIZES)
    assert change.new == (4, 8, 12, 16)
    assert "dropped [1, 2]" in change.reason
    assert plan.decisions.capture_sizes == (4, 8, 12, 16)


def test_capture_sizes_none_divisible_are_rounded_up_rather_than_lost() -> None:
    plan = plan_config(
        npu(
            parallel={"tp": 4, "sequence_parallel": True},
            compilation={"capture_sizes": [1, 2, 3, 5]},
        )
    )
    (change,) = plan.changes_to(fields.CAPTURE_SIZES)
    assert change.new == (4, 8)
    assert "rounded" in change.reason


@pytest.mark.parametrize(
    ("parallel", "graph_mode"),
    [
        ({"tp": 4}, GraphMode.PIECEWISE),  # no sequence parallel
        ({"tp": 4, "sequence_parallel": True}, GraphMode.NONE),  # no graphs to capture
    ],
)
def test_capture_sizes_are_untouched_when_sequence_parallel_or_graphs_are_off(
    parallel: dict[str, object], graph_mode: GraphMode
) -> None:
    plan = plan_config(
        npu(parallel=parallel, compilation={"capture_sizes": [1, 3], "graph_mode": graph_mode})
    )
    assert not plan.changes_to(fields.CAPTURE_SIZES)


# --- vllm-ascend's defaults and A5 --------------------------------------------------------

SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)


def test_a5_piecewise_capture_sizes_are_reduced_to_four_spread_evenly() -> None:
    """vllm_ascend/platform.py _prune_reduced_capture_sizes (MAX_REDUCED_CAPTURE_SIZES = 4):
    four sizes at evenly spaced positions, the smallest and the largest kept."""
    plan = plan_config(npu(chip=ChipFamily.A5, compilation={"capture_sizes": SIZES}))
    (change,) = plan.changes_to(fields.CAPTURE_SIZES)
    assert change.old == SIZES
    assert change.new == (1, 8, 24, 64)  # positions 0, round(2.67)=3, round(5.33)=5, 8
    assert plan.decisions.capture_sizes == (1, 8, 24, 64)
    assert "A5" in change.reason


@pytest.mark.parametrize(
    ("chip", "graph_mode", "sizes"),
    [
        (ChipFamily.A2, GraphMode.PIECEWISE, SIZES),
        (ChipFamily.A3, GraphMode.PIECEWISE, SIZES),
        pytest.param(
            ChipFamily.A5,
            GraphMode.FULL,
            SIZES,
            marks=pytest.mark.skipif(
                GraphMode.FULL not in NPU_FULL_GRAPH_MODES,
                reason="the NPU serves FULL as PIECEWISE today (plan/graph.py)",
            ),
        ),
        (ChipFamily.A5, GraphMode.PIECEWISE, (1, 2, 4, 8)),
    ],
)
def test_capture_sizes_stay_off_a5_with_full_graphs_or_with_four_sizes_or_fewer(
    chip: ChipFamily, graph_mode: GraphMode, sizes: tuple[int, ...]
) -> None:
    compilation = {
        "capture_sizes": sizes,
        "graph_mode": graph_mode,
        "mode": CompileMode.VLLM_COMPILE,
    }
    plan = plan_config(npu(chip=chip, compilation=compilation))
    assert not plan.changes_to(fields.CAPTURE_SIZES)


def test_the_default_npugraph_ex_says_nothing_when_eager() -> None:
    """enable_npugraph_ex defaults to true as in vllm_ascend/ascend_config.py; only a written
    true that cannot take effect earns a warning."""
    plan = plan_config(npu(compilation={"enforce_eager": True}))
    assert not any("npugraph_ex" in w for w in plan.warnings)


def test_npugraph_ex_written_on_310p_is_a_warning() -> None:
    """ascend_config.py AscendCompilationConfig: profiles without NPUGRAPH_EX (310P) turn it
    off with a warning."""
    raw = {"ascend_compilation_config": {"enable_npugraph_ex": True}}
    plan = plan_config(npu(chip=ChipFamily.P310, additional_config=raw))
    assert any("Atlas 300I (310P) has no npugraph_ex" in w for w in plan.warnings)


def test_host_with_compilation_unset_traces_once_instead_of_vllms_piecewise_default() -> None:
    # Unset means vLLM compiles piecewise (VLLM_COMPILE at its default level) after the plan.
    plan = plan_config(host(compilation={}))
    (compile_,) = plan.changes_to(fields.COMPILE_MODE)
    assert (compile_.old, compile_.new) == (None, CompileMode.DYNAMO_TRACE_ONCE)
    assert plan.compile_mode is CompileMode.DYNAMO_TRACE_ONCE


def test_launch_blocking_drops_graphs_but_keeps_the_compiled_model() -> None:
    plan = plan_config(npu(outside_env={"ASCEND_LAUNCH_BLOCKING": "1"}))
    assert plan.graph_mode is GraphMode.NONE
    assert not plan.changes_to(fields.COMPILE_MODE)


def test_sequence_parallel_fitting_and_a5_reduction_are_one_change() -> None:
    """A field changes once: the TP fit, then the A5 reduction, in one change."""
    sizes = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
    plan = plan_config(
        npu(
            chip=ChipFamily.A5,
            parallel={"tp": 2, "sequence_parallel": True},
            compilation={"capture_sizes": sizes},
        )
    )
    (change,) = plan.changes_to(fields.CAPTURE_SIZES)
    assert change.old == sizes
    assert change.new == (2, 12, 24, 64)  # (2, 4, 8, 12, 16, 24, 32, 48, 64) reduced to 4
    assert "sequence parallelism" in change.reason and "A5" in change.reason


def test_npu_compiling_turns_off_vllms_cuda_fusion_passes_with_the_reason() -> None:
    from ascend_core.plan.graph import FUSION_PASSES_REASON

    compiled = plan_config(npu())
    for field in (fields.FUSE_NORM_QUANT, fields.FUSE_ACT_QUANT):
        (change,) = compiled.changes_to(field)
        assert change.new is False and change.reason == FUSION_PASSES_REASON
    eager = plan_config(npu(compilation={"enforce_eager": True}))
    assert not eager.changes_to(fields.FUSE_NORM_QUANT)


@pytest.mark.parametrize(
    ("compile_mode", "served"),
    [
        (CompileMode.VLLM_COMPILE, GraphMode.FULL_AND_PIECEWISE),
        (CompileMode.NONE, GraphMode.FULL_DECODE_ONLY),
    ],
)
def test_full_graphs_of_mixed_steps_become_decode_only_full_graphs_with_the_reason(
    compile_mode: CompileMode, served: GraphMode
) -> None:
    from ascend_core.plan.graph import NPU_FULL_MIXED_REASON

    plan = plan_config(npu(compilation={"graph_mode": GraphMode.FULL, "mode": compile_mode}))
    assert plan.graph_mode is served  # as vLLM does below ALWAYS support
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert (change.old, change.new, change.reason) == (
        GraphMode.FULL,
        served,
        NPU_FULL_MIXED_REASON,
    )


@pytest.mark.parametrize("mode", [GraphMode.FULL_DECODE_ONLY, GraphMode.FULL_AND_PIECEWISE])
def test_full_decode_graphs_of_an_mla_moe_model_are_kept(mode: GraphMode) -> None:
    from unit.core.plan_fixtures import mla_model

    compilation = {"graph_mode": mode, "mode": CompileMode.VLLM_COMPILE}
    plan = plan_config(npu(mla_model(is_moe=True), compilation=compilation))
    assert plan.graph_mode is mode
    assert not plan.changes_to(fields.GRAPH_MODE)


def test_full_graphs_of_mixed_steps_of_an_mla_model_become_full_and_piecewise() -> None:
    from ascend_core.plan.graph import NPU_FULL_MIXED_REASON
    from unit.core.plan_fixtures import mla_model

    compilation = {"graph_mode": GraphMode.FULL, "mode": CompileMode.VLLM_COMPILE}
    plan = plan_config(npu(mla_model(is_moe=False), compilation=compilation))
    assert plan.graph_mode is GraphMode.FULL_AND_PIECEWISE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert (change.old, change.reason) == (GraphMode.FULL, NPU_FULL_MIXED_REASON)


def test_speculative_decoding_defaults_to_full_decode_only_with_the_reason() -> None:
    """The backends capture uniform 1 + k verify steps (UNIFORM_BATCH): unset, the plan
    chooses vllm-ascend's mode for MTP, for a dense model too, and says why."""
    from ascend_core.plan.graph import DEFAULT_SPECULATIVE_REASON
    from unit.core.plan_fixtures import mla_model

    ngram = {"method": "ngram", "num_speculative_tokens": 2}
    for model in (None, mla_model(is_moe=True)):
        plan = plan_config(npu(model, speculative=ngram))
        assert plan.graph_mode is GraphMode.FULL_DECODE_ONLY
        (change,) = plan.changes_to(fields.GRAPH_MODE)
        assert (change.old, change.new) == (None, GraphMode.FULL_DECODE_ONLY)
        assert change.reason == DEFAULT_SPECULATIVE_REASON


@pytest.mark.parametrize(
    "mode", [GraphMode.FULL_DECODE_ONLY, GraphMode.FULL_AND_PIECEWISE, GraphMode.PIECEWISE]
)
def test_with_speculative_decoding_the_operators_graph_mode_wins(mode: GraphMode) -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    compilation = {"graph_mode": mode, "mode": CompileMode.VLLM_COMPILE}
    plan = plan_config(npu(speculative=ngram, compilation=compilation))
    assert plan.graph_mode is mode
    assert plan.changes_to(fields.GRAPH_MODE) == ()


def test_an_npu_moe_model_captures_full_decode_graphs_as_a_dense_one() -> None:
    """The MoE layers read nothing back: a MoE model gets the dense default."""
    import attrs

    from ascend_core.plan.graph import DEFAULT_DENSE_REASON
    from unit.core.plan_fixtures import dense_model

    plan = plan_config(npu(attrs.evolve(dense_model(), is_moe=True)))
    assert plan.graph_mode is GraphMode.FULL_AND_PIECEWISE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    assert (change.old, change.reason) == (None, DEFAULT_DENSE_REASON)


def test_an_operators_piecewise_moe_model_stays_piecewise() -> None:
    """The MoE layers are captured inside the pieces: the operator's PIECEWISE stands."""
    import attrs

    from unit.core.plan_fixtures import dense_model

    piecewise = {"graph_mode": GraphMode.PIECEWISE, "mode": CompileMode.VLLM_COMPILE}
    plan = plan_config(npu(attrs.evolve(dense_model(), is_moe=True), compilation=piecewise))
    assert plan.graph_mode is GraphMode.PIECEWISE
    assert plan.changes_to(fields.GRAPH_MODE) == ()


def test_npu_graphs_under_tensor_parallelism_stay_as_planned() -> None:
    """TP captures (its all-reduces recorded in the graphs): the mode and sizes of TP=1."""
    one = plan_config(npu(compilation={"capture_sizes": [1, 2, 4, 8]}))
    two = plan_config(npu(parallel={"tp": 2}, compilation={"capture_sizes": [1, 2, 4, 8]}))
    assert two.graph_mode is one.graph_mode is GraphMode.FULL_AND_PIECEWISE
    assert two.decisions.capture_sizes == one.decisions.capture_sizes == (1, 2, 4, 8)
    assert [c.reason for c in two.changes_to(fields.GRAPH_MODE)] == [
        c.reason for c in one.changes_to(fields.GRAPH_MODE)
    ]
    full_decode = {"graph_mode": GraphMode.FULL_DECODE_ONLY}
    asked = plan_config(npu(parallel={"tp": 2}, compilation=full_decode))
    assert asked.graph_mode is GraphMode.FULL_DECODE_ONLY
    assert not asked.changes_to(fields.GRAPH_MODE)


@pytest.mark.parametrize("parallel", [{"pp": 2}, {"tp": 2, "dp": 2}])
def test_npu_graphs_under_pipeline_or_data_parallelism_become_none_with_the_reason(
    parallel: dict[str, int],
) -> None:
    """A dense model under DP: not the proven DP shape (test_plan_dp_ep_graphs.py)."""
    from ascend_core.plan.graph import NPU_PARALLEL_GRAPHS_REASON

    plan = plan_config(npu(parallel=parallel))
    assert plan.graph_mode is GraphMode.NONE
    (change,) = plan.changes_to(fields.GRAPH_MODE)
    why = NPU_PARALLEL_GRAPHS_REASON if "pp" in parallel else plan.decisions.dp_graphs
    assert why and change.reason.endswith(why)


@pytest.mark.parametrize("mode", [CompileMode.STOCK_TORCH_COMPILE, CompileMode.DYNAMO_TRACE_ONCE])
@pytest.mark.parametrize(
    "graph_mode", [None, GraphMode.PIECEWISE, GraphMode.FULL_DECODE_ONLY, GraphMode.NONE]
)
def test_a_whole_model_dynamo_mode_runs_the_npu_eagerly_with_the_reason(
    mode: CompileMode, graph_mode: GraphMode | None
) -> None:
    """vllm_ascend/platform.py check_and_update_config: a compilation mode other than NONE
    or VLLM_COMPILE gets cudagraph_mode NONE ("NPU does not support ... compilation mode"),
    and cudagraph_mode NONE gets mode NONE; here both are changes with the reason, the
    launch-blocking rule included (it would keep the compiler)."""
    for launch_blocking in (False, True):
        plan = plan_config(
            npu(
                compilation={"mode": mode, "graph_mode": graph_mode},
                outside_env={"ASCEND_LAUNCH_BLOCKING": "1" if launch_blocking else "0"},
            )
        )
        assert plan.graph_mode is GraphMode.NONE
        assert plan.compile_mode is CompileMode.NONE
        (compile_,) = plan.changes_to(fields.COMPILE_MODE)
        assert (compile_.old, compile_.new) == (mode, CompileMode.NONE)
        assert mode.name in compile_.reason and "VLLM_COMPILE" in compile_.reason
        graph_changes = plan.changes_to(fields.GRAPH_MODE)
        if graph_mode is GraphMode.NONE:
            assert not graph_changes
        else:
            (graph,) = graph_changes
            assert (graph.old, graph.new) == (graph_mode, GraphMode.NONE)
            assert graph.reason == compile_.reason


def test_the_host_keeps_a_whole_model_dynamo_mode() -> None:
    """The rule is the NPU's: the host compiles with DYNAMO_TRACE_ONCE by its own choice."""
    plan = plan_config(host(compilation={"mode": CompileMode.STOCK_TORCH_COMPILE}))
    assert plan.compile_mode is CompileMode.STOCK_TORCH_COMPILE
