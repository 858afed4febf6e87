"""The plugin's own DeepSeek-V4 class (DeepseekV4ForCausalLM): model.py, and its parts.

rope.py, norms.py: the interleaved partial rope and V4's RMS norms; compressor.py: the
compressed rows and the indexer's top-k; attention.py: one request's attention; moe.py;
hyper_connections.py; layers.py: a decoder layer; input_cache.py: the paged per-token
cache of each layer's attention inputs and its metadata; weight_names.py.
"""
