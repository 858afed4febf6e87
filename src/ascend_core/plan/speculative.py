"""Step: speculative decoding's limits, checked before any weight loads."""

from __future__ import annotations

from collections.abc import Mapping

from attrs import frozen

from ascend_core.deployment import Deployment, DraftFacts, SpeculativeSettings
from ascend_core.errors import ConfigError
from ascend_core.plan.result import Draft

# The NPU's fused attention op (npu_fused_infer_attention_score) takes at most 16 query
# tokens per request in a decode step, and a speculative step verifies 1 + k of them (the
# reference plugin's limit). The host keeps the same limit, so that a deployment planned
# on the host moves to the NPU unchanged.
MAX_QUERY_TOKENS_PER_DECODE = 16
# Methods whose proposer runs a draft model of its own (speculative_config.model).
DRAFT_MODEL_METHODS = frozenset({"eagle", "eagle3", "draft_model"})


@frozen
class ProposerPackage:
    """A proposer vLLM imports from a package of its own, and how this plugin installs it."""

    what: str  # how messages name it
    symbol: str  # what must import, `module:Attr` (ports.upstream.Upstream.has_symbol)
    requirement: str  # the pip requirement the `extra` of pyproject.toml holds
    extra: str


# vLLM's SuffixDecodingProposer imports Arctic Inference's suffix trees, a C++ extension
# (nanobind) built from an sdist; built in an isolated environment it would fetch PyPI's
# CUDA torch, so it is built against the installed torch instead.
PROPOSER_PACKAGES: Mapping[str, ProposerPackage] = {
    "suffix": ProposerPackage(
        what="Arctic Inference's suffix trees",
        symbol="arctic_inference.suffix_decoding:SuffixDecodingCache",
        requirement="arctic-inference==0.3.0",
        extra="spec",
    ),
}


def check_speculative(deployment: Deployment, draft: Draft) -> Draft:
    """k at least 1, and 1 + k query tokens per decoding request within the op's limit;
    a draft model that fits the target (TP, heads, vocabulary); MTP layers for `mtp`.

    Which methods each device serves is the support matrix's (check_support)."""
    spec = deployment.speculative
    if not spec.method:
        return draft
    k = spec.num_speculative_tokens
    if k < 1:
        draft = draft.fail(
            ConfigError(
                f"speculative_config method {spec.method!r} with num_speculative_tokens={k}: "
                "speculative decoding proposes at least one token per step.",
                "set num_speculative_tokens to 1 or more, or drop speculative_config",
            )
        )
    elif k + 1 > MAX_QUERY_TOKENS_PER_DECODE:
        draft = draft.fail(
            ConfigError(
                f"speculative_config num_speculative_tokens={k}: a decode step would verify "
                f"{k + 1} query tokens per request, more than the "
                f"{MAX_QUERY_TOKENS_PER_DECODE} the NPU's fused attention op takes "
                "(num_speculative_tokens + 1 <= 16).",
                f"set num_speculative_tokens to at most {MAX_QUERY_TOKENS_PER_DECODE - 1}",
            )
        )
    for error in _draft_model_errors(spec, deployment.parallel.tp) + _mtp_errors(
        spec, deployment.model.architecture
    ):
        draft = draft.fail(error)
    package_error = proposer_package_error(spec.method, spec.proposer_installed)
    if package_error is not None:
        draft = draft.fail(package_error)
    return draft


def proposer_package_error(method: str, installed: bool | None) -> ConfigError | None:
    """A method whose proposer package does not import (installed False; None: not
    asked) is refused before load, with how to install it."""
    package = PROPOSER_PACKAGES.get(method.strip().lower())
    if package is None or installed is not False:
        return None
    module = package.symbol.partition(":")[0]
    return ConfigError(
        f"speculative_config method {method!r} proposes with {package.what} ({module}), "
        f"which does not import here: {package.requirement.partition('=')[0]} is not "
        "installed (or its C++ extension was built for another Python).",
        f"install the plugin's `{package.extra}` extra, built against the installed torch "
        "without build isolation (isolation would fetch PyPI's CUDA torch): pip install "
        f"nanobind==2.9.2 cmake ninja wheel, then pip install --no-build-isolation "
        f"'{package.requirement}' (the Makefile's venv does both)",
    )


