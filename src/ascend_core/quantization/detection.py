"""Which quantization method a model uses: read from its files, or chosen by the user."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from ascend_core.errors import QuantizationError
from ascend_core.quantization.methods import (
    SELECTABLE,
    UNSUPPORTED,
    UNSUPPORTED_HINT,
    QuantMethod,
    selectable_names,
)
from ascend_core.quantization.modelslim import (
    DESCRIPTION_FILE,
    ModelSlimDescription,
    parse_description,
)
from ascend_core.suggest import did_you_mean
from ports.model_files import ModelFiles

CONFIG_FILE = "config.json"
_CONFIG_KEY = "quantization_config.quant_method"

# config.json `quant_method` values naming a served method.
_CONFIG_METHODS = {m.value: m for m in SELECTABLE}


class DecidedBy(enum.Enum):
    """What settled the method."""

    MODEL_FILES = "model files"
    USER_CHOICE = "user choice"
    NOTHING_FOUND = "nothing found"


@frozen
class Evidence:
    """Where a fact came from: a file (and key), or the user's setting."""

    source: str
    key: str | None = None
    value: str | None = None

    def __str__(self) -> str:
        if self.key is not None:
            return f'{self.source}: {self.key} = "{self.value}"'
        if self.value is not None:
            return f"{self.source}: {self.value}"
        return f"{self.source} present"


@frozen
class QuantDetection:
    """The method, what decided it, what the files said, and anything the operator should know.

    description: the parsed ModelSlim description when the model has one.
    """

    method: QuantMethod
    decided_by: DecidedBy
    evidence: Evidence
    files_say: QuantMethod
    warnings: tuple[str, ...] = ()
    description: ModelSlimDescription | None = None

    def explain(self) -> str:
        line = f"quantization: {self.method.value} ({self.decided_by.value}: {self.evidence})"
        return "\n".join([line, *(f"  warning: {w}" for w in self.warnings)])


@frozen
class _FilesVerdict:
    method: QuantMethod
    evidence: Evidence
    warnings: tuple[str, ...]
    description: ModelSlimDescription | None
    has_quantization_config: bool


def _config_method(config: Any) -> tuple[QuantMethod, Evidence] | None:
    """The method config.json names, None when it names none; errors for what it cannot be."""
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise QuantizationError(
            f"{CONFIG_FILE} holds a JSON {type(config).__name__}, not an object.",
            "Use the model's original config.json (from its hub repository).",
        )
    qconfig = config.get("quantization_config")
    if qconfig is None:
        return None
    if not isinstance(qconfig, Mapping):
        raise QuantizationError(
            f"{CONFIG_FILE}: quantization_config is a JSON {type(qconfig).__name__}, "
            "not an object.",
            "Use the config.json the quantization tool wrote, or remove quantization_config "
            "if the weights are not quantized.",
        )
    raw = qconfig.get("quant_method")
    if not isinstance(raw, str):
        found = "missing" if raw is None else f"a JSON {type(raw).__name__}"
        raise QuantizationError(
            f"{CONFIG_FILE}: {_CONFIG_KEY} is {found}, so the method cannot be read.",
            f"Set it to one of {', '.join(selectable_names())}, or pass --quantization.",
        )
    label = raw.strip().lower()
    evidence = Evidence(CONFIG_FILE, _CONFIG_KEY, raw)
    if label in _CONFIG_METHODS:
        return _CONFIG_METHODS[label], evidence
    if label in UNSUPPORTED:
        raise QuantizationError(
            f'{evidence}: "{raw}" kernels exist only for CUDA/ROCm in vLLM, not for Ascend.',
            UNSUPPORTED_HINT,
        )
    raise QuantizationError(
        f'{evidence}: "{raw}" is not a quantization method this plugin knows.',
        f"Served: {', '.join(selectable_names())}."
        f"{did_you_mean(label, selectable_names())}",
    )


