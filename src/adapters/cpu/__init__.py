"""The host device adapter: the ports in plain torch, and the reference semantics of every op."""
