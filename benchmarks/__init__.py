"""throttlescope's performance and accuracy harness: ``python -m benchmarks``.

Every ``benchmarks/bench_*.py`` exposes ``run(quick: bool = False) -> list[dict]``; see ``__main__.py`` for the
runner and ``common.py`` for the row format.
"""
