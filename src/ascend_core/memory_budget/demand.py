"""Device memory budget: weights, KV cache per token, what fits, and the smallest fix when not.

One source of the "KV cache cannot hold one sequence" message for the doctor and the worker.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs
from attrs import field, frozen, validators

from ascend_core.deployment import ModelFacts
from ascend_core.errors import ConfigError
from ports.device import ChipFamily
from ports.model_files import TensorHeader

GIB = 1 << 30
MIB = 1 << 20

# The highest --gpu-memory-utilization we suggest: above it the runtime's own
# workspaces and fragmentation leave too little headroom to be a safe default.
MAX_SUGGESTED_UTILIZATION = 0.95
# The largest tensor-parallel size searched for a fix (two A3 nodes of 16 devices each).
MAX_SUGGESTED_TP = 32

# Memory per device of each chip family when no device is there to ask (the doctor
# on a machine without an NPU). Public product data: Atlas 800I A2 (910B) 64 GB HBM
# per NPU; A3 (910C) 128 GB per package, seen as two 64 GB devices; Atlas 300I Duo
# 96 GB per card of two chips.
NOMINAL_DEVICE_MEMORY: Mapping[ChipFamily, int] = MappingProxyType(
    {
        ChipFamily.A2: 64 * GIB,
        ChipFamily.A3: 64 * GIB,
        ChipFamily.P310: 48 * GIB,
    }
)

# Bits per element of every safetensors dtype.
_SAFETENSORS_BITS: Mapping[str, int] = MappingProxyType(
    {
        "F64": 64, "F32": 32, "F16": 16, "BF16": 16,
        "I64": 64, "I32": 32, "I16": 16, "I8": 8,
        "U64": 64, "U32": 32, "U16": 16, "U8": 8, "BOOL": 8,
        "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
        "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4, "I4": 4, "U4": 4,
    }
)  # fmt: skip
_FLOAT_HEADERS = frozenset({"F64", "F32", "F16", "BF16"})

# Bytes per element of the dtype names vLLM takes for --dtype and --kv-cache-dtype.
_DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
        "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1,
    }
)  # fmt: skip


def format_bytes(n: int) -> str:
    """Bytes for a person: GiB above one GiB, MiB above one MiB, else KiB or bytes."""
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a >= GIB:
        return f"{sign}{a / GIB:.2f} GiB"
    if a >= MIB:
        return f"{sign}{a / MIB:.1f} MiB"
    if a >= 1024:
        return f"{sign}{a / 1024:.1f} KiB"
    return f"{sign}{a} B"


def exact_bytes(n: int) -> str:
    """The exact count, which a user may pass back as a flag, then the readable size."""
    return f"{n} B ({format_bytes(n)})"


def dtype_bytes(name: str, model_dtype: str = "bfloat16") -> int:
    """Bytes per element of a --dtype or --kv-cache-dtype value; "auto" means `model_dtype`."""
    key = name.strip().lower().removeprefix("torch.")
    if key == "auto":
        key = model_dtype.strip().lower().removeprefix("torch.")
    if key not in _DTYPE_BYTES:
        raise ConfigError(
            f"dtype {name!r} has no known element size.",
            "use one of " + ", ".join(sorted(_DTYPE_BYTES)) + " or auto",
        )
    return _DTYPE_BYTES[key]


@frozen
class WeightsSize:
    """The weights of the whole model in device memory, read from safetensors headers."""

    total_bytes: int
    tensors: int
    quantized: bool  # some weight matrices are stored as 8-bit or narrower integers/floats
    detail: str


def weights_size(headers: Iterable[TensorHeader], model_dtype: str = "bfloat16") -> WeightsSize:
    """Sum of every tensor's bytes. Floating tensors count at `model_dtype` (vLLM casts
    them on load); integer and 8-bit float tensors keep their stored width."""
    float_bytes = dtype_bytes(model_dtype)
    total = 0
    count = 0
    narrow = 0
    for header in headers:
        numel = math.prod(header.shape)
        code = header.dtype.upper()
        if code in _FLOAT_HEADERS:
            total += numel * float_bytes
        else:
            bits = _SAFETENSORS_BITS.get(code)
            if bits is None:
                raise ConfigError(
                    f"tensor {header.name!r} has safetensors dtype {header.dtype!r}, "
                    "which the memory budget does not know.",
                    "report the dtype; the budget needs its element size",
                )
            total += math.ceil(numel * bits / 8)
            if bits <= 8 and len(header.shape) >= 2:
                narrow += 1
        count += 1
    detail = f"{count} tensors, floating point at {model_dtype}"
    if narrow:
        detail += f", {narrow} matrices stored at 8 bits or fewer"
    return WeightsSize(total, count, narrow > 0, detail)


class KvLayout(enum.Enum):
    """How attention caches a token: K and V per KV head, or one MLA latent."""

    STANDARD = "standard"
    MLA = "mla"


@frozen
class KvPerToken:
    """KV-cache bytes one token takes on one device, with the formula that gave them."""

    layout: KvLayout
    bytes: int
    formula: str


def kv_bytes_per_token(
    model: ModelFacts, kv_dtype_bytes: int, tp: int = 1, pp: int = 1
) -> KvPerToken:
    """Per device. Standard attention splits KV heads over TP (replicated when there are
    fewer heads than ranks); MLA caches one latent per layer on every TP rank."""
    layers = math.ceil(model.num_layers / pp)
    layer_text = f"{layers} layers" + (f" (of {model.num_layers}, pp={pp})" if pp > 1 else "")
    if model.mla is not None:
        width = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
        return KvPerToken(
            KvLayout.MLA,
            layers * width * kv_dtype_bytes,
            f"{layer_text} x ({model.mla.kv_lora_rank} kv_lora_rank + "
            f"{model.mla.qk_rope_head_dim} qk_rope_head_dim) x {kv_dtype_bytes} B "
            "(one latent, not split by TP)",
        )
    heads = max(1, model.num_kv_heads // tp)
    heads_text = f"{heads} KV heads/device"
    if model.num_kv_heads < tp:
        heads_text += f" ({model.num_kv_heads} replicated over tp={tp})"
    elif tp > 1:
        heads_text += f" ({model.num_kv_heads}/tp={tp})"
    return KvPerToken(
        KvLayout.STANDARD,
        2 * layers * heads * model.head_size * kv_dtype_bytes,
        f"2 (K,V) x {layer_text} x {heads_text} x {model.head_size} head_dim x {kv_dtype_bytes} B",
    )


# What a device holds besides weights and KV cache, when nothing has been measured:
# the CANN runtime and operator workspaces, HCCL buffers and captured graphs.
RUNTIME_RESERVE_BYTES = 2 * GIB
# Peak activation bytes per scheduled token, in units of hidden_size x dtype bytes: the
# residual, QKV, attention output and a gated MLP's intermediate (~3.5 x hidden, twice)
# are alive together; 12 covers that with headroom for the sampler's logits.
ACTIVATION_FACTOR = 12


@frozen
class Reserve:
    """Per-device memory kept out of the KV cache besides weights, with where it comes from."""

    runtime_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.runtime_bytes + self.activation_bytes

    def describe(self) -> str:
        return (
            f"{format_bytes(self.runtime_bytes)} runtime/HCCL/graphs + "
            f"{format_bytes(self.activation_bytes)} activations"
        )


def estimate_reserve(
    model: ModelFacts, max_num_batched_tokens: int, activation_dtype_bytes: int, tp: int = 1
) -> Reserve:
    """The doctor's estimate of what vLLM's profiling run would measure."""
    per_token = ACTIVATION_FACTOR * model.hidden_size * activation_dtype_bytes
    activations = max_num_batched_tokens * per_token // max(1, tp)
    return Reserve(RUNTIME_RESERVE_BYTES, activations)


class BudgetFlag(enum.Enum):
    """The `vllm serve` flag that set a device's KV-cache budget, the one to change."""

    MEMORY_UTILIZATION = "--gpu-memory-utilization"
    KV_CACHE_MEMORY_BYTES = "--kv-cache-memory-bytes"


