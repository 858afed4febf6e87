"""Step: what graphs do for a model with a vision tower, in words the plan and doctor show.

The language model's steps are captured as a text model's (decide_graph_mode: the tower's
features enter as input embeddings, and M-RoPE's [3, T] positions live in vLLM's
persistent mrope_positions buffer). The tower itself runs eagerly: vLLM captures it only
with compilation_config.cudagraph_mm_encoder (its CUDA encoder graphs, one per token
budget, replayed after copying the inputs into the captured buffers), which the plan turns
off on both devices; NPU_ENCODER_EAGER_REASON says why the NPU cannot replay them as they
are.
"""

from __future__ import annotations

from ascend_core.deployment import Deployment, GraphMode
from ascend_core.plan import fields
from ascend_core.plan.result import Draft
from ports.device import DeviceKind

NPU_ENCODER_EAGER_REASON = (
    "the vision tower runs eagerly, not captured per image-size bucket: vLLM's encoder "
    "graphs (compilation_config.cudagraph_mm_encoder) capture the tower once per token "
    "budget and at replay only copy the images' patches and offsets into the captured "
    "device buffers, but the NPU's encoder attention gives npu_fused_infer_attention_score "
    "the images' lengths as host lists (actual_seq_lengths) and its BSND batch shape "
    "(images x the longest) from them, both fixed at capture, so a replay with another "
    "mix of image sizes would attend over the captured lengths; capturing needs those "
    "arguments updated at replay (NPUGraph.update with the op's host arguments, which the "
    "plugin does for the language model's attention only). The tower runs once per image "
    "(its output kept in vLLM's encoder cache), not once per decode step, so eager costs "
    "one pass's launches per image"
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
