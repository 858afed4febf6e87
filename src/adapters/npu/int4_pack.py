"""Experts' int4 weights packed for npu_grouped_matmul, shared by the W4A8_DYNAMIC and
W4A16 experts ports."""

from __future__ import annotations

from typing import Any

import torch


class Int4ExpertPacking:
    """A torch_npu experts port's packing of int4 expert weights at load."""

    _torch_npu: Any

    def _int4pack(self, values: torch.Tensor) -> torch.Tensor:
        """int4 values int8 [E, out, in] -> int32 [E, in, out / 8], one expert at a time
        (npu_convert_weight_to_int4pack takes 2-D weights)."""
        return torch.stack([
            self._torch_npu.npu_convert_weight_to_int4pack(
                expert.t().to(torch.int32).contiguous())
            for expert in values
        ])