class Accounting(enum.Enum):
    """Where a demand's weights_bytes and reserve_bytes come from, which names them."""

    # The doctor: weights from safetensors headers, reserve from estimate_reserve.
    ESTIMATED = "estimated"
    # The worker: weights_bytes is the peak the process held when the KV cache is sized
    # (weights plus its working memory: the allocator's peak on an NPU, the resident set
    # on the host, so non-torch memory too), reserve_bytes the part of the utilization
    # share the device lacks free.
    MEASURED = "measured"


# Per accounting: the names of weights_bytes and reserve_bytes in the arithmetic, and
# the subject of "... no memory for the KV cache".
_PART_NAMES: Mapping[Accounting, tuple[str, str, str]] = MappingProxyType(
    {
        Accounting.ESTIMATED: ("weights", "reserve", "Weights and reserve leave"),
        Accounting.MEASURED: (
            "held by this process at its peak (weights and working memory; on the host "
            "non-torch memory too)",
            "not free on the device",
            "What this process holds leaves",
        ),
    }
)


@frozen
class MemoryDemand:
    """The numbers of one device's budget, estimated (doctor) or measured (worker)."""

    device_memory_bytes: int = field(validator=validators.ge(1))
    memory_utilization: float = field(validator=[validators.gt(0.0), validators.le(1.0)])
    weights_bytes: int = field(validator=validators.ge(0))  # on this device
    reserve_bytes: int = field(validator=validators.ge(0))  # activations and runtime
    kv_bytes_per_token: int = field(validator=validators.ge(1))  # on this device
    max_model_len: int = field(validator=validators.ge(1))
    block_size: int = field(default=128, validator=validators.ge(1))
    budget_flag: BudgetFlag = BudgetFlag.MEMORY_UTILIZATION
    accounting: Accounting = Accounting.ESTIMATED

    @classmethod
    def explicit(
        cls, kv_cache_bytes: int, kv_bytes_per_token: int, max_model_len: int, block_size: int
    ) -> MemoryDemand:
        """--kv-cache-memory-bytes: the flag is the whole KV budget, nothing is taken off it."""
        return cls(
            device_memory_bytes=kv_cache_bytes,
            memory_utilization=1.0,
            weights_bytes=0,
            reserve_bytes=0,
            kv_bytes_per_token=kv_bytes_per_token,
            max_model_len=max_model_len,
            block_size=block_size,
            budget_flag=BudgetFlag.KV_CACHE_MEMORY_BYTES,
            accounting=Accounting.MEASURED,
        )

    @property
    def usable_bytes(self) -> int:
        return int(self.device_memory_bytes * self.memory_utilization)

    @property
    def kv_bytes_available(self) -> int:
        """What is left for the KV cache; negative when weights and reserve alone overflow."""
        return self.usable_bytes - self.weights_bytes - self.reserve_bytes

    @property
    def num_blocks(self) -> int:
        return max(0, self.kv_bytes_available) // (self.block_size * self.kv_bytes_per_token)

    @property
    def tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def sequence_bytes(self) -> int:
        """KV bytes one sequence of max_model_len takes, in whole blocks."""
        blocks = math.ceil(self.max_model_len / self.block_size)
        return blocks * self.block_size * self.kv_bytes_per_token

    @property
    def fits(self) -> bool:
        return self.tokens >= self.max_model_len

    def arithmetic(self) -> str:
        """How the KV space is derived, with every number and the flag that set it."""
        available = exact_bytes(self.kv_bytes_available)
        if self.budget_flag is BudgetFlag.KV_CACHE_MEMORY_BYTES:
            return f"{self.budget_flag.value}={self.device_memory_bytes} gives {available}"
        weights, reserve, _ = _PART_NAMES[self.accounting]
        # A measured shortage of free memory is shown only when there is one.
        shown = self.reserve_bytes or self.accounting is Accounting.ESTIMATED
        return (
            f"{format_bytes(self.device_memory_bytes)} x {self.memory_utilization:.2f} "
            f"({self.budget_flag.value}) "
            f"- {format_bytes(self.weights_bytes)} {weights} "
            + (f"- {format_bytes(self.reserve_bytes)} {reserve} " if shown else "")
            + f"= {available} for the KV cache"
        )


