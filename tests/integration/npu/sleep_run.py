"""Sleep mode and weight updates in one engine, in a fresh process, printed as JSON.

Run as: python sleep_run.py {host,npu} MODEL_W1 MODEL_W0 [graphs]
The engine starts on W1 (its ids are those of a fresh engine on W1), then: sleep(1) and
wake_up(); sleep(1) and wake_up by tag; the KV cache discarded (release_kv_cache_memory's
executor call) and woken; sleep(2), wake the weights, reload W0 from its
directory, wake the KV cache (the ids change); sleep(2) and reload W1 from its directory
(the fresh ids again); reload W0's tensors handed over, then W1's (the fresh ids again).
Bytes are read on the worker after each sleep and wake. `npu`: the emulated torch_npu and
`npu` device (see generate_run.py); `graphs`: the plan's graph mode, capturing
CAPTURE_SIZES. An emulator, not Ascend hardware.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from generate_run import CAPTURE_SIZES, emulate_npu, prompts

LENGTHS = (5, 40, 17, 1)
MAX_NEW = 8


def measure(worker: Any) -> dict[str, int | None]:
    """On the worker: device bytes allocated, the bytes the weights and the KV cache hold
    (distinct storages), and the resident set."""
    import psutil

    def released(ptr: int, device: str) -> bool:
        """Memory the pool of addresses kept (adapters/npu/vmm_pool.py) unmapped: the
        storage keeps its address and size, the device has no memory there."""
        if device != "npu":
            return False
        from support.emulated_npu_device import extension

        return bool(extension().unmapped(ptr))

    def held(tensors: Any) -> int:
        storages = {
            t.untyped_storage().data_ptr(): (t.untyped_storage().nbytes(), t.device.type)
            for t in tensors
        }
        return sum(n for ptr, (n, dev) in storages.items() if ptr and not released(ptr, dev))

    model = worker.model_runner.model
    return {
        "allocated": worker.runtime.allocated_bytes(),
        "weights": held([*model.parameters(), *model.buffers()]),
        "kv_cache": held(worker._kv_cache_tensors()),
        "rss": int(psutil.Process().memory_info().rss),
    }


def addresses(worker: Any) -> list[int]:
    """On the worker: the addresses of the weights and the KV cache (graphs address them)."""
    model = worker.model_runner.model
    tensors = [*model.parameters(), *model.buffers(), *worker._kv_cache_tensors()]
    return [t.untyped_storage().data_ptr() for t in tensors]


def touch_a_weight(worker: Any) -> str:
    """On the worker, while asleep: use a released weight (the device refuses)."""
    weight = next(iter(worker.model_runner.model.parameters()))
    try:
        (weight.float() + 1).sum().item()
    except RuntimeError as error:
        return str(error).splitlines()[0]
    return "no error"


def weight_devices(worker: Any) -> list[str]:
    return sorted({p.device.type for p in worker.model_runner.model.parameters()})


def runner_class(worker: Any) -> list[str]:
    """On the worker: its model runner's classes' qualified names (V1 or V2)."""
    return [f"{c.__module__}.{c.__qualname__}" for c in type(worker.model_runner).__mro__]


def main(device: str, w1: str, w0: str, graphs: str = "") -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_ASCEND_DEVICE"] = "cpu" if device == "host" else "npu"
    if device == "npu":
        emulate_npu()
    from safetensors.torch import load_file
    from vllm import LLM, SamplingParams, TokensPrompt
    from vllm.compilation.counter import compilation_counter

    graph_args: dict[str, object] = (
        {"compilation_config": {"cudagraph_capture_sizes": CAPTURE_SIZES}} if graphs else {}
    )
    llm = LLM(
        model=w1,
        dtype="bfloat16" if device == "npu" else "float32",
        enforce_eager=not graphs,
        **graph_args,  # type: ignore[arg-type]
        enable_sleep_mode=True,
        max_model_len=256,
        block_size=128,
        max_num_batched_tokens=64,
        max_num_seqs=8,
        kv_cache_memory_bytes=16 << 20,
        seed=0,
    )
    batch = [TokensPrompt(prompt_token_ids=p) for p in prompts(5, LENGTHS)]
    params = SamplingParams(max_tokens=MAX_NEW, temperature=0.0, ignore_eos=True)

    def ids() -> list[list[int]]:
        outs = llm.generate(batch, params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    def bytes_now() -> dict[str, int | None]:
        result: dict[str, int | None] = llm.collective_rpc(measure)[0]
        return result

    def reload(**kwargs: Any) -> None:
        llm.collective_rpc("reload_weights", kwargs=kwargs)

    out: dict[str, Any] = {"weight_devices": llm.collective_rpc(weight_devices)[0]}
    captured = compilation_counter.num_cudagraph_captured
    out["fresh_w1"] = ids()
    out["bytes_awake"] = bytes_now()
    before = llm.collective_rpc(addresses)[0]

    llm.sleep(level=1)
    out["bytes_level1"] = bytes_now()
    out["touch_level1"] = llm.collective_rpc(touch_a_weight)[0]
    llm.wake_up()
    out["bytes_woken"] = bytes_now()
    out["after_level1"] = ids()

    llm.sleep(level=1)
    llm.wake_up(tags=["weights"])
    out["bytes_weights_only"] = bytes_now()
    llm.wake_up(tags=["kv_cache"])
    out["after_level1_by_tag"] = ids()

    # vLLM's release_kv_cache_memory: once the engine is idle it calls the executor's
    # discard(("kv_cache",)), which reaches the worker's. Called here at the executor: the
    # in-process engine's scheduler holds its last finished requests, which the
    # method's idleness check refuses (a served engine's busy loop clears them).
    out["bytes_before_kv_release"] = bytes_now()
    llm.llm_engine.engine_core.engine_core.model_executor.discard(("kv_cache",))
    out["bytes_kv_released"] = bytes_now()
    llm.wake_up(tags=["kv_cache"])
    out["after_kv_released"] = ids()

    out["bytes_before_level2"] = bytes_now()
    llm.sleep(level=2)
    out["bytes_level2"] = bytes_now()
    llm.wake_up(tags=["weights"])
    reload(weights_path=w0)
    llm.wake_up(tags=["kv_cache"])
    out["reloaded_w0_dir"] = ids()

    llm.sleep(level=2)
    llm.wake_up(tags=["weights"])
    reload(weights_path=w1)
    llm.wake_up(tags=["kv_cache"])
    out["reloaded_w1_dir"] = ids()

    def tensors(model_dir: str) -> list[tuple[str, Any]]:
        return [
            (name, tensor)
            for path in sorted(Path(model_dir).glob("*.safetensors"))
            for name, tensor in load_file(str(path)).items()
        ]

    reload(weights_iterator=tensors(w0))
    out["handed_w0"] = ids()
    reload(weights_iterator=tensors(w1))
    out["handed_w1"] = ids()

    out["addresses_kept"] = llm.collective_rpc(addresses)[0] == before
    compilation = llm.llm_engine.vllm_config.compilation_config
    out["graph_mode"] = compilation.cudagraph_mode.name if graphs else "NONE"
    out["captured_first"] = captured
    out["captured_total"] = compilation_counter.num_cudagraph_captured
    out["runner_mro"] = llm.collective_rpc(runner_class)[0]
    out["engine_v2"] = bool(llm.llm_engine.vllm_config.use_v2_model_runner)
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
