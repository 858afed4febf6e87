"""The config plan's output (`ConfigPlan`, `Change`) and the draft the steps pass along."""

from __future__ import annotations

import enum
from typing import Any

import attrs
from attrs import frozen, validators

from ascend_core.ascend_config import AscendConfig
from ascend_core.deployment import CompileMode, GraphMode
from ascend_core.env_registry import EnvSettings
from ascend_core.errors import AscendError, PlanErrors
from ascend_core.moe.decision import MoeDecision
from ascend_core.moe.eplb import EplbDecision
from ascend_core.plan import fields
from ascend_core.quantization.fp8 import Fp8Serving
from ascend_core.quantization.methods import QuantMethod


class ModelRunner(enum.Enum):
    """Which of vLLM's model runners the worker builds (ascend_core.plan.model_runner)."""

    V1 = "v1"  # vllm/v1/worker/gpu_model_runner.py's GPUModelRunner (ours subclass it)
    V2 = "v2"  # vllm/v1/worker/gpu/model_runner.py


class WorkerKind(enum.Enum):
    """Which worker serves; the vLLM adapter maps the kind to a class path."""

    NPU = "npu"
    HOST = "host"


@frozen
class Change:
    """One setting the plan changes: `field` goes from `old` to `new` because of `reason`.

    `field` is one of `ascend_core.plan.fields` (a VllmConfig path, `env.NAME` or an
    additional_config key), so the adapter can apply every change it receives.
    """

    field: str = attrs.field(validator=validators.in_(fields.ALL))
    old: Any
    new: Any
    reason: str

    def describe(self) -> str:
        return f"{self.field}: {_render(self.old)} -> {_render(self.new)} ({self.reason})"


def _render(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str) else value.name
    if isinstance(value, tuple):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    return str(value)


@frozen
class Decisions:
    """The values the plan settles; each step reads and refines them in order."""

    worker_kind: WorkerKind = WorkerKind.NPU
    model_runner: ModelRunner = ModelRunner.V1  # the runner the worker builds
    model_runner_reason: str = ""
    block_size: int | None = None  # None only where vLLM sizes it later (hybrid models)
    compile_mode: CompileMode | None = None
    graph_mode: GraphMode = GraphMode.NONE
    capture_sizes: tuple[int, ...] | None = None
    # On an NPU under data parallelism: whether its graphs stay, and why (graph.py).
    dp_graphs: str = ""
    custom_ops: tuple[str, ...] = ()
    sequence_parallel: bool = False
    quantization: QuantMethod = QuantMethod.NONE  # the method that will be used
    ascend_config: AscendConfig | None = None  # None when additional_config has errors
    npu_alloc_conf: str | None = None
    env: EnvSettings | None = None  # None until the env step ran, or when it had errors
    moe: MoeDecision | None = None  # MoE models whose batch limits are known
    eplb: EplbDecision | None = None  # vLLM's EPLB as served (moe/eplb.py); None: off
    # A model with a vision tower: how its tower and language model run (encoder_graphs.py).
    encoder_execution: str = ""
    fp8: Fp8Serving | None = None  # fp8 exports: the chip's path and why


@frozen
class ConfigPlan:
    """What the plan decided, every change it makes with its reason, and what is wrong."""

    changes: tuple[Change, ...]
    warnings: tuple[str, ...]
    errors: tuple[AscendError, ...]
    decisions: Decisions

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def worker_kind(self) -> WorkerKind:
        return self.decisions.worker_kind

    @property
    def model_runner(self) -> ModelRunner:
        return self.decisions.model_runner

    @property
    def block_size(self) -> int | None:
        return self.decisions.block_size

    @property
    def graph_mode(self) -> GraphMode:
        return self.decisions.graph_mode

    @property
    def compile_mode(self) -> CompileMode | None:
        return self.decisions.compile_mode

    def require_ok(self) -> ConfigPlan:
        """The plan itself when it has no errors; otherwise raise them all together."""
        if self.errors:
            raise PlanErrors(self.errors)
        return self

    def changes_to(self, field_path: str) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.field == field_path)

    def describe(self) -> str:
        """The plan for an operator's log: one line per change, warning and error."""
        lines = [
            f"Ascend config plan: worker={self.worker_kind.name}, "
            f"block_size={_render(self.block_size)}, npu_graph_mode={self.graph_mode.name}, "
            f"compile_mode={_render(self.compile_mode)}, runner={self.model_runner.name}"
        ]
        moe = self.decisions.moe
        if moe is not None:
            lines.append(f"  moe     {moe.describe()}")
        if self.decisions.encoder_execution:
            lines.append(f"  encoder {self.decisions.encoder_execution}")
        if self.decisions.fp8 is not None:
            lines.append(f"  quant   {self.decisions.fp8.describe()}")
        if self.decisions.model_runner_reason:
            lines.append(f"  runner  {self.decisions.model_runner_reason}")
        lines += [f"  change  {c.describe()}" for c in self.changes]
        lines += [f"  warning {w}" for w in self.warnings]
        lines += [f"  error   {e}" for e in self.errors]
        if len(lines) == 1:
            lines.append("  no changes")
        return "\n".join(lines)


@frozen
class Draft:
    """The plan under construction; each step returns a new draft."""

    decisions: Decisions
    changes: tuple[Change, ...] = ()
    warnings: tuple[str, ...] = ()
    errors: tuple[AscendError, ...] = ()

    def change(self, field_path: str, old: object, new: object, reason: str) -> Draft:
        return attrs.evolve(self, changes=(*self.changes, Change(field_path, old, new, reason)))

    def warn(self, message: str) -> Draft:
        return attrs.evolve(self, warnings=(*self.warnings, message))

    def fail(self, error: AscendError) -> Draft:
        return attrs.evolve(self, errors=(*self.errors, error))

    def decide(self, **values: Any) -> Draft:
        return attrs.evolve(self, decisions=attrs.evolve(self.decisions, **values))

    def finish(self) -> ConfigPlan:
        return ConfigPlan(self.changes, self.warnings, self.errors, self.decisions)
