"""Benchmarks of the gather: the per-request loop against the vectorized plan.

Run ``python -m benchmarks`` (full) or ``python -m benchmarks --quick`` (small sizes,
correctness of the output only). Nothing in the package imports this folder.
"""