def _read_files(files: ModelFiles) -> _FilesVerdict:
    raw_description = files.read_json(DESCRIPTION_FILE)
    description = None if raw_description is None else parse_description(raw_description)
    from_config = _config_method(files.read_json(CONFIG_FILE))
    has_qconfig = from_config is not None

    if description is not None:
        warnings = []
        if from_config is not None and from_config[0] is not QuantMethod.ASCEND:
            warnings.append(
                f"{DESCRIPTION_FILE} and {from_config[1]} disagree; the ModelSlim "
                "description wins because it names a scheme for every weight."
            )
        value = f"model_quant_type = {description.model_quant_type}"
        evidence = Evidence(DESCRIPTION_FILE, None, value if description.model_quant_type else None)
        return _FilesVerdict(
            QuantMethod.ASCEND, evidence, tuple(warnings), description, has_qconfig
        )

    if from_config is not None:
        method, evidence = from_config
        if method is QuantMethod.ASCEND:
            raise QuantizationError(
                f"{evidence} names a ModelSlim export, but {files.location} has no "
                f"{DESCRIPTION_FILE}.",
                f"Copy {DESCRIPTION_FILE} from the ModelSlim output next to the weights.",
            )
        return _FilesVerdict(method, evidence, (), None, has_qconfig)

    nothing = Evidence(
        "model files", None, f"no {DESCRIPTION_FILE} and no quantization_config in {CONFIG_FILE}"
    )
    return _FilesVerdict(QuantMethod.NONE, nothing, (), None, has_qconfig)


def _parse_choice(user_choice: str) -> QuantMethod:
    label = user_choice.strip().lower()
    for method in SELECTABLE:
        if method.value == label:
            return method
    where = f"quantization={user_choice!r}"
    if label in UNSUPPORTED:
        raise QuantizationError(
            f"{where}: vLLM's {label} kernels exist only for CUDA/ROCm, not for Ascend.",
            UNSUPPORTED_HINT,
        )
    raise QuantizationError(
        f"{where} is not a quantization method this plugin serves.",
        f"Use one of {', '.join(selectable_names())}, or leave it unset to detect it from "
        f"the model files.{did_you_mean(label, selectable_names())}",
    )


def detect_quantization(files: ModelFiles, user_choice: str | None) -> QuantDetection:
    """The quantization method of the model in `files`.

    A ModelSlim description means `ascend`; else config.json's
    quantization_config.quant_method names it; else the model is not quantized.
    An explicit `user_choice` wins, with a warning when the files say otherwise.
    """
    seen = _read_files(files)
    description = seen.description

    if user_choice is None or not user_choice.strip():
        return QuantDetection(
            seen.method, _decided(seen), seen.evidence, seen.method, seen.warnings, description
        )

    chosen = _parse_choice(user_choice)
    evidence = Evidence("user choice", "quantization", user_choice)
    if chosen is QuantMethod.ASCEND and description is None:
        raise QuantizationError(
            f"quantization='ascend' needs {DESCRIPTION_FILE}, and {files.location} has none.",
            f"Copy {DESCRIPTION_FILE} from the ModelSlim output next to the weights, or drop "
            "--quantization to detect the method from the files.",
        )
    if chosen is QuantMethod.COMPRESSED_TENSORS and not seen.has_quantization_config:
        raise QuantizationError(
            f"quantization='compressed-tensors' needs quantization_config in {CONFIG_FILE}, "
            f"and {files.location} has none.",
            "Use the config.json llm-compressor wrote, or drop --quantization.",
        )
    warnings = list(seen.warnings)
    if chosen is not seen.method:
        warnings.append(
            f"quantization={user_choice!r} was chosen, but the files say "
            f"{seen.method.value} ({seen.evidence}); the choice wins."
        )
    return QuantDetection(
        chosen, DecidedBy.USER_CHOICE, evidence, seen.method, tuple(warnings), description
    )


def _decided(seen: _FilesVerdict) -> DecidedBy:
    return DecidedBy.NOTHING_FOUND if seen.method is QuantMethod.NONE else DecidedBy.MODEL_FILES
