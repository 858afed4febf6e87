"""Host-side adapters of the driven ports: environment, installed packages, model files."""

from adapters.system.environment import OsEnvironment
from adapters.system.model_files import LocalModelFiles, ModelFilesError
from adapters.system.upstream import MetadataUpstream

__all__ = ["LocalModelFiles", "MetadataUpstream", "ModelFilesError", "OsEnvironment"]