@frozen
class Scaling:
    """What the fix search needs to re-derive the budget at another TP size or precision."""

    model: ModelFacts
    kv_dtype_bytes: int
    tp: int = 1
    pp: int = 1
    weights_quantized: bool = False
    max_tp: int = MAX_SUGGESTED_TP


class FixKind(enum.Enum):
    """The changes the budget suggests, in the order it prefers them."""

    MEMORY_UTILIZATION = "gpu_memory_utilization"
    KV_CACHE_MEMORY_BYTES = "kv_cache_memory_bytes"
    MAX_MODEL_LEN = "max_model_len"
    TENSOR_PARALLEL = "tensor_parallel_size"
    QUANTIZATION = "quantization"


@frozen
class MemoryFix:
    """One change that makes the budget fit, with the numbers after it."""

    kind: FixKind
    argument: str  # what to pass to vllm serve, e.g. "--max-model-len 38912"
    value: int | float | str
    detail: str


@frozen
class MemoryBudget:
    """What fits on one device and, when one sequence does not, the changes that fix it."""

    demand: MemoryDemand
    fixes: tuple[MemoryFix, ...]

    @property
    def fits(self) -> bool:
        return self.demand.fits

    @property
    def tokens(self) -> int:
        return self.demand.tokens

    @property
    def sequences(self) -> int:
        """Whole sequences of max_model_len the KV cache holds at once."""
        return self.demand.tokens // self.demand.max_model_len

    def what(self) -> str:
        """The verdict with its arithmetic; for a failure, why it fails."""
        d = self.demand
        if d.kv_bytes_available <= 0:
            subject = _PART_NAMES[d.accounting][2]
            return f"{subject} no memory for the KV cache: {d.arithmetic()}."
        if not d.fits:
            return (
                f"KV cache cannot hold one sequence of max_model_len={d.max_model_len}: it "
                f"needs {exact_bytes(d.sequence_bytes)} at "
                f"{format_bytes(d.kv_bytes_per_token)} per token, but "
                f"{d.arithmetic()}, which holds {d.tokens} tokens."
            )
        return (
            f"KV cache holds {d.tokens} tokens = {self.sequences} sequence(s) of "
            f"max_model_len={d.max_model_len} ({format_bytes(d.kv_bytes_per_token)} per "
            f"token; {d.arithmetic()})."
        )

    def hint(self) -> str:
        """The smallest fix first, then the others; empty when it fits."""
        if self.fits:
            return ""
        if not self.fixes:
            return (
                f"no single change fits: free device memory or raise "
                f"{self.demand.budget_flag.value}, and combine a shorter --max-model-len "
                "with a larger --tensor-parallel-size or a quantized checkpoint"
            )
        first, *rest = self.fixes
        text = f"{first.argument} ({first.detail})"
        if rest:
            text += "; or " + "; or ".join(f"{f.argument} ({f.detail})" for f in rest)
        return text


