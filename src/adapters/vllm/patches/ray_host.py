"""vLLM's Ray executor on the host device, whose Ray resource is CPU (no accelerator).

The executor reserves one bundle of the platform's `ray_device_key` per worker, then (1)
asks for the key again as a custom resource of each actor, which Ray refuses for CPU, and
(2) reads the accelerator ids Ray assigned under the key in each actor, which Ray names
only for accelerators. On the host the actor asks for nothing beyond its bundle (the
bundle holds the CPU and places it) and reports no device ids: the host device has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm.v1.executor import ray_executor_v2

from adapters.vllm.patches._symbols import holder_and_attr, rebind
from ascend_core.ray_placement import RAY_RESOURCES
from ports.device import DeviceKind

if TYPE_CHECKING:
    from ascend_core.patches import PatchSpec

HOST_RAY_RESOURCE = RAY_RESOURCES[DeviceKind.CPU]


class HostRayWorkerProc(ray_executor_v2.RayWorkerProc):  # type: ignore[misc]
    """vLLM's Ray worker, reporting no accelerator ids on the host (the executor then maps
    no physical device for it; the host worker computes on the host)."""

    def get_node_and_physical_gpu_ids(self) -> tuple[str, list[int]]:
        from vllm.platforms import current_platform

        if current_platform.ray_device_key != HOST_RAY_RESOURCE:
            result: tuple[str, list[int]] = super().get_node_and_physical_gpu_ids()
            return result
        import ray

        return ray.get_runtime_context().get_node_id(), []


def host_worker_class(spec: PatchSpec) -> None:
    """The executor's module-level name for its actor class becomes the host subclass (it
    is pickled by reference, so each Ray worker imports it from this module)."""
    rebind((spec.target,), HostRayWorkerProc)


def actor_resources_in_bundle(spec: PatchSpec) -> None:
    holder, attr = holder_and_attr(spec.target)
    original = getattr(holder, attr)
    if getattr(original, "__ascend_patch__", None) == spec.id:
        return

    def resource_kwargs() -> dict[str, Any]:
        from vllm.platforms import current_platform

        if current_platform.ray_device_key == HOST_RAY_RESOURCE:
            return {"num_gpus": 0}  # the bundle's CPU places the actor
        result: dict[str, Any] = original()
        return result

    resource_kwargs.__ascend_patch__ = spec.id  # type: ignore[attr-defined]
    setattr(holder, attr, staticmethod(resource_kwargs))
