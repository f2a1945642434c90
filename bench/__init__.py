"""Sluice benchmarks: ``python -m bench [all|scheduling-basic|gang]``, printing JSON.

See ``bench/README.md``. Not timed tests: each workload runs in its own subprocess and
prints one JSON object (one line) of figures.
"""
