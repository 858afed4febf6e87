"""The host's Mooncake patch (adapters.vllm.patches.mooncake_device): vLLM's
MooncakeConnectorWorker reads torch.accelerator's device index first thing, which raises
on a host without an accelerator; while the worker is built the index is the host's (0),
and torch is left as it was. Run in a fresh process (the patch rebinds a vLLM class)."""

from __future__ import annotations

import pytest

from support.fresh_process import run_ok

pytestmark = pytest.mark.vllm

SCRIPT = """
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector as mc
from adapters.vllm.patches import apply_one
from ascend_core.patches import REGISTRY

assert not torch.accelerator.is_available()
try:
    torch.accelerator.current_device_index()
    raise SystemExit("expected the host to have no accelerator index")
except RuntimeError:
    pass
spec = REGISTRY.get("host-mooncake-device-index")
original = mc.MooncakeConnectorWorker.__init__
seen = []

def first_lines(self, vllm_config, engine_id, kv_cache_config):
    # What vLLM's __init__ does first: the device index, then the platform's set_device.
    seen.append(torch.accelerator.current_device_index())
    raise RuntimeError("stop after the device index")

mc.MooncakeConnectorWorker.__init__ = first_lines
apply_one(spec)
patched = mc.MooncakeConnectorWorker.__init__
assert patched.__ascend_patch__ == spec.id
try:
    mc.MooncakeConnectorWorker(None, "engine", None)
except RuntimeError as error:
    assert "stop after" in str(error), error
assert seen == [0], seen
try:
    torch.accelerator.current_device_index()
    raise SystemExit("torch.accelerator was left patched")
except RuntimeError:
    pass
apply_one(spec)  # re-entrant
assert mc.MooncakeConnectorWorker.__init__ is patched
print("ok", seen)
"""


def test_the_worker_gets_the_host_index_and_torch_is_left_alone() -> None:
    assert run_ok(SCRIPT).strip() == "ok [0]"
