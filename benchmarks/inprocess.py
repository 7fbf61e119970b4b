"""In-process RunFunction: latency percentiles and CPU time per call.

Calls go through each servicer's ``RunFunction`` coroutine (driven without an
event loop: it never awaits), so the function's own logging set-up is on the
measured path exactly as under ``serve``.
"""

from __future__ import annotations

import functools
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from crossplane.function import logging as sdklogging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from benchmarks.floors import FloorRunner
from function import fn

Runner = Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse]


def configure_logging() -> None:
    """What ``serve`` configures (INFO)."""
    sdklogging.configure(level=sdklogging.Level.INFO)


def _drive(servicer: Any) -> Runner:
    def call(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        coro = servicer.RunFunction(req, None)
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value
        msg = "RunFunction awaited something"
        raise RuntimeError(msg)

    return call


def runners() -> dict[str, Runner]:
    """The function and the two floors, each through its gRPC servicer."""
    return {
        "function": _drive(fn.FunctionRunner()),
        "noop": _drive(FloorRunner("noop")),
        "echo": _drive(FloorRunner("echo")),
    }


# Caches whose keys every XR of a Composition shares (the step input, the AWS
# partition): warm in any fleet. Every other cache is keyed per XR (its spec, its
# cluster's key, its roles) and is cleared for the cold variant.
SHARED_CACHES = frozenset(
    {
        "_parse_input",
        "lbc_policy",
        "_lbc_policy_aws",
        "_lbc_versions",
        "union_policy",
        # function/compat.py: the compatibility table and its lookups
        "_table",
        "supported",
        # gate, node and port factories: their arguments are the code's own declarations
        "after",
        "role_ready",
        "role_nodes",
        "release_gates",
        "_ports",
    }
)


def function_caches(*, per_xr_only: bool = False) -> list[Any]:
    """The functools caches in the function's modules (``per_xr_only``: not the shared ones)."""
    caches = []
    for name, mod in sorted(sys.modules.items()):
        if not (name == "function" or name.startswith("function.")) or mod is None:
            continue
        for attr in vars(mod).values():
            if callable(attr) and hasattr(attr, "cache_clear") and hasattr(attr, "cache_info"):
                if per_xr_only and getattr(attr, "__name__", "") in SHARED_CACHES:
                    continue
                if attr not in caches:
                    caches.append(attr)
    return caches


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``, nearest rank."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def measure(
    run: Runner,
    requests: list[fnv1.RunFunctionRequest],
    *,
    iterations: int,
    warmup: int = 20,
    cold: bool = False,
) -> dict[str, Any]:
    """Run the request sequence ``iterations`` times: per-sequence latency and CPU.

    ``requests`` is one request, or every request of one reconcile (then a
    sample is the whole required-resources loop). ``cold`` clears the
    function's per-XR caches before every sample: what each of many XRs pays
    when those caches hold fewer entries than there are XRs (round-robin
    reconciles through an LRU); caches every XR shares stay warm.
    """
    caches = function_caches(per_xr_only=True) if cold else []
    for _ in range(warmup):
        for r in requests:
            run(r)
    lat: list[float] = []
    clear = functools.partial(_clear, caches)
    if iterations >= 50:
        gc.collect()  # start from a clean heap (28 ms: not for tiny runs)
    cpu_total = 0.0
    wall0 = time.perf_counter()
    for _ in range(iterations):
        clear()
        c0 = time.process_time()
        t0 = time.perf_counter()
        for r in requests:
            run(r)
        t1 = time.perf_counter()
        cpu_total += time.process_time() - c0
        lat.append(t1 - t0)
    wall = time.perf_counter() - wall0
    return {
        "iterations": iterations,
        "requests_per_sample": len(requests),
        "p50_us": round(pct(lat, 0.5) * 1e6, 1),
        "p99_us": round(pct(lat, 0.99) * 1e6, 1),
        "mean_us": round(statistics.fmean(lat) * 1e6, 1),
        "cpu_us_per_call": round(cpu_total / iterations * 1e6, 1),
        "wall_s": round(wall, 3),
    }


def _clear(caches: list[Any]) -> None:
    for c in caches:
        c.cache_clear()


def slope(points: dict[int, float]) -> float:
    """Least-squares slope of value against count."""
    xs = list(points)
    ys = [points[x] for x in xs]
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0
