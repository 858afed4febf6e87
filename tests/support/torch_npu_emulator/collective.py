"""The emulated NPU's stand-in for HCCL: gloo through host memory, which graphs can hold.

Test support, not product. HCCL reduces NPU tensors in place and a real capture records
its collectives on the capturing stream, so a replay runs them again over the same
memory. Without CANN the device group is gloo, and vLLM's NPU device communicator stages
each collective through host memory (adapters/vllm/worker/communicator.py), copies the emulated
device refuses inside a capture. This communicator runs such a collective inside a
capture as one device launch (its copies and the host reduction are not the caller's) and
records it, so each replay of the graph runs it again; outside captures it just runs, its
copies counted as before. The ranks' replays meet in the same gloo collectives in the
same order, as their captures did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from adapters.cpu.communicator import GlooCommunicator

T = TypeVar("T")


class CapturableGlooCommunicator(GlooCommunicator):
    """gloo, with its staged collectives recorded in the graph being captured."""

    def run_staged(self, collective: Callable[[], T]) -> T:
        from support.emulated_npu_device import uncounted
        from support.torch_npu_emulator import graphs

        if not graphs.is_current_stream_capturing():
            return collective()
        with uncounted():
            result = collective()
        graphs.record_task("hccl collective (gloo through the host)", collective, result)
        return result
