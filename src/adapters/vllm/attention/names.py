"""The AttentionBackendEnum members our backends are registered under, and their paths.

vLLM's Attention layer looks a backend up by its get_name() in that enum. Registration
(every vLLM process, registration.py) needs these strings alone, not the backends'
modules (the MLA one imports its metadata builder and latent cache port).
"""

from __future__ import annotations

BACKEND_NAME = "ASCEND_PAGED"
BACKEND_PATH = "adapters.vllm.attention.backend.PagedAttentionBackend"
MLA_BACKEND_NAME = "ASCEND_MLA"
MLA_BACKEND_PATH = "adapters.vllm.attention.mla.MlaAttentionBackend"
SPARSE_MLA_BACKEND_NAME = "ASCEND_SPARSE_MLA"
SPARSE_MLA_BACKEND_PATH = "adapters.vllm.attention.sparse_mla.SparseMlaAttentionBackend"
SPARSE_INDEXER_NAME = "ASCEND_SPARSE_INDEXER"
SPARSE_INDEXER_PATH = "adapters.vllm.attention.sparse_mla.SparseIndexerBackend"
# The indexer's opaque op (torch.ops.vllm.<name>): the step's keys and top-k selection.
SPARSE_INDEXER_OP = "ascend_sparse_indexer_select"
