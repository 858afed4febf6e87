"""vLLM's quantization config for ModelSlim exports (`ascend`) and its int8 linear methods."""
