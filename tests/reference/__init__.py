"""Float64 NumPy references, written from the formulas in the issues.

They never call the library: they are what the library is checked against.
"""
