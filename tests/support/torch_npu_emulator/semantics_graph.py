"""The host-side helpers torch_npu 2.14.0's graph capture calls for the fused attention op.

`_npu_fused_infer_attention_score_get_max_workspace` (a workspace sized for the largest
lengths, so that an update may raise them) and `_..._infer_output` (the op's outputs,
allocated before the launch so that the captured op writes them in place). No kernel runs:
the emulator allocates on the query's device, which during a capture is the graph's pool.
The workspace size is the emulator's own (the real one depends on CANN's tiling).
"""

from __future__ import annotations

from typing import Any

import torch

WORKSPACE_BYTES = 1 << 16


def _get_max_workspace(a: dict[str, Any]) -> torch.Tensor:
    return torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=a["query"].device)


def _infer_output(a: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention_out, softmax_lse) shaped as the op returns them for `input_layout`."""
    q, v, layout = a["query"], a["value"], a["input_layout"]
    n_q = a["num_heads"]
    n_kv = a["num_key_value_heads"] or n_q
    if layout == "TND":
        shape = (q.shape[0], q.shape[1], v.shape[-1])
    elif layout == "BSND":
        v_d = v.shape[-1] // n_kv if v.dim() == 3 and a["query_rope"] is None else v.shape[-1]
        shape = (*q.shape[:-1], v_d)
    elif layout == "BSH" and v.dim() == 3:
        shape = (*q.shape[:-1], n_q * (v.shape[-1] // n_kv))
    else:
        shape = tuple(q.shape)
    out = torch.empty(shape, dtype=q.dtype, device=q.device)
    if not a["softmax_lse_flag"]:
        lse = torch.empty(1, dtype=torch.float32, device=q.device)
    elif layout == "TND":  # the docs: (T, N, 1) for TND, else (B, N, S, 1)
        lse = torch.empty(q.shape[0], n_q, 1, dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty(q.shape[0], n_q, q.shape[1], 1, dtype=torch.float32, device=q.device)
    return out, lse


IMPLEMENTED = {
    "_npu_fused_infer_attention_score_get_max_workspace": _get_max_workspace,
    "_npu_fused_infer_attention_score_infer_output": _infer_output,
}
HOST_HELPERS = frozenset(IMPLEMENTED)
