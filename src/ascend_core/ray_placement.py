"""Serving on a Ray cluster: what the placement needs, whether a cluster can hold it, and
which device a worker Ray placed uses. Pure decisions over the facts of ports.cluster.

vLLM's Ray executor (0.33) asks for one placement group of `world_size` bundles of one
unit each of the platform's `ray_device_key`, packed (strategy PACK), and starts one actor
per bundle. On the NPU the key is Ray's own `NPU` accelerator resource, which Ray counts
from the node's devices and for which it sets ASCEND_RT_VISIBLE_DEVICES in each actor to
the devices it reserved; the host device has no accelerator, so its workers hold `CPU`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from attrs import frozen

from ascend_core.errors import ConfigError
from ascend_core.visible_devices import VISIBLE_DEVICES_VARIABLE
from ports.cluster import RayClusterFacts
from ports.device import DeviceKind

# The Ray resource one worker holds, per device kind (the platforms' ray_device_key).
RAY_RESOURCES = {DeviceKind.CPU: "CPU", DeviceKind.NPU: "NPU"}
# Set on a node, Ray leaves ASCEND_RT_VISIBLE_DEVICES alone (the operator's, all devices).
NOSET_VARIABLE = "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"


@frozen
class RayNeeds:
    """What one engine asks of the cluster: `workers` bundles of one `resource` each."""

    device_kind: DeviceKind
    resource: str
    workers: int
    tp: int
    pp: int

    def lines(self) -> tuple[str, ...]:
        """What the operator must provide, one sentence each."""
        unit = f"1 {self.resource}"
        out = [
            f"{self.workers} Ray worker(s) (TP={self.tp} x PP={self.pp}), each holding {unit} "
            "in one placement group packed onto as few nodes as hold them; the engine "
            "(vllm serve) runs on the head node or any node of the cluster",
        ]
        if self.device_kind is DeviceKind.NPU:
            out.append(
                "each node offers its NPUs as Ray's NPU resource (counted from /dev/davinci*, "
                "or `ray start --resources '{\"NPU\": N}'`); Ray sets "
                f"{VISIBLE_DEVICES_VARIABLE} in each worker to the NPU it reserved, and the "
                "worker uses that device"
            )
            out.append(
                "ranks on different nodes reduce over HCCL across machines (HCCL_IF_IP, "
                "HCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME set on every node)"
            )
        else:
            out.append(
                "each host worker holds one Ray CPU (`ray start --num-cpus N` bounds how "
                "many workers a node takes) and reduces over gloo across nodes "
                "(GLOO_SOCKET_IFNAME on every node)"
            )
        out.append(
            "every node runs the same Python environment (vllm, this plugin, the model "
            "path) and starts Ray with the plugin's variables (VLLM_ASCEND_*) set"
        )
        return tuple(out)


def ray_needs(device_kind: DeviceKind, tp: int, pp: int, pcp: int = 1) -> RayNeeds:
    """What vLLM's Ray executor will ask for with these parallel sizes."""
    return RayNeeds(device_kind, RAY_RESOURCES[device_kind], tp * pp * pcp, tp, pp)


@frozen
class RayPlacement:
    """Whether the cluster holds the engine's bundles: the units of the resource per alive
    node (address, units), and what is wrong (None when it fits)."""

    needs: RayNeeds
    per_node: tuple[tuple[str, int], ...]
    error: ConfigError | None = None
    warning: str | None = None

    @property
    def units(self) -> int:
        return sum(n for _, n in self.per_node)

    def describe(self) -> str:
        nodes = ", ".join(f"{address}: {n}" for address, n in self.per_node) or "none"
        return (
            f"{self.units} {self.needs.resource} bundle(s) on {len(self.per_node)} alive "
            f"node(s) ({nodes}) for {self.needs.workers} worker(s)"
        )


def place(needs: RayNeeds, cluster: RayClusterFacts) -> RayPlacement:
    """Can `cluster` hold the bundles? Each bundle takes one whole unit on one node."""
    per_node = tuple(
        (node.address, math.floor(node.resources.get(needs.resource, 0.0)))
        for node in cluster.nodes
        if node.alive
    )
    total = sum(n for _, n in per_node)
    if total < needs.workers:
        short = needs.workers - total
        if needs.resource == "NPU":
            hint = (
                f"add {short} NPU(s) to the cluster (a node with NPUs: `ray start "
                f"--address {cluster.address}`), or lower --tensor-parallel-size / "
                "--pipeline-parallel-size"
            )
        else:
            hint = (
                f"add nodes or CPUs (`ray start --address {cluster.address} --num-cpus N`), "
                "or lower --tensor-parallel-size / --pipeline-parallel-size"
            )
        error = ConfigError(
            f"The Ray cluster at {cluster.address} has {total} {needs.resource} on "
            f"{len(per_node)} alive node(s) and this engine needs {needs.workers} "
            f"(TP={needs.tp} x PP={needs.pp}, one {needs.resource} each): vLLM would wait "
            "for the placement group and then fail.",
            hint,
        )
        return RayPlacement(needs, per_node, error=error)
    biggest = max((n for _, n in per_node), default=0)
    warning = None
    if needs.tp > 1 and biggest < needs.tp:
        warning = (
            f"no node holds {needs.tp} {needs.resource} (the largest holds {biggest}): the "
            "tensor-parallel group spans nodes and reduces over the network every layer"
        )
    return RayPlacement(needs, per_node, warning=warning)


def ray_worker_device_index(
    reserved: Sequence[str], visible_raw: str | None, local_rank: int
) -> int:
    """The device index a Ray-placed NPU worker uses in its own process.

    reserved: the NPU ids Ray reserved for this worker (its runtime context); visible_raw:
    the worker's ASCEND_RT_VISIBLE_DEVICES. Ray sets the variable to the reserved ids, so
    the worker's device is 0 in its process, whatever its local rank; on nodes started with
    RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 the variable lists the node's
    devices and the reserved one is found among them. Nothing reserved (the resource was
    not asked for): the local rank, as vLLM's other executors use it.
    """
    if not reserved:
        return local_rank
    first = reserved[0]
    if not visible_raw:
        return int(first)
    visible = visible_raw.split(",")
    if first in visible:
        return visible.index(first)
    raise ConfigError(
        f"Ray reserved NPU {first} for this worker, but its {VISIBLE_DEVICES_VARIABLE}="
        f"{visible_raw} does not list it.",
        f"Leave {VISIBLE_DEVICES_VARIABLE} to Ray (unset {NOSET_VARIABLE} on the nodes), or "
        f"list every device of the node in {VISIBLE_DEVICES_VARIABLE} where Ray starts.",
    )
