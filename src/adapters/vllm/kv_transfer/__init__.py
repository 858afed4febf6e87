"""KV transfer between instances (P/D): the connector vLLM loads by name and the regions
it moves."""
