"""What the plan settled for a MoE model's expert parallelism, for serve and the doctor."""

from __future__ import annotations

from attrs import frozen

from ascend_core.moe.comm_method import MoeCommMethod, MoeCommPlan
from ascend_core.moe.placement import ExpertPlacement


@frozen
class HcclBuffer:
    """MC2's HCCL buffer floor against what HCCL_BUFFSIZE gives (MB each)."""

    needed_mb: int
    given_mb: int
    from_environment: bool  # False: CANN's default applies

    @property
    def fits(self) -> bool:
        return self.given_mb >= self.needed_mb

    def describe(self) -> str:
        source = "HCCL_BUFFSIZE" if self.from_environment else "HCCL_BUFFSIZE unset, CANN's"
        verdict = "fits" if self.fits else "too small"
        return f"MC2 needs {self.needed_mb} MB; {source} {self.given_mb} MB: {verdict}"


@frozen
class MoeDecision:
    """The communication method(s), where the experts sit, and MC2's buffer (None when no
    step uses MC2). `token_dtype` says what dispatch sends; `in_graphs` what the steps
    captured in NPU graphs exchange (None without graphs; moe/in_graphs.py)."""

    comm: MoeCommPlan
    placement: ExpertPlacement
    hccl_buffer: HcclBuffer | None
    token_dtype: str
    in_graphs: str | None = None

    def uses(self, method: MoeCommMethod) -> bool:
        return method in self.comm.methods()

    def describe(self) -> str:
        """One line for serve's log: the method(s), the experts a rank, MC2's buffer."""
        parts = [f"comm {self.comm.describe()}", self.placement.describe()]
        if self.hccl_buffer is not None:
            parts.append(self.hccl_buffer.describe())
        return "; ".join(parts)
