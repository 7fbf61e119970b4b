"""The plan written into the response (``fn`` runs it after the planner).

Desired composed resources, the XR's status, conditions, results and the TTL. Releases day two
decides are built straight in the response (``DesiredSlots.struct_for``, given to the planner as
``CallContext.struct_for``): a Release is ~700 bytes and seven a call were copied from Structs of
their own, a copy that cost 1.2% of a converged call (benchmarks/OPTIMISATIONS.md, #23).
"""

from __future__ import annotations

import math
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from function import structs
from function.flavour import carried_over
from function.plan import Plan
from function.step_input import StepInput

_CONDITION_STATUS = {
    "True": fnv1.STATUS_CONDITION_TRUE,
    "False": fnv1.STATUS_CONDITION_FALSE,
    "Unknown": fnv1.STATUS_CONDITION_UNKNOWN,
}
_SEVERITY = {"Normal": fnv1.SEVERITY_NORMAL, "Warning": fnv1.SEVERITY_WARNING}


class DesiredSlots:
    """The response's desired composed resources, where the planner may build Releases.

    ``struct_for`` (``CallContext.struct_for``) gives a resource's own Struct in the response,
    so the planner's writer has nothing to copy; a name an earlier pipeline step wrote gets a
    new one (``write`` replaces that step's whole, as before).
    """

    def __init__(self, rsp: fnv1.RunFunctionResponse) -> None:
        self.desired = rsp.desired.resources
        self.earlier = set(self.desired)  # from earlier pipeline steps
        self.taken: set[str] = set()

    def struct_for(self, name: str) -> struct_pb2.Struct:
        """The Struct to build composed resource ``name`` in."""
        if name in self.earlier:
            return struct_pb2.Struct()
        self.taken.add(name)
        return self.desired[name].resource

    def drop_unwritten(self, plan: Plan) -> None:
        """Remove what was built in the response but is not in ``plan``: not desired."""
        for name in self.taken.difference(d.name for d in plan.resources):
            del self.desired[name]


def write(
    rsp: fnv1.RunFunctionResponse, plan: Plan, step: StepInput, target: Any, slots: DesiredSlots
) -> None:
    """Write ``plan`` into ``rsp`` (``target``: where conditions and results go)."""
    desired = slots.desired
    for d in plan.resources:
        r = desired[d.name]
        if d.name in slots.earlier:
            r.resource.Clear()  # replaced whole, as before
        body = d.body
        if isinstance(body, dict):
            structs.fill(r.resource, body)
        elif body is not None:
            body(r.resource)  # a StructWriter (a Release built in it already writes nothing)
        elif d.carried is not None:
            r.resource.CopyFrom(carried_over(d.carried))
        r.ready = fnv1.READY_TRUE if d.ready else fnv1.READY_FALSE
    slots.drop_unwritten(plan)

    composite = rsp.desired.composite
    structs.update(composite.resource.fields["status"].struct_value, plan.status)
    if plan.held_back:
        composite.ready = fnv1.READY_FALSE

    for c in plan.conditions:
        rsp.conditions.append(
            fnv1.Condition(
                type=c.type,
                status=_CONDITION_STATUS[c.status],
                reason=c.reason,
                message=c.message,
                target=target,
            )
        )
    for res in plan.results:
        rsp.results.append(
            fnv1.Result(
                severity=_SEVERITY[res.severity],
                reason=res.reason,
                message=res.message,
                target=target,
            )
        )
    ttl = step.ttl.ready if plan.all_ready else step.ttl.waiting
    if plan.due_in is not None:  # a soak or an upgrade's deadline ends sooner
        ttl = max(1, min(ttl, math.ceil(plan.due_in)))
    rsp.meta.ttl.FromSeconds(ttl)
