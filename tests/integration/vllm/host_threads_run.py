"""Child of test_host_threads_tp: an LLM with --tensor-parallel-size 2 on the host device,
printing each worker's OMP_NUM_THREADS and torch thread count as JSON."""

from __future__ import annotations

import json
import sys
from typing import Any

from vllm import LLM
from vllm.utils.torch_utils import available_cpu_count


def threads(worker: Any) -> tuple[str | None, int]:
    import os

    import torch

    return os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads()


if __name__ == "__main__":
    llm = LLM(
        model=sys.argv[1],
        dtype="float32",
        enforce_eager=True,
        max_model_len=256,
        tensor_parallel_size=2,
        kv_cache_memory_bytes=16 << 20,
    )
    result = {"cpus": available_cpu_count(), "workers": llm.collective_rpc(threads)}
    print("RESULT=" + json.dumps(result))