def _draft_model_errors(spec: SpeculativeSettings, target_tp: int) -> list[ConfigError]:
    """The draft model against the target: its TP, heads over that TP, its vocabulary."""
    facts = spec.draft
    if spec.method not in DRAFT_MODEL_METHODS or facts is None:
        return []
    errors = []
    where = f"speculative_config method {spec.method!r}: the draft model ({facts.architecture})"
    if facts.tp != target_tp:
        errors.append(
            ConfigError(
                f"{where} runs with draft_tensor_parallel_size={facts.tp}, the target with "
                f"tensor_parallel_size={target_tp}; this plugin serves a draft sharded like "
                "its target only (vLLM's replicated draft of TP 1 under a wider target is "
                "not built or tested on these devices).",
                f"set draft_tensor_parallel_size to {target_tp} (or leave it unset)",
            )
        )
    if facts.num_attention_heads % facts.tp or (
        facts.num_kv_heads % facts.tp and facts.tp % facts.num_kv_heads
    ):
        errors.append(
            ConfigError(
                f"{where} has {facts.num_attention_heads} attention heads and "
                f"{facts.num_kv_heads} KV heads, which do not split over tp={facts.tp}.",
                "use a draft whose head counts the tensor-parallel size divides",
            )
        )
    target_vocab = spec.target_vocab_size
    if target_vocab is not None and facts.vocab_size != target_vocab:
        errors.append(
            ConfigError(
                f"{where} has a vocabulary of {facts.vocab_size} tokens, the target "
                f"{target_vocab}; its proposals are the target's token ids, so both must "
                "have the same tokenizer.",
                "use a draft trained with the target's tokenizer",
            )
        )
    if (
        target_vocab is not None
        and facts.draft_vocab_size is not None
        and facts.draft_vocab_size > target_vocab
    ):
        errors.append(
            ConfigError(
                f"{where} has a draft_vocab_size of {facts.draft_vocab_size}, more than "
                f"the target's {target_vocab} tokens.",
                "use a draft whose draft_vocab_size is at most the target's vocabulary",
            )
        )
    return errors


def _mtp_errors(spec: SpeculativeSettings, architecture: str) -> list[ConfigError]:
    error = mtp_layers_error(spec.method or "", architecture, spec.mtp_layers)
    return [] if error is None else [error]


def mtp_layers_error(method: str, architecture: str, mtp_layers: int | None) -> ConfigError | None:
    """`mtp` drafts with the model's own multi-token-prediction layers: none (0) is an
    error, None (not known) is not."""
    if not (method == "mtp" or method.endswith("_mtp")) or mtp_layers is None:
        return None
    if mtp_layers > 0:
        return None
    return ConfigError(
        f"speculative_config method {method!r}: the model ({architecture}) has no "
        "multi-token-prediction layers (its config's num_nextn_predict_layers is 0 or "
        "missing), and MTP drafts with them.",
        "serve a checkpoint that ships its MTP layers (e.g. DeepSeek-V3/R1), or use "
        "another method (ngram, or eagle3 with a draft model)",
    )


def draft_layer_facts(spec: SpeculativeSettings) -> tuple[int, DraftFacts | None]:
    """The layers the draft adds to the KV cache: (layers shaped as the target's, a draft
    model of another shape). MTP's layers are the target's own kind."""
    method = spec.method or ""
    if method == "mtp" or method.endswith("_mtp"):
        return (spec.mtp_layers or 0), None
    if method in DRAFT_MODEL_METHODS:
        return 0, spec.draft
    return 0, None
