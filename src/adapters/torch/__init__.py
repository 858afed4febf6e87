"""Port implementations both device adapters share, in plain torch: each module is named
after the port it serves. `adapters.cpu` and `adapters.npu` import this room; it imports
neither (import-linter)."""
