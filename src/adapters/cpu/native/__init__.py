"""The host's native kernels: each port role's C++ op, built from the sources here at
the first call of any accessor (README.md: which op serves which role, how they are
built, cached, fallen back from).

Seven independent extensions (EXTENSIONS): a source that fails to build costs only its
own ops; their accessors then return None once the reason is logged at INFO, and the
host keeps its torch path for those roles. Every op's schema is written once, in its
.cpp's TORCH_LIBRARY_FRAGMENT (all in the `ascend_host_native` namespace); README.md's
table lists them (a unit test holds the two equal).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("vllm.plugins.ascend")

# -fopenmp compiles at::parallel_for's OpenMP loop and the simd reductions; nothing
# links its own OpenMP runtime: the symbols resolve to the one libtorch_cpu loaded.
_CFLAGS = ("-O3", "-march=native", "-fopenmp")


@dataclass(frozen=True)
class Extension:
    """One native extension: its sources (built into one library), the accessors it
    serves, what the host runs without it, and its cold build's CPU seconds (g++ -O3,
    measured on this project's host; README.md)."""

    sources: tuple[str, ...]
    serves: tuple[str, ...]
    fallback: str
    cpu_seconds: int


EXTENSIONS: Mapping[str, Extension] = {
    "attention": Extension(
        ("decode_attention.cpp",),
        ("decode_attention",),
        "attention through torch's SDPA",
        10,
    ),
    "kv_write": Extension(
        ("kv_write.cpp",), ("write_kv_cache",), "the KV write through index_put_", 8
    ),
    "linear": Extension(
        ("packed_linear.cpp", "small_gemm.cpp", "panel_gemm.cpp", "panel_gemm_amx.cpp"),
        ("packed_linear", "pack_linear_weight"),
        "the GEMMs through oneDNN packs made in Python",
        24,
    ),
    "moe_experts": Extension(
        ("moe_experts.cpp", "moe_experts_amx.cpp"),
        ("moe_experts",),
        "MoE experts one torch matmul pair per expert",
        13,
    ),
    "moe_route": Extension(("moe_route.cpp",), ("moe_route",), "MoE routing in torch ops", 14),
    "greedy_argmax": Extension(
        ("greedy_argmax.cpp",), ("greedy_argmax",), "greedy sampling through torch.argmax", 7
    ),
    "slot_mapping": Extension(
        ("slot_mapping.cpp",), ("compute_slot_mapping",), "the slot mapping in torch ops", 7
    ),
}

DecodeKernel = Callable[..., None]
KvWriteKernel = Callable[..., None]
MoeExpertsKernel = Callable[..., torch.Tensor]
MoeRouteKernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]
Loader = Callable[..., Any]  # torch.utils.cpp_extension.load's signature


