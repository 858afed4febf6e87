"""Ports: the interfaces the core and the adapters talk through, and the plain data crossing them."""
