"""GENERATE_CHECK_HOST_DECODE=1 (generate_run.py): every uniform decode step whose inputs
the NPU runner made on the host (adapters/vllm/worker/host_decode_inputs.py) is made a
second time by
vLLM's own device way over the same buffers, and the two are compared: positions,
sequence lengths, query_start_loc, input ids, the discard mask, each group's slots and
the sampled rows (with the staging arena, its one copy made first, uncounted, and again
before the model). The second making runs uncounted (the emulated device's counters and
launch hook do not see it), so the step's measured costs are the host way's alone."""

from __future__ import annotations

from typing import Any


def check_host_decode() -> dict[str, Any]:
    """Wrap HostDecodeInputsMixin._prepare_inputs; returns the tally it fills: the steps checked
    and each mismatch (what differed, at which batch size)."""
    import torch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from adapters.vllm.worker.host_decode_inputs import HostDecodeInputsMixin
    from support.emulated_npu_device import uncounted

    tally: dict[str, Any] = {"steps": 0, "batch_sizes": [], "mismatches": []}
    host_way = HostDecodeInputsMixin._prepare_inputs

    def made(runner: Any, n: int, slots: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            "positions": runner.positions[:n].cpu(),
            "seq_lens": runner.seq_lens.cpu(),
            "query_start_loc": runner.query_start_loc.gpu.cpu(),
            "input_ids": runner.input_ids.gpu[:n].cpu(),
            "discard": runner.discard_request_mask.gpu[:n].cpu(),
            **{f"slots[{g}]": s for g, s in enumerate(slots)},
        }

    def checked(self: Any, scheduler_output: Any, num_scheduled_tokens: Any) -> Any:
        out = host_way(self, scheduler_output, num_scheduled_tokens)
        n = self._host_slots_pending
        if n is None:  # not a host-made step
            return out
        tables = self.input_batch.block_table.block_tables
        arena = getattr(self, "_arena", None)
        deferred = arena is not None and arena.deferred
        with uncounted():
            if deferred:  # the staging arena's one copy, made early here for the reads
                arena.flush()
                arena.flushes -= 1
            host = made(self, n, [torch.from_numpy(t.slot_mapping.np[:n].copy()) for t in tables])
            host["sampled_rows"] = torch.arange(1 << 20)[out[0]]
            rows = GPUModelRunner._prepare_inputs(self, scheduler_output, num_scheduled_tokens)[0]
            device = made(self, n, [t.slot_mapping.gpu[:n].cpu() for t in tables])
            device["sampled_rows"] = rows.cpu().long()
        if deferred:  # the step's own copy (counted) is still to come, before the model
            arena.deferred = True
        tally["steps"] += 1
        tally["batch_sizes"] = sorted({*tally["batch_sizes"], n})
        for name, value in host.items():
            theirs = device[name].to(value.dtype)
            if not torch.equal(value, theirs):
                tally["mismatches"].append(
                    {"what": name, "batch": n, "host": value.tolist(), "vllm": theirs.tolist()}
                )
        return out

    HostDecodeInputsMixin._prepare_inputs = checked  # type: ignore[method-assign]
    return tally
