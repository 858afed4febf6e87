"""The core's typed errors: each says what is wrong, where it came from, and the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class AscendError(Exception):
    """Base of every error the core raises on purpose.

    `what` says what is wrong (naming the key, variable or file), `hint` what
    to do about it. str() gives both, so a log line is complete on its own.
    """

    def __init__(self, what: str, hint: str = "") -> None:
        self.what = what
        self.hint = hint
        super().__init__(f"{what} Fix: {hint}" if hint else what)


class ConfigError(AscendError):
    """An `additional_config` key or a deployment setting is invalid."""


class EnvironmentVariableError(AscendError):
    """A VLLM_ASCEND_* variable has a value its type does not accept."""


class BackendSelectionError(AscendError):
    """No attention backend serves the requested combination."""


class QuantizationError(AscendError):
    """A quantization description is inconsistent or unsupported."""


class CompatibilityError(AscendError):
    """Installed versions do not match a supported set."""


class DeviceUnavailableError(AscendError):
    """The requested device cannot serve on this machine."""


class UnsupportedFeatureError(ConfigError):
    """The model or deployment uses a feature the support matrix refuses on this device."""

    def __init__(self, what: str, hint: str = "", feature: str = "", device: str = "") -> None:
        super().__init__(what, hint)
        self.feature = feature  # the support matrix's Feature name
        self.device = device  # the DeviceKind value


class PlanErrors(AscendError):
    """Several errors found together, so the operator fixes them in one pass."""

    def __init__(self, errors: Sequence[AscendError]) -> None:
        self.errors = tuple(errors)
        lines = [str(e) for e in self.errors]
        super().__init__(
            f"{len(lines)} problem(s) in the configuration:\n- " + "\n- ".join(lines)
        )


def refuse_unsupported(
    present: Mapping[str, bool], what: str, hint: str, error: type[AscendError]
) -> None:
    """Raise `error` naming every feature in `present` whose flag is set, if any.

    what: the sentence before the names, e.g. "The Ascend MLA backend does not support".
    """
    names = [name for name, flag in present.items() if flag]
    if names:
        raise error(f"{what}: {', '.join(names)}.", hint)
