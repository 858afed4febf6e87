"""What the patch planner is told about a deployment: the device and the features in use.

One rule for every caller, so the doctor's plan and the served plan cannot differ.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ascend_core.moe.eplb_request import eplb_requested
from ascend_core.patches.spec import Feature, PatchContext
from ports.device import ChipFamily, DeviceKind

if TYPE_CHECKING:  # annotations only: registration plans device patches in every process
    from ascend_core.deployment import Deployment


def device_context(
    device_kind: DeviceKind, chip_family: ChipFamily, extra: Iterable[Feature] = ()
) -> PatchContext:
    """The context before the model is known (plugin registration): the device's features.

    extra: features the caller has observed itself.
    """
    features = set(extra)
    if device_kind is DeviceKind.NPU:
        features.add(Feature.TRITON)  # triton-ascend ships with the NPU software stack
    # mypy's attrs plugin cannot type PatchContext's `converter=frozenset` parameter.
    return PatchContext(device_kind, chip_family, frozenset(features))


def context_for(deployment: Deployment, extra: Iterable[Feature] = ()) -> PatchContext:
    """The context of a known deployment: the device's features plus the model's, the
    speculative decoding's, the KV transfer's and the executor's."""
    features = set(extra)
    if deployment.speculative.method:
        features.add(Feature.SPECULATIVE_DECODING)
    if deployment.model.hybrid:
        features.add(Feature.MAMBA_STATE)
    if deployment.kv_transfer_role is not None:
        features.add(Feature.KV_TRANSFER)
    if deployment.parallel.ray:
        features.add(Feature.RAY)
    if eplb_requested(deployment):
        features.add(Feature.EPLB)
    return device_context(deployment.device_kind, deployment.chip_family, features)
