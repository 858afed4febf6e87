"""Port: what a running Ray cluster holds (its nodes and their resources), read from outside."""

from __future__ import annotations

import abc
from collections.abc import Mapping

from attrs import field, frozen


def _resources(values: Mapping[str, float]) -> Mapping[str, float]:
    return dict(values)


def _nodes(values: tuple[RayNode, ...] | list[RayNode]) -> tuple[RayNode, ...]:
    return tuple(values)


@frozen
class RayNode:
    """One node as Ray reports it (`ray.nodes()`): its address and total resources."""

    node_id: str
    address: str
    alive: bool
    resources: Mapping[str, float] = field(factory=dict, converter=_resources)


@frozen
class RayClusterFacts:
    """The cluster at `address`: every node Ray knows, alive or not."""

    address: str
    nodes: tuple[RayNode, ...] = field(converter=_nodes)


class RayCluster(abc.ABC):
    """A Ray cluster as the plugin meets it: read from outside (the doctor's placement
    check), and from inside a worker Ray placed (the devices it reserved)."""

    @abc.abstractmethod
    def read(self, address: str) -> RayClusterFacts:
        """The cluster at `address` (`ray://`, `host:port` or `auto`).

        Raises ConnectionError, naming the address, when no cluster answers there, and
        ImportError when Ray is not installed.
        """

    @abc.abstractmethod
    def reserved(self, resource: str) -> tuple[str, ...]:
        """In a process Ray placed: the ids of the accelerator `resource` (e.g. "NPU") Ray
        reserved for it; empty when Ray reserved none or this process is not Ray's."""