class KvCacheTooSmallError(ConfigError):
    """The KV cache cannot hold one sequence of max_model_len on a device."""

    def __init__(self, budget: MemoryBudget) -> None:
        self.budget = budget
        super().__init__(budget.what(), budget.hint())


def plan_budget(demand: MemoryDemand, scaling: Scaling | None = None) -> MemoryBudget:
    """The budget and, when one sequence does not fit, every single change that fixes it.

    Without `scaling` only the two flags that need no model facts are searched.
    """
    if demand.fits:
        return MemoryBudget(demand, ())
    first = (
        _raise_kv_bytes(demand)
        if demand.budget_flag is BudgetFlag.KV_CACHE_MEMORY_BYTES
        else _raise_utilization(demand)
    )
    fixes = [fix for fix in (first, _shorten(demand)) if fix is not None]
    if scaling is not None:
        fixes += [f for f in (_widen_tp(demand, scaling), _quantize(demand, scaling)) if f]
    return MemoryBudget(demand, tuple(fixes))


def kv_cache_shortfall(
    demand: MemoryDemand, scaling: Scaling | None = None
) -> KvCacheTooSmallError | None:
    """The error to raise at `vllm serve` when one sequence does not fit, else None.

    The worker passes what it measured (Accounting.MEASURED) and the flag that set the
    budget, so the message names both.
    """
    budget = plan_budget(demand, scaling)
    return None if budget.fits else KvCacheTooSmallError(budget)