class NativeKernels:
    """The extensions of one source directory, built (or loaded from torch's extensions
    cache) at the first `load` of any of them, each on its own, and kept, loaded or not,
    for the process.

    All at once, because compiled graphs trace the accessors: a kernel first asked for
    inside a trace could not be built there, so every kernel is ready once any caller
    has asked for one before tracing (as the host's weight loading does). Two builds
    run at a time (ninja runs each one's sources in parallel too).

    `load_library`: torch.utils.cpp_extension.load, looked up at call time (None), or
    a stand-in. The accessors below use one instance over this package's sources.
    """

    def __init__(
        self,
        source_dir: Path,
        extensions: Mapping[str, Extension] = EXTENSIONS,
        load_library: Loader | None = None,
    ) -> None:
        self._dir = source_dir
        self._extensions = extensions
        self._load_library = load_library
        self._loaded: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.dot_dtypes: frozenset[torch.dtype] = frozenset()  # moe_experts' dot kernels

    def load(self, name: str) -> bool:
        """Whether extension `name`'s ops are registered (under torch.ops.ascend_host_native),
        every extension built first where none was yet; a failure is logged once and kept.

        Once decided, a dict lookup and nothing else: compiled graphs trace the accessors
        (a lock is a graph break)."""
        loaded = self._loaded.get(name)
        return self._load_all(name) if loaded is None else loaded

    def _load_all(self, name: str) -> bool:
        with self._lock:
            if not self._loaded:
                names = list(self._extensions)
                self._announce(names)
                with ThreadPoolExecutor(max_workers=2) as pool:
                    built = list(pool.map(self._build, names))
                self._loaded.update(zip(names, built, strict=True))
                if self._loaded.get("moe_experts"):
                    has = torch.ops.ascend_host_native.has_dot_kernel
                    self.dot_dtypes = frozenset(
                        dtype
                        for dtype in (torch.float32, torch.bfloat16, torch.float16)
                        if has(dtype)
                    )
            return self._loaded[name]

    def _build(self, name: str) -> bool:
        extension = self._extensions[name]
        started = time.monotonic()
        wait_for_build_lock(_build_directory(_build_name(name)))
        try:
            from torch.utils import cpp_extension

            load = self._load_library or cpp_extension.load
            load(
                name=_build_name(name),
                sources=[str(self._dir / source) for source in extension.sources],
                extra_cflags=list(_CFLAGS),
                is_python_module=False,
                verbose=False,
            )
        except Exception as exc:  # no compiler, no headers, a failed build: the torch path
            logger.info(
                "Host native kernel %s (%s) unavailable (%s); the host runs %s instead.",
                name,
                ", ".join(extension.serves),
                _reason(exc),
                extension.fallback,
            )
            return False
        logger.debug("Host native kernel %s ready in %.1f s.", name, time.monotonic() - started)
        return True

    def _announce(self, names: list[str]) -> None:
        """Before cold builds: what the pause is and about how long (nothing when every
        build is cached: then it is a load of well under a second)."""
        directories = {name: _build_directory(_build_name(name)) for name in names}
        cold = [
            name
            for name, directory in directories.items()
            if directory is None or not any(directory.glob(f"{_build_name(name)}*.so"))
        ]
        if not cold:
            return
        seconds = sum(self._extensions[name].cpu_seconds for name in cold) / 2
        where = next((d.parent for d in directories.values() if d is not None), None)
        logger.info(
            "Compiling the host's native kernels (first start on this CPU: about %d s on 2 "
            "cores, less on more; cached in %s).",
            round(seconds),  # two compilers at a time
            where if where is not None else "torch's extensions directory",
        )


_KERNELS = NativeKernels(Path(__file__).parent)


def decode_attention() -> DecodeKernel | None:
    """torch.ops.ascend_host_native.decode_attention (schema: README.md), or None where it
    cannot be built.

    query/out [B, Hq, D] and caches [blocks, block_size, Hk, D] of one dtype (bf16 or
    float32; head dim contiguous), block_table [>=B, max_blocks] and seq_lens [>=B]
    int64. Float32 inside, one rounding at the output.
    """
    return torch.ops.ascend_host_native.decode_attention if _KERNELS.load("attention") else None


def write_kv_cache() -> KvWriteKernel | None:
    """torch.ops.ascend_host_native.write_kv_cache (schema: README.md), or None where it
    cannot be built.

    key/value [>=T, Hk, D], caches [blocks, block_size, Hk, D] (any strides), slot_mapping
    [T] int64 or int32 (-1: skipped). A plain copy; False (nothing written) where it does
    not apply: a dtype cast, a head dim that is not contiguous, another device.
    """
    return torch.ops.ascend_host_native.write_kv_cache if _KERNELS.load("kv_write") else None


def packed_linear() -> Any | None:
    """torch.ops.ascend_host_native.packed_linear.default (schema: README.md), or None where
    it cannot be built.

    x @ weight.T + bias, float32 or bf16 on a CPU with oneDNN. One or two rows of x: the
    small GEMM over the dense weight (small_gemm.cpp, where this CPU's build has it). 3 to
    64 rows: the panel GEMM over the weight packed into panels (panel_gemm.cpp, where the
    build has it), and oneDNN over the dense weight past that; a weight the panel GEMM
    does not take: oneDNN over the weight packed into its layout. Each pack is made once
    and cached by the op (again after an in-place change). A meta kernel gives its shape
    under torch.compile.
    """
    if not _KERNELS.load("linear"):
        return None
    return torch.ops.ascend_host_native.packed_linear.default


