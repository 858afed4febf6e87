"""A Ray cluster as the RayCluster port reports it, written by the test."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ports.cluster import RayCluster, RayClusterFacts, RayNode


class FakeRayCluster(RayCluster):
    """Nodes given as {address: resources} (all alive unless listed in `dead`); `down`:
    no cluster answers (ConnectionError). `reserved_ids`: this process's reservation."""

    def __init__(
        self,
        nodes: Mapping[str, Mapping[str, float]] | None = None,
        dead: Sequence[str] = (),
        down: bool = False,
        reserved_ids: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.nodes = dict(nodes or {})
        self.dead = set(dead)
        self.down = down
        self.reserved_ids = dict(reserved_ids or {})
        self.read_from: list[str] = []

    def read(self, address: str) -> RayClusterFacts:
        self.read_from.append(address)
        if self.down:
            raise ConnectionError(f"no Ray cluster answers at {address!r}")
        return RayClusterFacts(
            address,
            tuple(
                RayNode(f"node-{i}", a, a not in self.dead, r)
                for i, (a, r) in enumerate(self.nodes.items())
            ),
        )

    def reserved(self, resource: str) -> tuple[str, ...]:
        return tuple(self.reserved_ids.get(resource, ()))
