"""The rollout's request at 1,000 selected ClusterPlugins fits the gRPC limit production sets.

The rollout's function reads every selected XR on each call (Crossplane v2.4 cannot send only
some fields of a required resource), so its request grows with the fleet: about 6.4 KB per
converged ClusterPlugin with its status and Crossplane's resourceRefs. docs/fleet.md, "Rolling out
across a fleet", gives the figures (request size, CPU per call) and where it stops scaling.
"""

from __future__ import annotations

import copy
import re
import uuid
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function.rollout.spec import REQ_PLUGINS
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import example
from tests.test_fleet import STEP_INPUT, rollout

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ROOT / "examples" / "production" / "function.yaml"
FLEET = 1000
MIB = 1024 * 1024


def _converged_xr() -> dict[str, Any]:
    """A converged ClusterPlugin as Crossplane v2 sends it: status, resourceRefs and all."""
    xr, required = example("selfhosted-full")
    world = InMemoryCrossplane(xr, required, step_input=STEP_INPUT)
    world.run(15)
    assert world.xr_ready
    out = copy.deepcopy(world.xr)
    out["metadata"]["labels"] = {"fleet": "prod"}
    out["spec"]["crossplane"]["resourceRefs"] = [
        {"apiVersion": c.obj["apiVersion"], "kind": c.obj["kind"], "name": c.obj["metadata"]["name"]}
        for c in world.composed.values()
    ]
    out["status"]["rollout"] = {
        "name": "lbc-3-5",
        "revision": "0123456789ab",
        "wave": "wave-2",
        "phase": "Healthy",
        "healthySince": "2026-01-01T00:00:00Z",
    }
    return out


def _request(n: int) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(rollout())
    xr = _converged_xr()
    items = req.required_resources[REQ_PLUGINS].items
    for i in range(n):
        xr["metadata"]["namespace"] = f"team-{i:04d}"
        xr["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"clusterplugin/{i}"))
        items.add().resource.update(xr)
    return req


def _production_limit_mib() -> int:
    found = re.search(r"--max-recv-message-size=(\d+)", PRODUCTION.read_text())
    assert found is not None
    return int(found.group(1))


def test_a_thousand_selected_clusterplugins_fit_the_production_limit_and_are_all_read() -> None:
    req = _request(FLEET)
    size = req.ByteSize()
    # Above the 4 MiB default of grpc (and of serve): production raises it.
    assert 4 * MIB < size < _production_limit_mib() * MIB
    rsp = fn.run(req, now=float(InMemoryCrossplane.START))
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    counts = rsp.desired.composite.resource["status"]["counts"]
    assert counts["selected"] == FLEET
    # The first wave (no canary cluster carries ring=canary here) admits 25% of them.
    assert counts["admitted"] == FLEET // 4