def pack_linear_weight() -> Any | None:
    """torch.ops.ascend_host_native.pack_linear_weight.default (schema: README.md), or None
    where it cannot be built: the pack packed_linear reads for a weight (panels for a
    contiguous weight where the build has the panel GEMM for its dtype, else oneDNN's
    layout), from its cache or packed into it now."""
    if not _KERNELS.load("linear"):
        return None
    return torch.ops.ascend_host_native.pack_linear_weight.default


def moe_experts() -> MoeExpertsKernel | None:
    """torch.ops.ascend_host_native.moe_experts (schema: README.md), or None where it cannot
    be built.

    hidden/out [T, H], local_ids [T, k] (-1: an expert on another rank, left out), weights
    [T, k] float32, w13 [E, 2I, H] and w2 [E, H, I]: each token's slots through their
    experts' SwiGLU MLPs, summed with the weights (CpuMoeOps' permute, grouped_mlp and
    unpermute, with its roundings). A functional op with a Meta kernel, so a compiled
    graph can call it; it raises for inputs `moe_experts_takes` declines, so check that
    first.
    """
    return torch.ops.ascend_host_native.moe_experts if _KERNELS.load("moe_experts") else None


def moe_experts_takes(
    hidden: torch.Tensor,
    local_ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
) -> bool:
    """Whether moe_experts takes these inputs: CPU tensors; hidden [T, H] with contiguous
    rows, of a dtype this CPU's build has a dot kernel for (float32, bf16 with AVX-512
    BF16); w13 [E, 2I, H] and w2 [E, H, I] contiguous, of hidden's dtype; local_ids int32
    or int64 and weights float32, both contiguous [T, k]. Metadata only, so a compiled
    graph guards on it rather than calling anything."""
    return (
        moe_experts_take_weights(w13, w2)
        and hidden.dtype == w13.dtype
        and hidden.device.type == "cpu"
        and hidden.dim() == 2
        and hidden.stride(1) == 1
        and local_ids.dtype in (torch.int32, torch.int64)
        and local_ids.dim() == 2
        and local_ids.is_contiguous()
        and weights.dtype == torch.float32
        and weights.is_contiguous()
    )


def moe_experts_take_weights(w13: torch.Tensor, w2: torch.Tensor) -> bool:
    """moe_experts_takes' part that depends on the layer's weights alone (False until
    moe_experts() has built the kernel)."""
    return (
        w13.dtype in _KERNELS.dot_dtypes
        and w2.dtype == w13.dtype
        and w13.device.type == "cpu"
        and w13.dim() == 3
        and w2.dim() == 3
        and w13.is_contiguous()
        and w2.is_contiguous()
    )


def moe_route() -> MoeRouteKernel | None:
    """torch.ops.ascend_host_native.moe_route (schema: README.md), or None where it cannot
    be built.

    router_logits [T, E] -> (weights [T, k] float32, ids [T, k] int32): plain top-k
    routing (no expert groups, no correction bias) with CpuMoeOps.route's bits, torch's
    softmax, sigmoid and topk.
    """
    return torch.ops.ascend_host_native.moe_route if _KERNELS.load("moe_route") else None


def greedy_argmax() -> Callable[[torch.Tensor], torch.Tensor] | None:
    """torch.ops.ascend_host_native.greedy_argmax (schema: README.md), or None where it
    cannot be built.

    logits [B, V] float32, rows contiguous -> [B] int64: torch.argmax(dim=-1)'s answer
    (the first index of the maximum, or of the first NaN); other inputs raise.
    """
    if not _KERNELS.load("greedy_argmax"):
        return None
    return torch.ops.ascend_host_native.greedy_argmax


def compute_slot_mapping() -> Callable[..., None] | None:
    """torch.ops.ascend_host_native.compute_slot_mapping (schema: README.md), or None where
    it cannot be built.

    vLLM's slot-mapping kernel's contract (ports/slot_mapping.py) on contiguous
    int32/int64 CPU tensors, written into slot_mapping; other inputs, and a position past
    its block table, raise.
    """
    if not _KERNELS.load("slot_mapping"):
        return None
    return torch.ops.ascend_host_native.compute_slot_mapping


def _build_name(name: str) -> str:
    return f"vllm_ascend_host_{name}_{_cpu_key()}"


