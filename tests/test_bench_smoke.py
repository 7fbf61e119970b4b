"""The benchmark harness works end to end: tiny counts, no timing asserted.

In process (function and floors, scaling) and one short loopback gRPC run of the
real ``function-cluster-plugin serve``; a few seconds. ``make bench`` runs it for real.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import run as bench
from benchmarks import workload
from function import accept, fn


def test_harness_end_to_end(tmp_path: Path) -> None:
    out, md = tmp_path / "latest.json", tmp_path / "BENCHMARKS.md"
    results = bench.main(
        [
            "--quick",
            "--sections",
            "inprocess,scaling,loopback",
            "--kinds",
            "function",
            "--modes",
            "insecure",
            "--json",
            str(out),
            "--markdown",
            str(md),
        ]
    )
    assert json.loads(out.read_text())["workload"] == results["workload"]
    w = results["workload"]
    assert w["full_observed_resources"] >= 30
    assert w["reconcile_iterations"] >= 2
    for case in ("full", "first", "reconcile"):
        assert set(results["inprocess"][case]) >= {"function", "noop", "echo"}
    assert "function_cold" in results["inprocess"]["full"]
    assert set(results["scaling"]["by_plugins"]["function"]) >= {"1", "5"}

    served = results["loopback"]["function/insecure"]
    for load in [*served["full"].values(), served["first"], *served["reconcile"].values()]:
        assert load["errors"] == {}, load["errors"]  # also: every answer as long as in process
        assert load["ok"] == load["calls"] > 0
    assert served["exit_code"] is not None

    text = md.read_text()
    for heading in ("## In-process RunFunction", "## Loopback gRPC", "## How cost grows"):
        assert heading in text


def test_identical_requests_get_byte_identical_answers() -> None:
    """What the optimisations must keep: same request, same bytes (warm caches or not)."""
    req = workload.build(resource_counts=()).full.final
    first = fn.run(req)
    again = fn.run(req)
    assert again.SerializeToString() == first.SerializeToString()
    accept.cache_clear()
    cold = fn.run(req)
    assert cold.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
