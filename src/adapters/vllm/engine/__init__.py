"""The engine process's side of the binding: entry points, the Platform, the configuration
use case, startup errors and the doctor's view of vLLM's arguments."""
