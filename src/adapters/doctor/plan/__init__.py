"""The sections of `ascend-doctor plan`, one module each; `assemble` puts them together."""
