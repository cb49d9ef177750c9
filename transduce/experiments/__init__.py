"""Experiments made of the library's calls: the demo, the comparison with the recurrent baseline
(compare.py) and the Table 3 sweep (table3.py, sweep.py, sweep_report.py)."""
