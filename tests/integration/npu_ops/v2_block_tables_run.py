"""Child of test_v2_host_block_tables_on_emulated_npu.py: vLLM's V2 BlockTables on the
emulated `npu` device, its Triton kernels in Triton's interpreter, fed by V2's own
`append_block_ids` and `apply_staged_writes` with the host mirror recording beside them
(adapters/vllm/worker/v2_host_block_tables.py); each decode step's gathered block tables
and slot mappings from V2's kernels against the mirror's host-made ones. Prints one
RESULT line (JSON)."""

from __future__ import annotations

import json
from unittest.mock import patch

import numpy as np
import torch
from vllm.v1.worker.gpu import buffer_utils

from adapters.vllm.worker.v2_host_block_tables import HostBlockTables, mirror

MAX_REQS, MAX_TOKENS, MAX_BLOCKS = 8, 32, 6
BLOCK_SIZES = [4, 8]
PADDED = 8  # the captured size the steps are padded to


def main() -> None:
    patch.object(buffer_utils, "is_uva_available", lambda: False).start()  # as on an NPU
    from vllm.v1.worker.gpu.block_table import BlockTables

    device = torch.device("npu")
    rng = np.random.default_rng(0)
    cases = []
    for enabled in ([True, True], [True, False]):
        tables = BlockTables(BLOCK_SIZES, MAX_REQS, MAX_TOKENS, [MAX_BLOCKS] * 2, device,
                             slot_mapping_enabled=enabled)  # fmt: skip
        host = mirror(tables)
        held = np.zeros((2, MAX_REQS), dtype=np.int64)
        for req in range(MAX_REQS):  # new requests: their first blocks
            first = [rng.integers(1, 999, int(rng.integers(1, 3))).tolist() for _ in range(2)]
            tables.append_block_ids(req, tuple(first), overwrite=True)
            held[:, req] = [len(f) for f in first]
        outs = [np.zeros((MAX_REQS, MAX_BLOCKS), np.int32) for _ in range(2)]
        slots_out = np.zeros((2, MAX_TOKENS), np.int64)
        HostBlockTables.prime(slots_out)
        for step, n in enumerate((6, 3, 8, 2, 5)):
            if step == 3:  # a finished request's slot reused by a new one
                tables.append_block_ids(1, ([5], [6]), overwrite=True)
                held[:, 1] = 1
            for req in range(MAX_REQS):  # decode steps grow some requests by a block
                if rng.random() < 0.3 and held[:, req].max() < MAX_BLOCKS:
                    tables.append_block_ids(req, ([int(rng.integers(1, 999))],) * 2,
                                            overwrite=False)  # fmt: skip
                    held[:, req] += 1
            tables.apply_staged_writes()
            slots = rng.permutation(MAX_REQS)[:n]
            reach = np.minimum(held[0, slots] * BLOCK_SIZES[0], held[1, slots] * BLOCK_SIZES[1])
            positions = rng.integers(0, reach).astype(np.int64)
            idx = torch.tensor(slots, dtype=torch.int64, device=device)
            qsl = torch.arange(PADDED + 1, dtype=torch.int32, device=device).clamp(max=n)
            kernel_tables = tables.gather_block_tables(idx, num_reqs_padded=PADDED)
            pos = torch.zeros(MAX_TOKENS, dtype=torch.int64, device=device)
            pos[:n] = torch.from_numpy(positions).to(device)
            tables.compute_slot_mappings(idx, qsl[: n + 1], pos, num_tokens_padded=PADDED)
            host.write_step(slots, positions, tables.num_blocks.np, outs, slots_out)
            same_rows = True
            for g in range(2):
                got = kernel_tables[g].cpu().numpy()
                for i, s in enumerate(slots):
                    count = tables.num_blocks.np[g, s]
                    same_rows &= bool((got[i, :count] == outs[g][i, :count]).all())
                same_rows &= not got[n:PADDED].any() and not outs[g][n:].any()
            kernel_slots = tables.slot_mappings.cpu().numpy()
            cases.append({
                "enabled": enabled, "n": n, "block_tables": same_rows,
                "slots": bool((kernel_slots == slots_out).all()),
                "real_slots": int((slots_out[:, :n] >= 0).sum()),
            })  # fmt: skip
    print("RESULT " + json.dumps({"device": str(device), "cases": cases}), flush=True)


if __name__ == "__main__":
    main()
