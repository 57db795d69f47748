"""Readers of other implementations' weight files, and the mappings of their
names and layouts into this library's weights (arrays in, arrays out: no
backend, no model)."""
