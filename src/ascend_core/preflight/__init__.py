"""Preflight checks of a serving host: each item pass, warn or fail, with the fix in one line.

Built from the ports (environment, upstream versions, device probe) plus host facts an
adapter gathers (CANN libraries found, device count, network interfaces).
"""

from __future__ import annotations

from ascend_core.preflight.cann import SOURCE_CANN
from ascend_core.preflight.host_facts import HostFacts
from ascend_core.preflight.items import CheckItem, CheckStatus, Preflight, worst
from ascend_core.preflight.model_location import (
    MissingModelError,
    missing_model_error,
    names_local_path,
)
from ascend_core.preflight.network import (
    HCCL_CONNECT_TIMEOUT_RANGE,
    NETWORK_VARIABLES,
    network_items,
)
from ascend_core.preflight.run import run_preflight
from ascend_core.preflight.versions import SUPPORTED_PYTHON

__all__ = [
    "HCCL_CONNECT_TIMEOUT_RANGE",
    "NETWORK_VARIABLES",
    "SOURCE_CANN",
    "SUPPORTED_PYTHON",
    "CheckItem",
    "CheckStatus",
    "HostFacts",
    "MissingModelError",
    "Preflight",
    "missing_model_error",
    "names_local_path",
    "network_items",
    "run_preflight",
    "worst",
]
