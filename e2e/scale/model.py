"""The in-memory model's figure for a fleet, beside the real one: 1,000 XRs to Ready.

Each XR is ``examples/selfhosted-full`` in a namespace of its own (so the function's per-XR
caches see a thousand XRs, as a replica would), its control plane available, played by
``function_tools.in_memory_crossplane.InMemoryCrossplane`` with the example Composition's step
input, the worlds reconciled round robin (one reconcile of each in turn) until every XR is
Ready. What counts is what the function does: its calls (each reconcile runs Crossplane's
required-resources loop: several calls), and the CPU they take in process (``fn.run``, timed
with the thread's CPU clock; the model's own bookkeeping is not counted).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import yaml

from e2e.controlplane.harness import ROOT
from e2e.controlplane.model import step_input
from function import fn
from function_tools.in_memory_crossplane import InMemoryCrossplane

EXAMPLE_DIR = ROOT / "examples" / "selfhosted-full"


def _example() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    xr = yaml.safe_load((EXAMPLE_DIR / "xr.yaml").read_text())
    required = [yaml.safe_load(p.read_text()) for p in sorted((EXAMPLE_DIR / "required").glob("*.yaml"))]
    composition = yaml.safe_load((ROOT / "apis" / "v2" / "composition.yaml").read_text())
    return xr, required, step_input(composition)


def fleet(count: int = 1000, max_rounds: int = 60) -> dict[str, Any]:
    """Reconcile ``count`` worlds round robin until all are Ready; what the function did."""
    xr, required, inputs = _example()
    calls = 0
    cpu = 0.0

    def runner(req: Any) -> Any:
        nonlocal calls, cpu
        calls += 1
        started = time.thread_time()
        rsp = fn.run(req)
        cpu += time.thread_time() - started
        return rsp

    worlds = []
    for i in range(count):
        namespace = f"fleet-{i:04d}"
        mine = copy.deepcopy(xr)
        mine["metadata"]["namespace"] = namespace
        theirs = copy.deepcopy(required)
        for obj in theirs:
            obj["metadata"]["namespace"] = namespace
        world = InMemoryCrossplane(mine, theirs, step_input=inputs, runner=runner)
        world.set_control_plane(initialized=True, available=True)
        worlds.append(world)
    wall = time.monotonic()
    ready_after: list[int] = []
    rounds = 0
    pending = list(worlds)
    while pending and rounds < max_rounds:
        rounds += 1
        still = []
        for world in pending:
            rec = world.reconcile()
            assert rec.fatal is None, rec.fatal
            if world.xr_ready:
                ready_after.append(rounds)
            else:
                still.append(world)
        pending = still
    assert not pending, f"{len(pending)} XRs not Ready after {max_rounds} reconciles each"
    reconciles = sum(len(w.history) for w in worlds)
    return {
        "xrs": count,
        "reconciles_to_ready_per_xr": round(reconciles / count, 1),
        "function_calls": calls,
        "function_calls_per_xr": round(calls / count, 1),
        "function_cpu_s": round(cpu, 1),
        "function_cpu_ms_per_call": round(cpu / calls * 1000, 3),
        "function_cpu_ms_per_xr_to_ready": round(cpu / count * 1000, 1),
        "wall_s_in_process": round(time.monotonic() - wall, 1),
        "max_reconciles_to_ready": max(ready_after),
    }
