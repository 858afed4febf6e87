"""MLA over vLLM's MooncakeConnector: the byte ranges it moves for a block of an MLA layer are
the bytes our MLA backend reads for that block, in both planes.

A prefill and a decode cache of one MLA layer; the prefill side's regions (vLLM's row,
split into the latent and rope planes by adapters.vllm.kv_transfer.layout) paired with the decode
side's by vLLM's own alignment and coalescing; each block moved as vLLM's sender moves it
(region base + block id x block_len, kv_block_len bytes) by a fake Mooncake engine that
copies host memory. The decode side then reads, through latent_planes, exactly the
prefill side's rows of those blocks, and nothing else changed.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector as mc

from adapters.vllm.attention.mla import latent_planes, plane_block_spans
from adapters.vllm.kv_transfer.layout import (
    WORKER_REGION_LISTS,
    Region,
    read_regions,
    split_latent_regions,
    write_regions,
)
from ascend_core.errors import ConfigError
from ascend_core.memory_budget import kv_bytes_per_token
from unit.core.plan_fixtures import mla_model
from unit.fakes.transfer_engine import FakeTransferEngine

BLOCKS, BLOCK_SIZE, LATENT, ROPE = 8, 16, 32, 16
LAYER = "model.layers.0.self_attn.attn"
PAIRS = [(2, 5), (3, 1), (7, 0)]  # (prefill block, decode block)


def cache(fill: bool) -> torch.Tensor:
    """One layer's allocation as vLLM hands it to the backend: [blocks, block_size, L + R]."""
    kv = torch.zeros(BLOCKS, BLOCK_SIZE, LATENT + ROPE, dtype=torch.bfloat16)
    if fill:
        kv.copy_(torch.randn(kv.shape, generator=torch.Generator().manual_seed(0)))
    return kv


def vllm_row_region(kv: torch.Tensor) -> Region:
    """What MooncakeConnectorWorker.register_kv_caches lists for a layer's own contiguous
    MLA allocation: one packed row per block at the tensor's start (row offset 0)."""
    row = kv.stride(0) * kv.element_size()
    return Region(kv.data_ptr(), row, kv[0].nbytes, LAYER, 0, 0, (0,), 0)


def paired(
    local: list[Region], remote: list[Region]
) -> tuple[list[mc.TransferRegion], list[mc.TransferRegion]]:
    """The prefill side's and the decode side's regions as vLLM's sender pairs them."""

    def regions(listed: list[Region]) -> list[mc.TransferRegion]:
        return mc._expand_transfer_regions(
            base_addrs=[r.base_addr for r in listed],
            block_lens=[r.block_len for r in listed],
            kv_block_lens=[r.kv_block_len for r in listed],
            layer_names=[r.layer_name for r in listed],
            layer_indices=[r.layer_index for r in listed],
            group_indices=[r.group_index for r in listed],
            shared_group_ids=[r.shared_groups for r in listed],
            row_offsets=[r.row_offset for r in listed],
        )

    src, dst, err = mc._align_transfer_regions(regions(local), regions(remote))
    assert err is None
    return mc._coalesce_contiguous_transfer_regions(src, dst, promote_full_row=True)


def move(
    prefill: torch.Tensor,
    decode: torch.Tensor,
    local: list[Region],
    remote: list[Region],
) -> FakeTransferEngine:
    """Each (prefill block, decode block) of PAIRS moved as vLLM's sender moves it at equal
    TP (one write per region and block), by an engine that knows both allocations."""
    engine = FakeTransferEngine()
    engine.batch_register_memory(
        [prefill.data_ptr(), decode.data_ptr()], [prefill.nbytes, decode.nbytes]
    )
    src, dst = paired(local, remote)
    sources, destinations, lengths = [], [], []
    for s, d in zip(src, dst, strict=True):
        for p_block, d_block in PAIRS:
            sources.append(s.base_addr + p_block * s.block_len)
            destinations.append(d.base_addr + d_block * d.block_len)
            lengths.append(s.kv_block_len)
    assert engine.batch_transfer_sync_write("decode", sources, destinations, lengths) == 0
    return engine


def split(kv: torch.Tensor) -> list[Region]:
    return split_latent_regions([vllm_row_region(kv)], {LAYER: plane_block_spans(kv, LATENT)})


