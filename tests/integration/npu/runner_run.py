"""The model runner vLLM's engine believes in and the one the NPU worker builds, with
triton-ascend's driver presented as active (as on an NPU host), printed as JSON.

Started by test_runner_agreement_on_emulated_npu.py with child_env(triton_driver=True):
vLLM's HAS_TRITON says yes here, so unaided vLLM would pick its V2 runner. First a config
is built with VLLM_USE_V2_MODEL_RUNNER=1 (what an operator may ask); then one engine
(llama tiny, eager, a KV cache of a few blocks, no prefix caching) runs a batch that
the scheduler must preempt and resume, and each prompt of it alone, which fits.

Run as: python runner_run.py MODEL_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPTS = 4
PROMPT_TOKENS = 100
NEW_TOKENS = 60  # 160 tokens: a request's second block of 128 comes while decoding
BLOCKS = 4  # one request alone needs 2; the batch would need 8: preemptions


def worker_runner(wrapper: object) -> dict[str, object]:
    """Run in the worker (collective_rpc): what it believes and what it built."""
    from vllm.triton_utils import HAS_TRITON
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    worker = getattr(wrapper, "worker", wrapper)
    runner = worker.model_runner  # type: ignore[attr-defined]
    return {
        "worker": type(worker).__name__,
        "runner": type(runner).__name__,
        "v1": isinstance(runner, GPUModelRunner),
        "use_v2": bool(worker.use_v2_model_runner),  # type: ignore[attr-defined]
        "has_triton": bool(HAS_TRITON),
    }


def asked_for_v2(model: str) -> bool:
    """A config built with VLLM_USE_V2_MODEL_RUNNER=1: whether vLLM believes V2 (what
    the plugin says about it goes to the log, read by the test)."""
    from vllm.engine.arg_utils import EngineArgs

    os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    # With the plan's graphs (FULL_AND_PIECEWISE for Llama), which the NPU's V2 runner serves.
    config = EngineArgs(model=model, dtype="bfloat16", max_model_len=256,
                        block_size=128).create_engine_config()
    believed = bool(config.use_v2_model_runner)
    del os.environ["VLLM_USE_V2_MODEL_RUNNER"]  # the engine below: as an operator leaves it
    return believed


def main(model: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    os.environ["VLLM_ASCEND_DEVICE"] = "npu"
    from support.torch_npu_emulator.activate import activate

    activate()  # done by the sitecustomize already (with the Triton driver): the module
    from vllm.triton_utils import HAS_TRITON

    asked = asked_for_v2(model)
    import random

    from vllm import LLM, SamplingParams, TokensPrompt

    llm = LLM(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=256,
              block_size=128, max_num_batched_tokens=256, max_num_seqs=PROMPTS,
              num_gpu_blocks_override=BLOCKS, enable_prefix_caching=False, seed=0)
    core = llm.llm_engine.engine_core.engine_core  # type: ignore[attr-defined]
    scheduler = core.scheduler
    preempted: list[str] = []
    preempt = scheduler._preempt_request

    def counting(request: object, *args: object, **kwargs: object) -> object:
        preempted.append(request.request_id)  # type: ignore[attr-defined]
        return preempt(request, *args, **kwargs)

    scheduler._preempt_request = counting
    rng = random.Random(0)
    prompts = [TokensPrompt(prompt_token_ids=[rng.randrange(2, 500)
                                              for _ in range(PROMPT_TOKENS)])
               for _ in range(PROMPTS)]
    params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
    together = [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params,
                                                                   use_tqdm=False)]
    preempted_together = len(preempted)
    alone = [list(llm.generate([p], params, use_tqdm=False)[0].outputs[0].token_ids)
             for p in prompts]
    print("RESULT " + json.dumps({
        "has_triton": bool(HAS_TRITON),
        "asked_v2_believed": asked,
        "engine_use_v2": bool(llm.llm_engine.vllm_config.use_v2_model_runner),
        "scheduler_use_v2": bool(scheduler.use_v2_model_runner),
        "async_scheduling": bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling),
        "variable": os.environ.get("VLLM_USE_V2_MODEL_RUNNER"),
        "worker": llm.collective_rpc(worker_runner)[0],
        "preempted_together": preempted_together,
        "preempted_alone": len(preempted) - preempted_together,
        "together": together,
        "alone": alone,
    }), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
