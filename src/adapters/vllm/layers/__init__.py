"""Our implementations of vLLM layers and layer methods, computing through the ops ports."""
