"""Readers of other implementations' weight files, and the name and layout
maps from them into this library's models (NumPy only: no backend, no model)."""
