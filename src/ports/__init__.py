"""Ports: the interfaces the core and adapters talk through, and the data crossing them."""
