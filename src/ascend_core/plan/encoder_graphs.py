"""Step: what graphs do for a model with a vision tower, in words the plan and doctor show.

The language model's steps are captured as a text model's (decide_graph_mode: the tower's
features enter as input embeddings, and M-RoPE's [3, T] positions live in vLLM's
persistent mrope_positions buffer). The tower itself runs eagerly: vLLM captures it only
with compilation_config.cudagraph_mm_encoder (its CUDA encoder graphs, one per token
budget), which the plan turns off on both devices.
"""

from __future__ import annotations

from ascend_core.deployment import Deployment, GraphMode
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind

NPU_ENCODER_EAGER_REASON = (
    "the vision tower runs eagerly: its attention pads each image to the batch's longest "
    "and gives npu_fused_infer_attention_score the images' lengths as host lists, which a "
    "graph captured per image-size bucket would fix at capture (the plugin updates only the "
    "language model's attention arguments at replay), and the tower runs once per image "
    "(its output kept in vLLM's encoder cache), not once per decode step, so a capture "
    "would save little"
)
HOST_ENCODER_EAGER_REASON = "the host device captures no graphs; the vision tower runs eagerly"


def decide_encoder_graphs(deployment: Deployment, draft: Draft) -> Draft:
    """For a model whose vision tower serves: the tower eager (with the reason), the language
    model in the graph mode already decided; vLLM's encoder graphs turned off if asked."""
    model = deployment.model
    if not (model.vision or model.video) or {"image", "video"} <= deployment.mm_off:
        return draft
    host = deployment.device_kind is DeviceKind.CPU
    reason = HOST_ENCODER_EAGER_REASON if host else NPU_ENCODER_EAGER_REASON
    if deployment.compilation.encoder_graphs:
        draft = draft.change(fields.ENCODER_GRAPHS, True, False, reason)
    mode = draft.decisions.graph_mode
    language = (
        "the language model runs without graphs"
        if mode is GraphMode.NONE
        else f"the language model's steps are captured as a text model's ({mode.name})"
    )
    return draft.decide(encoder_execution=f"{language}; {reason}")
