"""Experiments made of the library's calls: the demo (and the Table 3 sweep, the comparisons)."""
