"""The Ray cluster port on Ray itself (imported only where a cluster is asked about)."""

from __future__ import annotations

from typing import Any

from ports.cluster import RayCluster, RayClusterFacts, RayNode


class RayClusterClient(RayCluster):
    """Reads `ray.nodes()` as a short-lived driver of the cluster, and a worker's reserved
    accelerator ids from its runtime context."""

    def read(self, address: str) -> RayClusterFacts:
        import ray

        connected_here = not ray.is_initialized()
        try:
            if connected_here:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            nodes = [_node(n) for n in ray.nodes()]
        except ConnectionError as exc:
            raise ConnectionError(f"no Ray cluster answers at {address!r}: {exc}") from exc
        finally:
            if connected_here and ray.is_initialized():
                ray.shutdown()
        return RayClusterFacts(address, tuple(nodes))

    def reserved(self, resource: str) -> tuple[str, ...]:
        try:
            import ray
        except ImportError:
            return ()
        if not ray.is_initialized():
            return ()
        ids = ray.get_runtime_context().get_accelerator_ids().get(resource, [])
        return tuple(str(i) for i in ids)


def _node(raw: dict[str, Any]) -> RayNode:
    resources = {str(k): float(v) for k, v in (raw.get("Resources") or {}).items()}
    return RayNode(
        node_id=str(raw.get("NodeID", "")),
        address=str(raw.get("NodeManagerAddress", "")),
        alive=bool(raw.get("Alive", False)),
        resources=resources,
    )
