"""vLLM's EPLB (`--enable-eplb`) for our monolithic MoE method: the layer's EplbLayerState
found at load, and each step's logical expert ids turned into physical ones (with the load
recorded) before the experts or the NPU's exchange see them.

vLLM registers each MoE layer's EPLB tensors on its runner's router (MoERunner.
set_eplb_state), and the router maps ids only for the kernels it runs itself; a monolithic
method routes inside the experts call, so it maps here with adapters.torch.eplb_map (vLLM's
own mapping is a CUDA/ROCm/XPU Triton kernel and a no-op elsewhere). The runner is the
layer registered under the experts' layer name in vLLM's static forward context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from adapters.torch.eplb_map import map_to_physical_and_record

if TYPE_CHECKING:
    from vllm.distributed.eplb.eplb_state import EplbLayerState
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts


def eplb_state_of(layer: RoutedExperts) -> EplbLayerState | None:
    """The EPLB state vLLM keeps for this layer's runner, None without --enable-eplb. Its
    tensors are filled later (EplbState.add_model), the object stays the same."""
    if not layer.moe_config.moe_parallel_config.enable_eplb:
        return None
    from vllm.config import get_current_vllm_config

    context = get_current_vllm_config().compilation_config.static_forward_context
    runner: Any = context.get(layer.layer_name)
    state = getattr(runner, "eplb_state", None)
    if state is None:
        raise RuntimeError(
            f"MoE layer {layer.layer_name}: --enable-eplb is on but vLLM registered no "
            "EPLB state for its runner"
        )
    return state  # type: ignore[no-any-return]


def physical_ids(state: EplbLayerState, ids: torch.Tensor) -> torch.Tensor:
    """[T, k] logical expert ids -> physical ones, the step's load recorded."""
    if state.logical_to_physical_map is None:
        return ids  # before EplbState.add_model: the dummy runs of the profile
    from vllm.v1.worker.ubatching import dbo_current_ubatch_id

    assert state.logical_replica_count is not None and state.expert_load_view is not None
    assert state.should_record_tensor is not None
    unpadded = state.num_unpadded_tokens_tensors
    return map_to_physical_and_record(
        ids,
        state.logical_to_physical_map,
        state.logical_replica_count,
        state.expert_load_view,
        state.should_record_tensor,
        None if unpadded is None else unpadded[dbo_current_ubatch_id()],
    )
