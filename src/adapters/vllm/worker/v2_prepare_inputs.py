"""What V2's prepare_inputs launches on the device for values a decode step repeats.

vLLM's V2 `prepare_inputs` (vllm/v1/worker/gpu/model_runner.py), for a step without
drafts, makes two constant device tensors afresh each step (`cu_num_logits`, an arange of
the requests plus one; `expanded_local_pos`, zeros) and, with VLLM_MOE_SKIP_PADDING, fills
the padding mask's two ranges: four launches on an NPU around a step whose model is one
graph replay. Here, for that call only (its module's names `torch` and `envs`):

- `DeviceConstants` hands out views of one arange and one zeros made once on the device:
  both tensors are only read (by V2's combine kernel, its sampler's count kernel and
  logits processors), never written, in a step without drafts.
- `envs_without_padding_fill` says VLLM_MOE_SKIP_PADDING is off for a step whose padding
  mask already holds its ranges (the last real step's, with no dummy run or capture since:
  those fill the mask themselves), so V2 leaves the mask as it is.
"""

from __future__ import annotations

from typing import Any

import torch
import vllm.envs as vllm_envs


class DeviceConstants:
    """torch for V2's prepare_inputs: its int32 arange and zeros on `device` as views of
    tensors made once (of `rows` + 1 and `rows` elements); every other name torch's."""

    def __init__(self, rows: int, device: torch.device) -> None:
        self._device = torch.device(device)
        self._arange = torch.arange(rows + 1, dtype=torch.int32, device=device)
        self._zeros = torch.zeros(rows, dtype=torch.int32, device=device)
        self.served = 0  # calls answered with a view

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def _mine(self, n: Any, args: tuple[Any, ...], kwargs: dict[str, Any], have: int) -> bool:
        device = kwargs.get("device")
        return (
            not args
            and isinstance(n, int)
            and 0 <= n <= have
            and set(kwargs) == {"device", "dtype"}
            and kwargs["dtype"] is torch.int32
            and device is not None
            and torch.device(device) == self._device
        )

    def arange(self, n: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not self._mine(n, args, kwargs, self._arange.shape[0]):
            return torch.arange(n, *args, **kwargs)
        self.served += 1
        return self._arange[:n]

    def zeros(self, n: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not self._mine(n, args, kwargs, self._zeros.shape[0]):
            return torch.zeros(n, *args, **kwargs)
        self.served += 1
        return self._zeros[:n]


class _EnvsWithoutPaddingFill:
    """vllm.envs, with VLLM_MOE_SKIP_PADDING off."""

    VLLM_MOE_SKIP_PADDING = False

    def __getattr__(self, name: str) -> Any:
        return getattr(vllm_envs, name)


def envs_without_padding_fill() -> Any:
    return _EnvsWithoutPaddingFill()
