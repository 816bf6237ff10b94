"""Shared limits on the Spark workloads people run: the pieces of ``benchmarks/bench_shared.py``.

``windows`` (pure: admitted events -> mean, worst 1-s window, stalls), ``kinds`` (the three ways a task can be
limited, run inside Spark tasks: throttlescope's helpers, a static split, a central Redis limiter), ``jobs``
(the Spark workloads), ``servers`` (a throwaway control plane and Redis on loopback).
"""
