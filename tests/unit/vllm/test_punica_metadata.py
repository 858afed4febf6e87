"""The platform's punica wrapper takes a step's adapter mapping as each row's slot, made on
the host and written in place into vLLM's index buffers (the values vLLM's own
convert_mapping gives), and reads nothing back from the device for it (vLLM's runners
mark every mapping a prefill, whose SGMV metadata would read the device three times a
step)."""

from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode
from vllm.lora.layers import LoRAMapping

from adapters.container import container
from adapters.torch.lora import TorchLoraOps
from adapters.vllm.layers.punica import AscendPunicaWrapper

# Slot 0 holds adapter id 7, slot 1 id 9 (vLLM's lora_index_to_id).
SLOTS = [7, 9]
# A step of two requests: 3 tokens of adapter 9, then 2 tokens with none.
MAPPING = LoRAMapping(index_mapping=(9, 9, 9, 0, 0), prompt_mapping=(9, 0), is_prefill=True)
# Reads of a tensor's value back to the host: `.item()`, and ops whose output size
# depends on the values (a device must sync to know it).
READS_BACK = {"_local_scalar_dense", "unique_consecutive", "nonzero"}


class _Ops(TorchDispatchMode):
    """The aten ops dispatched inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def test_a_steps_mapping_is_each_rows_slot_with_nothing_read_back() -> None:
    with container().lora_ops.override(TorchLoraOps()):
        wrapper = AscendPunicaWrapper(max_num_batched_tokens=8, max_batches=4, device="cpu")
    with _Ops() as ops:
        wrapper.update_metadata(MAPPING, SLOTS, max_loras=2, vocab_size=100)
    assert ops.names and not READS_BACK & set(ops.names), ops.names
    assert wrapper._token_lora_indices[:5].tolist() == [1, 1, 1, -1, -1]
    assert wrapper._sampler_indices[:2].tolist() == [1, -1]
    # vLLM's layouts: a sampled row r of slot s (none: max_loras - 1) at r + s * rows; a
    # token's embedding rows at its slot (none: 0) times the vocabulary.
    assert wrapper._sampler_indices_padded[:2].tolist() == [0 + 1 * 2, 1 + 1 * 2]
    assert wrapper._embeddings_indices[:5].tolist() == [100, 100, 100, 0, 0]
    assert wrapper.indices_len == [5, 2, 2, 5] and wrapper.is_prefill
    # Past the step's rows the buffers keep what they held (a padded graph's rows).
    assert wrapper._token_lora_indices[5:].tolist() == [-1, -1, -1]
    later = LoRAMapping(index_mapping=(7,), prompt_mapping=(7,))
    wrapper.update_metadata(later, SLOTS, max_loras=2, vocab_size=100)
    assert wrapper._token_lora_indices[:5].tolist() == [0, 1, 1, -1, -1]
    assert not wrapper.is_prefill