def _raise_kv_bytes(d: MemoryDemand) -> MemoryFix:
    return MemoryFix(
        FixKind.KV_CACHE_MEMORY_BYTES,
        f"{BudgetFlag.KV_CACHE_MEMORY_BYTES.value} {d.sequence_bytes}",
        d.sequence_bytes,
        f"one sequence of max_model_len={d.max_model_len}: {format_bytes(d.sequence_bytes)}",
    )


def _raise_utilization(d: MemoryDemand) -> MemoryFix | None:
    if d.accounting is Accounting.MEASURED and d.reserve_bytes:
        # The device lacks free memory for the current share already; a larger share
        # of it would not be free either.
        return None
    needed = d.weights_bytes + d.reserve_bytes + d.sequence_bytes
    # Round up to a hundredth, then step until the integer truncation in usable_bytes agrees.
    util = math.ceil(needed / d.device_memory_bytes * 100) / 100
    while util <= MAX_SUGGESTED_UTILIZATION and not attrs.evolve(d, memory_utilization=util).fits:
        util = round(util + 0.01, 2)
    if util <= d.memory_utilization or util > MAX_SUGGESTED_UTILIZATION:
        return None
    after = attrs.evolve(d, memory_utilization=util)
    return MemoryFix(
        FixKind.MEMORY_UTILIZATION,
        f"--gpu-memory-utilization {util:.2f}",
        util,
        f"{format_bytes(after.kv_bytes_available)} for the KV cache, "
        f"{after.tokens} tokens = {after.tokens // d.max_model_len} sequence(s)",
    )


def _shorten(d: MemoryDemand) -> MemoryFix | None:
    if d.tokens < d.block_size:
        return None
    return MemoryFix(
        FixKind.MAX_MODEL_LEN,
        f"--max-model-len {d.tokens}",
        d.tokens,
        f"the longest sequence {format_bytes(d.kv_bytes_available)} of KV cache holds, "
        f"down from {d.max_model_len}",
    )


def _widen_tp(d: MemoryDemand, s: Scaling) -> MemoryFix | None:
    tp = s.tp * 2
    while tp <= s.max_tp:
        if _divides_heads(s.model, tp):
            after = attrs.evolve(
                d,
                weights_bytes=d.weights_bytes * s.tp // tp,
                kv_bytes_per_token=kv_bytes_per_token(s.model, s.kv_dtype_bytes, tp, s.pp).bytes,
            )
            if after.fits:
                return MemoryFix(
                    FixKind.TENSOR_PARALLEL,
                    f"--tensor-parallel-size {tp}",
                    tp,
                    f"{format_bytes(after.weights_bytes)} weights and "
                    f"{format_bytes(after.kv_bytes_per_token)}/token per device, "
                    f"{after.tokens} tokens = {after.tokens // d.max_model_len} sequence(s); "
                    f"needs {tp * s.pp} devices",
                )
        tp *= 2
    return None


def _divides_heads(model: ModelFacts, tp: int) -> bool:
    if model.num_attention_heads % tp:
        return False
    if model.mla is not None:
        return True
    if model.num_kv_heads >= tp:
        return model.num_kv_heads % tp == 0
    return tp % model.num_kv_heads == 0  # fewer KV heads than ranks: each is replicated


def _quantize(d: MemoryDemand, s: Scaling) -> MemoryFix | None:
    if s.weights_quantized:
        return None
    after = attrs.evolve(d, weights_bytes=d.weights_bytes // 2)
    if not after.fits:
        return None
    return MemoryFix(
        FixKind.QUANTIZATION,
        "--quantization ascend with a W8A8 checkpoint",
        "w8a8",
        f"int8 weights halve them to {format_bytes(after.weights_bytes)} per device, "
        f"{after.tokens} tokens = {after.tokens // d.max_model_len} sequence(s)",
    )
