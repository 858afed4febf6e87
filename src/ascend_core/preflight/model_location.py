"""Whether a model name can only mean a local directory, and the error when it is missing.

vLLM reads a model name that is a directory from disk, and anything else as a Hugging
Face Hub id, whose download it retries for about a minute before a traceback. A name no
Hub id can be is a local path, and a missing one is refused at once.
"""

from __future__ import annotations

from ascend_core.errors import ConfigError

# Starts of a name that is a file-system path, never a Hub id.
PATH_STARTS = ("/", "./", "../", "~")
# First parts of a path that cannot be a Hub namespace: hf.co/models, /datasets and
# /spaces are the Hub's own pages, so no user or organisation has these names.
RESERVED_NAMESPACES = frozenset({"models", "datasets", "spaces"})
# Names vLLM reads from other stores (s3://, gs://, ...): never local.
_URL = "://"


def names_local_path(name: str) -> bool:
    """Whether `name` can only be a local path: it starts like one, has more parts than
    a Hub id's `namespace/name`, or its namespace is one the Hub reserves (`models/x`)."""
    if _URL in name:
        return False
    if name in (".", "..") or name.startswith(PATH_STARTS):
        return True
    parts = name.strip("/").split("/")
    return len(parts) > 2 or (len(parts) == 2 and parts[0] in RESERVED_NAMESPACES)


class MissingModelError(ConfigError):
    """The model is named by a local path, and nothing is there."""


def missing_model_error(name: str) -> MissingModelError:
    """The error for a local model path with no directory behind it."""
    return MissingModelError(
        f"{name} does not exist: the model is a local path (no Hugging Face id looks "
        "like it), so there is nothing to download either.",
        "pass the directory that holds the model's config.json and weights (download it "
        "first, e.g. `hf download <org>/<name> --local-dir <dir>`), or a Hub id "
        "`<org>/<name>`",
    )
