"""The Mooncake transfer engine calls vLLM's MooncakeConnector makes exist in the installed
engine (the pd extra's TCP build); skipped when the pd extra is not installed.

The NPU build (mooncake-transfer-engine-npu 0.3.13.post1) was checked by hand against the
same list and for the protocol name `ascend` (its AscendDirectTransport); it never ran here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm


def _connector_source() -> str:
    spec = importlib.util.find_spec(
        "vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector"
    )
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).read_text()


def test_every_engine_call_of_vllms_connector_exists_in_the_installed_engine() -> None:
    try:
        from mooncake.engine import TransferEngine
    except ImportError as error:  # not installed, or libibverbs1 missing
        pytest.skip(f"the pd extra's mooncake engine does not import: {error}")
    calls = set(re.findall(r"self\.engine\.([a-z_]+)\(", _connector_source()))
    assert {"initialize", "batch_register_memory", "batch_transfer_sync_write"} <= calls
    missing = sorted(c for c in calls if not hasattr(TransferEngine, c))
    assert missing == []