def test_the_decode_side_reads_the_prefill_sides_rows_of_the_moved_blocks() -> None:
    prefill, decode = cache(fill=True), cache(fill=False)
    engine = move(prefill, decode, split(prefill), split(decode))
    sent, got = latent_planes(prefill, LATENT), latent_planes(decode, LATENT)
    p_blocks, d_blocks = [p for p, _ in PAIRS], [d for _, d in PAIRS]
    assert torch.equal(got.latent[d_blocks], sent.latent[p_blocks])
    assert torch.equal(got.rope[d_blocks], sent.rope[p_blocks])
    # Nothing else of the decode cache was written, and per block exactly its rows moved.
    untouched = [b for b in range(BLOCKS) if b not in d_blocks]
    assert not got.latent[untouched].any() and not got.rope[untouched].any()
    row = BLOCK_SIZE * (LATENT + ROPE) * prefill.element_size()
    assert sum(length for *_, length in engine.writes) == len(PAIRS) * row


def test_vllms_own_row_would_hand_the_decode_side_other_bytes() -> None:
    # The layout the split corrects: moved as one [latent + rope] row per block, the decode
    # side's planes hold other rows than the prefill side's.
    prefill, decode = cache(fill=True), cache(fill=False)
    move(prefill, decode, [vllm_row_region(prefill)], [vllm_row_region(decode)])
    sent, got = latent_planes(prefill, LATENT), latent_planes(decode, LATENT)
    assert not torch.equal(got.latent[[5, 1, 0]], sent.latent[[2, 3, 7]])


def test_the_split_keeps_other_layers_and_refuses_a_region_it_does_not_recognise() -> None:
    kv = cache(fill=False)
    other = Region(1 << 40, 4096, 4096, "model.layers.1.mlp.other", 1, 0, (0,), -1)
    latent, rope, kept = split_latent_regions(
        [vllm_row_region(kv), other], {LAYER: plane_block_spans(kv, LATENT)}
    )
    assert kept == other
    assert (latent.base_addr, latent.block_len) == (kv.data_ptr(), BLOCK_SIZE * LATENT * 2)
    assert rope.base_addr == kv.data_ptr() + BLOCKS * BLOCK_SIZE * LATENT * 2
    assert latent.row_offset == rope.row_offset == -1  # never widened to a whole row
    shifted = Region(kv.data_ptr() + 64, 1536, 1536, LAYER, 0, 0, (0,), 0)
    with pytest.raises(ConfigError, match=f"MLA layer {LAYER}"):
        split_latent_regions([shifted], {LAYER: plane_block_spans(kv, LATENT)})
    with pytest.raises(ConfigError, match="no transfer region"):
        split_latent_regions([other], {LAYER: plane_block_spans(kv, LATENT)})


class _Worker:
    """The region lists of a MooncakeConnectorWorker, nothing else."""


def test_regions_round_trip_through_the_workers_lists() -> None:
    kv = cache(fill=False)
    worker = _Worker()
    write_regions(worker, [vllm_row_region(kv)])
    planes = {LAYER: plane_block_spans(kv, LATENT)}
    write_regions(worker, split_latent_regions(read_regions(worker), planes))
    assert worker.registered_layer_names == [LAYER, LAYER]  # type: ignore[attr-defined]
    assert read_regions(worker) == split(kv)


def test_the_worker_lists_we_rewrite_are_vllms() -> None:
    # Instance attributes, which the upstream-surface test cannot see on the classes.
    source = inspect.getsource(mc.MooncakeConnectorWorker.__init__)
    missing = [name for name in WORKER_REGION_LISTS if f"self.{name}:" not in source]
    assert missing == []
    register = inspect.getsource(mc.MooncakeConnectorWorker.register_kv_caches)
    assert "self.engine.batch_register_memory(kv_data_ptrs, kv_data_lens)" in register
    assert "self.connector_worker = " in inspect.getsource(mc.MooncakeConnector.__init__)
    base = inspect.getsource(mc.KVConnectorBase_V1.__init__)
    assert "self._vllm_config = vllm_config" in base


def test_a_tokens_bytes_on_the_wire_are_the_doctors_kv_bytes_per_token() -> None:
    # ascend-doctor pair reports kv_bytes_per_token as what the prefill side sends per
    # token: for MLA, per layer, the block's latent and rope spans over its block_size rows.
    model = mla_model()
    assert model.mla is not None
    latent, rope = model.mla.kv_lora_rank, model.mla.qk_rope_head_dim
    kv = torch.empty(2, BLOCK_SIZE, latent + rope, dtype=torch.bfloat16)
    per_block = sum(span.length for span in plane_block_spans(kv, latent))
    on_the_wire = model.num_layers * per_block // BLOCK_SIZE
    assert on_the_wire == kv_bytes_per_token(model, kv.element_size()).bytes
