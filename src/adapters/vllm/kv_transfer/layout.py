"""The transfer regions vLLM's MooncakeConnector moves, made right for this plugin's MLA cache.

vLLM registers one region per layer and moves block b of it as one run of bytes, the row
[base + b * block_len, + kv_block_len). The MLA backend keeps a layer's allocation as two
planes (adapters.vllm.attention.mla.latent_planes: every block's latent rows, then every
block's rope rows), so block b is two runs. Each such region becomes the two planes'
regions under the same layer name; vLLM pairs a layer's regions on both sides by their
order, as it does for the per-head regions of a non-contiguous cache. Both sides of a pair
run this plugin, so both describe their caches alike. Only the region list changes: the
allocations vLLM registered with the transfer engine already hold both planes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from attrs import evolve, fields, frozen

from adapters.vllm.attention.mla import BlockSpan, MlaAttentionImpl, plane_block_spans
from adapters.vllm.attention.sparse_mla import SparseMlaAttentionImpl
from ascend_core.errors import ConfigError

if TYPE_CHECKING:
    from vllm.config import VllmConfig

# vLLM's row_offset for a region that is not a view into a row shared by several layers:
# it is never widened to a whole row.
NOT_A_ROW_VIEW = -1

# MooncakeConnectorWorker's parallel lists, one entry per transfer region, in Region's
# field order (tests/integration/vllm/test_upstream_surface.py names them too).
WORKER_REGION_LISTS = (
    "kv_caches_base_addr",
    "block_len_per_layer",
    "kv_block_len_per_layer",
    "registered_layer_names",
    "registered_layer_indices",
    "registered_group_indices",
    "region_shared_groups",
    "region_row_offsets",
)


@frozen
class Region:
    """One transfer region as MooncakeConnectorWorker lists it: block b is the bytes
    [base_addr + b * block_len, + kv_block_len)."""

    base_addr: int
    block_len: int
    kv_block_len: int
    layer_name: str
    layer_index: int
    group_index: int
    shared_groups: tuple[int, ...]
    row_offset: int


def latent_layers(
    vllm_config: VllmConfig, kv_caches: Mapping[str, torch.Tensor]
) -> dict[str, tuple[BlockSpan, BlockSpan]]:
    """The layers whose cache our MLA backends read as two planes -> the planes' spans.

    The connector is handed vLLM's [blocks, 1, block_size, L + R] view of a layer; the
    backend reads the view the layer bound (its kv_cache, [blocks, block_size, L + R]),
    so the planes are taken from that one."""
    context = vllm_config.compilation_config.static_forward_context
    spans: dict[str, tuple[BlockSpan, BlockSpan]] = {}
    for name, cache in kv_caches.items():
        layer = context.get(name)
        impl = getattr(layer, "impl", None)
        if not isinstance(impl, MlaAttentionImpl | SparseMlaAttentionImpl):
            continue
        if getattr(impl, "block_local", False):
            continue  # a hybrid model's MLA rows: vLLM's own row layout, nothing to split
        bound = getattr(layer, "kv_cache", None)
        if not isinstance(bound, torch.Tensor) or bound.data_ptr() != cache.data_ptr():
            raise ConfigError(
                f"MLA layer {name}'s bound KV cache is not the allocation vLLM registers "
                f"with the KV connector ({tuple(cache.shape)} at {cache.data_ptr():#x}).",
                "Serve MLA models without prefill/decode disaggregation with this vLLM.",
            )
        spans[name] = plane_block_spans(bound, impl.kv_lora_rank)
    return spans


def split_latent_regions(
    regions: Sequence[Region], planes: Mapping[str, tuple[BlockSpan, ...]]
) -> list[Region]:
    """Each region of a layer in `planes` replaced by one region per plane, in order.

    Raises ConfigError when vLLM did not register such a layer as the one row region this
    expects (its base the allocation's start, its block the planes' blocks together)."""
    out: list[Region] = []
    seen: set[str] = set()
    for region in regions:
        spans = planes.get(region.layer_name)
        if spans is None:
            out.append(region)
            continue
        row = sum(span.stride for span in spans)
        if region.layer_name in seen or (region.base_addr, region.block_len) != (
            spans[0].base_addr,
            row,
        ):
            raise ConfigError(
                f"vLLM's MooncakeConnector registered MLA layer {region.layer_name} as a "
                f"region at {region.base_addr:#x} with {region.block_len}-byte blocks; this "
                f"plugin expects one region at {spans[0].base_addr:#x} with {row}-byte "
                "blocks (its latent and rope planes), so it cannot say where the planes are.",
                "Serve MLA models with prefill/decode disaggregation only with the plugin's "
                "own KV cache layout (no shared or hybrid KV cache groups across MLA layers).",
            )
        seen.add(region.layer_name)
        out.extend(
            evolve(
                region,
                base_addr=span.base_addr,
                block_len=span.stride,
                kv_block_len=span.length,
                row_offset=NOT_A_ROW_VIEW,
            )
            for span in spans
        )
    missing = sorted(set(planes) - seen)
    if missing:
        raise ConfigError(
            f"vLLM's MooncakeConnector registered no transfer region for MLA layers "
            f"{', '.join(missing)}, so their KV would not be sent.",
            "Report this with the model; serve it without prefill/decode disaggregation.",
        )
    return out


def read_regions(worker: Any) -> list[Region]:
    """The worker's transfer regions (after its register_kv_caches)."""
    lists = [list(getattr(worker, name)) for name in WORKER_REGION_LISTS]
    if len({len(values) for values in lists}) != 1:
        sizes = ", ".join(f"{n}={len(v)}" for n, v in zip(WORKER_REGION_LISTS, lists, strict=True))
        raise ConfigError(
            f"vLLM's MooncakeConnectorWorker lists its transfer regions unevenly ({sizes}).",
            "This vLLM's connector is not the one this plugin was written against; "
            "serve MLA models without prefill/decode disaggregation.",
        )
    return [
        Region(
            int(base),
            int(block_len),
            int(kv_block_len),
            str(name),
            int(index),
            int(group),
            tuple(shared),
            int(offset),
        )
        for base, block_len, kv_block_len, name, index, group, shared, offset in zip(
            *lists, strict=True
        )
    ]


def write_regions(worker: Any, regions: Sequence[Region]) -> None:
    """Set the worker's transfer regions (before any transfer has used the old ones)."""
    for name, field in zip(WORKER_REGION_LISTS, fields(Region), strict=True):
        setattr(worker, name, [getattr(region, field.name) for region in regions])
