"""The `attention` section: which backend the core picks for this model and target."""

from __future__ import annotations

from adapters.doctor.plan.items import PASS, failed
from adapters.doctor.plan.model import Target
from ascend_core.attention import AttentionRequest, select_attention_backend
from ascend_core.deployment import ModelFacts
from ascend_core.env_registry import TRAINING_CONSISTENCY, read_env
from ascend_core.errors import AscendError
from ascend_core.preflight import CheckItem
from ports.environment import Environment


def attention_items(model: ModelFacts, target: Target, env: Environment) -> list[CheckItem]:
    """The chosen attention backend and the core's reason, or why none fits."""
    try:
        consistency = read_env(env).get(TRAINING_CONSISTENCY)
    except AscendError:
        consistency = False  # `check` reports the bad value
    request = AttentionRequest(
        use_mla=model.use_mla,
        use_sparse=model.use_sparse,
        chip_family=target.chip_family,
        device_kind=target.kind,
        use_compressed=model.compressed_attention,
        training_consistency=consistency,
        model=model.architecture,
    )
    try:
        choice = select_attention_backend(request)
    except AscendError as error:
        return failed("backend", error)
    return [CheckItem("backend", PASS, f"{choice.kind.value}: {choice.reason}")]