def _reason(exc: Exception) -> str:
    """The exception's type and its telling line: a compiler's first `error:` line (it
    names the source), else the message's last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    line = errors[0] if errors else (lines[-1] if lines else "")
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _build_directory(build_name: str) -> Path | None:
    """Where torch builds and caches `build_name` (TORCH_EXTENSIONS_DIR, else its default
    under the user's cache), or None where torch no longer says."""
    try:
        from torch.utils import cpp_extension

        return Path(cpp_extension._get_build_directory(build_name, verbose=False))
    except Exception:  # a private helper of torch's: the note then names no directory
        return None


# torch's builds lock their directory with a file that only the building process removes:
# one killed mid-build (an engine stopped at its first start) leaves it, and every later
# start then waits on it forever. No build here takes near this long on 2 cores.
STALE_LOCK_SECONDS = 600.0
# torch's FileBaton keeps the lock's file descriptor open for the whole build, so a lock
# that no live process holds open is a killed build's. Past this age (the baton is opened
# as it is made; the margin covers a builder /proc does not show, in another container
# sharing the directory) it is removed without waiting STALE_LOCK_SECONDS.
UNHELD_LOCK_SECONDS = 30.0
_LOCK_POLL_SECONDS = 0.5

Holders = Callable[[Path], bool | None]


def lock_is_held(lock: Path, proc: Path = Path("/proc")) -> bool | None:
    """Whether a process this one can see has `lock` open; None where /proc cannot say."""
    try:
        target = str(lock.resolve())
        pids = [entry for entry in proc.iterdir() if entry.name.isdigit()]
    except OSError:
        return None
    readable = False
    for pid in pids:
        try:
            fds = list((pid / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's
        readable = True
        for fd in fds:
            try:
                if str(fd.readlink()) == target:
                    return True
            except OSError:
                continue
    return False if readable else None


def clear_stale_lock(
    directory: Path | None, now: float | None = None, held: Holders = lock_is_held
) -> bool:
    """Remove `directory`'s build lock when it is left by a build that was killed: no live
    process holds it open and it is older than UNHELD_LOCK_SECONDS, or it is older than
    STALE_LOCK_SECONDS; whether one was removed."""
    lock = directory / "lock" if directory is not None else None
    try:
        if lock is None or not lock.exists():
            return False
        age = (time.time() if now is None else now) - lock.stat().st_mtime
        if age < UNHELD_LOCK_SECONDS:
            return False  # a build starting, in this process's sibling or another one
        holder = held(lock) if age < STALE_LOCK_SECONDS else None
        if holder is not False and age < STALE_LOCK_SECONDS:
            return False  # a build in progress (or /proc cannot say): torch waits on it
        lock.unlink()
    except OSError:
        return False  # gone meanwhile, or not ours to remove: torch's wait decides
    why = "no process holds it" if age < STALE_LOCK_SECONDS else "older than any build"
    logger.warning(
        "Removed %s, a build lock %d s old (%s): a host kernel build was killed before it "
        "finished, and every start would have waited on it.", lock, round(age), why,
    )
    return True


def wait_for_build_lock(
    directory: Path | None, held: Holders = lock_is_held, poll: float = _LOCK_POLL_SECONDS
) -> None:
    """Until `directory` has no build lock: a live build's ends, a killed build's is
    removed once clear_stale_lock calls it stale (torch's own wait would never end)."""
    lock = directory / "lock" if directory is not None else None
    while lock is not None and lock.exists():
        if clear_stale_lock(directory, held=held):
            return
        time.sleep(poll)


def _cpu_key(cpuinfo: str | None = None) -> str:
    """A short key of this CPU's model and instruction-set flags (/proc/cpuinfo).

    The build is `-march=native`, and torch keys its cache by name, sources and flags
    only: a shared extensions directory (a home on NFS, a container image) would hand a
    build for one CPU to another, which can stop on an illegal instruction. Naming the
    build after the CPU makes each CPU kind build its own.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "unknown"
    lines = cpuinfo.splitlines()
    wanted = ("model name", "flags", "Features", "CPU part")  # x86 and Arm spellings
    facts = sorted({line for line in lines if line.split(":")[0].strip() in wanted})
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:12]

