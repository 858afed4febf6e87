"""Step: settle the quantization method from the user's choice and the model files."""

from __future__ import annotations

from ascend_core.deployment import Deployment
from ascend_core.plan import fields
from ascend_core.plan.result import Draft


def resolve_quantization(deployment: Deployment, draft: Draft) -> Draft:
    """The user's choice wins over detection; a disagreement is a warning, never silent."""
    user = deployment.user_quantization
    detected = deployment.detected_quantization
    if user is None and detected is None:
        return draft.decide(quantization=None)
    if user is None:
        return draft.change(
            fields.QUANTIZATION,
            None,
            detected,
            f"unset; the model files describe {detected} quantization",
        ).decide(quantization=detected)
    if detected is not None and detected != user:
        draft = draft.warn(
            f"model_config.quantization={user!r} (--quantization) differs from what the model "
            f"files describe ({detected!r}); using {user!r} as asked."
        )
    elif detected is None:
        draft = draft.warn(
            f"model_config.quantization={user!r} (--quantization) is set but the model files "
            "describe no quantization; using it as asked."
        )
    return draft.decide(quantization=user)
