"""The plugin's domain core: every decision as a pure function over plain data.

Imports nothing but the standard library, attrs and `ports`.
"""
