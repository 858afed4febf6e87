"""V2's per-request staged values, sent to an NPU only when they changed.

V2 keeps each request's sampling parameters and counts (temperature, top-k/p, min-p,
seeds, penalties, biases, bad words, logprob ids, prompt and prefill lengths, the block
counts) in `UvaBackedTensor`s: a host array, the source of truth, and a device view of a
copy of it. vLLM's V2 runner re-sends them each step (`Sampler.apply_staged_writes` in
`add_requests`, the block tables' `apply_staged_writes`): on a GPU a host-to-host copy
into pinned memory the GPU reads through UVA; on an NPU, which has no UVA, each is a
host-to-device copy (V2's `NonUvaBuffer`): some fifteen a decode step whose values are
the last step's.

`copy_to_uva_if_changed` stands for `UvaBackedTensor.copy_to_uva` inside the NPU runner's
scope: where the host values (the same elements, byte for byte) are the ones its device
view was last made from, it keeps that view and sends nothing. The device views are only
read (V2's kernels take them as parameters), so a kept view still holds those values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from vllm.v1.worker.gpu.buffer_utils import UvaBackedTensor

_VANILLA = UvaBackedTensor.copy_to_uva


def copy_to_uva_if_changed(self: Any, n: int | None = None) -> Any:
    """UvaBackedTensor.copy_to_uva, or its last device view where nothing changed."""
    values = self.np[:n] if n is not None else self.np
    sent: np.ndarray | None = getattr(self, "_npu_sent", None)
    if (
        sent is not None
        and sent.shape == values.shape
        and sent.dtype == values.dtype
        and sent.tobytes() == values.tobytes()
    ):
        return self.gpu
    view = _VANILLA(self, n)
    self._npu_sent = values.copy()
    return view
