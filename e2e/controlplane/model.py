"""The project's own model (the in-memory ``InMemoryCrossplane``) run on what the real control plane holds.

The tests compare the real system with it on identical inputs: the XR as the API server
stores it (schema defaults applied), the Cluster API objects and Secrets as the driver
created them, and the Composition's step input.

``dependencies`` derives, from the function itself, what each composed resource waits for
before it is first emitted: with everything observed Ready except one resource ``D`` (or
with the control plane not yet initialized, or not yet available) and ``N`` not yet
observed, is ``N`` emitted? If not, ``N``'s gates (or the facts its body needs) depend on
``D``. No hand-written list: whatever the add-on modules declare is what is checked
against Crossplane's real order of creation.
"""

from __future__ import annotations

import copy
from typing import Any

from function import fn
from function_tools.in_memory_crossplane import Composed, InMemoryCrossplane

CONTROL_PLANE_INITIALIZED = "control plane initialized"
CONTROL_PLANE_AVAILABLE = "control plane available"
SERVER_FIELDS = ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp")


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """An object without the server's bookkeeping."""
    out = copy.deepcopy(obj)
    for key in SERVER_FIELDS:
        out.get("metadata", {}).pop(key, None)
    return out


def step_input(composition: dict[str, Any]) -> dict[str, Any]:
    """The (only) pipeline step's input."""
    (step,) = composition["spec"]["pipeline"]
    return dict(step["input"])


def world(
    xr: dict[str, Any],
    required: list[dict[str, Any]],
    composition: dict[str, Any],
    observed: dict[str, dict[str, Any]] | None = None,
) -> InMemoryCrossplane:
    """A InMemoryCrossplane holding the real XR and required objects, and ``observed`` (resource name ->
    real object) as composed resources observed Ready."""
    w = InMemoryCrossplane(
        clean(xr),
        [clean(o) for o in required],
        step_input=step_input(composition),
        ready_delay=1,
        runner=fn.run,
    )
    for name, obj in (observed or {}).items():
        body = clean(obj)
        body.pop("status", None)
        w.composed[name] = Composed(name, body, created_at=0, ready=True)
    return w


def converge(w: InMemoryCrossplane, steps: int = 40) -> InMemoryCrossplane:
    """Reconcile until the XR is Ready, no chart upgrade is in flight and a reconcile changes
    nothing (or ``steps`` run out)."""
    for _ in range(steps):
        rec = w.reconcile()
        assert rec.fatal is None, rec.fatal
        settled = w.xr.get("status", {}).get("upgrade") in (None, "Healthy")
        if w.xr_ready and settled and not rec.created and not rec.deleted:
            break
    return w


def desired_names(w: InMemoryCrossplane) -> set[str]:
    rsp, _ = w.call()
    return set(rsp.desired.resources)


def dependencies(
    xr: dict[str, Any],
    required: list[dict[str, Any]],
    composition: dict[str, Any],
    observed: dict[str, dict[str, Any]],
) -> dict[str, set[str]]:
    """Resource name -> the resources (and control-plane states) its first emission waits for.

    Usages are left out: they are not gated, they follow both their ends.
    """
    base = world(xr, required, composition, observed)
    base.set_control_plane(initialized=True, available=True)
    nodes = sorted(n for n in observed if not n.startswith("usage-"))
    out: dict[str, set[str]] = {}
    for node in nodes:
        without = {k: v for k, v in observed.items() if k != node}
        deps: set[str] = set()
        for other in nodes:
            if other == node:
                continue
            w = world(xr, required, composition, without)
            w.composed[other].ready = False
            if node not in desired_names(w):
                deps.add(other)
        for state, (initialized, available) in (
            (CONTROL_PLANE_INITIALIZED, (False, False)),
            (CONTROL_PLANE_AVAILABLE, (True, False)),
        ):
            w = world(xr, required, composition, without)
            w.set_control_plane(initialized=initialized, available=available)
            if node not in desired_names(w):
                deps.add(state)
        # Sanity: with everything ready the node is emitted, or the probe says nothing.
        w = world(xr, required, composition, without)
        assert node in desired_names(w), f"{node} is not emitted even with everything Ready"
        out[node] = deps
    # "available" implies "initialized": keep only the stronger state per node.
    for deps in out.values():
        if CONTROL_PLANE_AVAILABLE in deps:
            deps.discard(CONTROL_PLANE_INITIALIZED)
    return out
