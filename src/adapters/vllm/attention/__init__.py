"""The paged attention backend vLLM runs on our devices; the math goes through the ops port."""
