"""The plan's Ray section: what the placement needs and, given a cluster, whether it fits."""

from __future__ import annotations

from typing import Any

from adapters.doctor.plan.items import FAIL, PASS, WARN, failed
from adapters.doctor.serve_args import ServeArgs
from ascend_core.preflight import CheckItem
from ascend_core.ray_placement import place, ray_needs
from ports.cluster import RayCluster
from ports.device import DeviceKind

RAY_ADDRESS_VARIABLE = "RAY_ADDRESS"


def ray_items(
    args: ServeArgs, kind: DeviceKind, cluster: RayCluster | None, address: str | None
) -> tuple[list[CheckItem], dict[str, Any]]:
    """What Ray must provide for these arguments; with `address` (--ray-address or
    RAY_ADDRESS), the cluster there read through `cluster` and the placement checked."""
    needs = ray_needs(kind, args.tp, args.pp, args.pcp)
    items = [CheckItem("ray needs", PASS, line) for line in needs.lines()]
    data: dict[str, Any] = {
        "resource": needs.resource,
        "workers": needs.workers,
        "address": address,
    }
    if args.dp > 1:
        items.append(
            CheckItem(
                "ray data parallel",
                WARN,
                f"--data-parallel-size {args.dp} with the Ray executor: each data-parallel "
                "engine places its own workers; only one engine's placement is checked here",
            )
        )
    if address is None or cluster is None:
        items.append(
            CheckItem(
                "ray cluster",
                PASS,
                "no cluster checked: give --ray-address (or set RAY_ADDRESS) to check that "
                "the cluster can place these workers",
            )
        )
        return items, data
    try:
        facts = cluster.read(address)
    except (ConnectionError, ImportError) as error:
        items.append(
            CheckItem(
                "ray cluster",
                FAIL,
                f"cannot read the Ray cluster at {address}: {error}",
                "start it (`ray start --head`), or give the address `ray status` shows",
            )
        )
        return items, data
    placement = place(needs, facts)
    data["per_node"] = [list(p) for p in placement.per_node]
    data["fits"] = placement.error is None
    if placement.error is not None:
        items.extend(failed("ray placement", placement.error))
        return items, data
    items.append(CheckItem("ray placement", PASS, placement.describe()))
    if placement.warning is not None:
        items.append(CheckItem("ray placement", WARN, placement.warning))
    return items, data
