"""What the tests assert about the real system, shared by both flavours."""

from __future__ import annotations

import copy
from typing import Any

from crossplane.function import resource

from e2e.controlplane import model
from e2e.controlplane.composite import Composite, condition_status, conditions
from function import upgrade
from function.flavour import KINDS
from function_tools.in_memory_crossplane import InMemoryCrossplane

STATUS_FIELDS = ("issuerURL", "oidcProviderARN", "roleARNs", "plugins", "clusterDeletion")
CROSSPLANE_CONDITIONS = {"Ready", "Synced", "Responsive"}


def world_for(
    composite: Composite,
    *,
    xr: dict[str, Any] | None = None,
    required: list[dict[str, Any]] | None = None,
    observed: dict[str, dict[str, Any]] | None = None,
) -> InMemoryCrossplane:
    """Our InMemoryCrossplane on the composite's real inputs (or the ones given)."""
    if xr is None:
        xr = composite.xr()
        assert xr is not None, "the XR is not there"
    return model.world(xr, composite.required() if required is None else required, composite.composition, observed)


def gone_without_efs(composite: Composite, observed: dict[str, dict[str, Any]]) -> set[str]:
    """What the in-memory Crossplane deletes when EFS is removed from the XR, on the same state:
    the names the real control plane must delete, and only EFS's."""
    world = world_for(composite, observed=observed)
    del world.xr["spec"]["storage"]["efs"]
    # Until the withdrawal is over: no deletion while what was deleted last could still hold
    # the next layer back (it stays in the in-memory API server for deletion_delay reconciles).
    quiet = 0
    while quiet <= world.deletion_delay + 2 and world.step < 60:
        quiet = 0 if world.reconcile().deleted else quiet + 1
    gone = set(observed) - set(world.composed)
    assert gone and all("efs" in n for n in gone), gone
    return gone


def subset_differences(want: Any, got: Any, path: str = "") -> list[str]:
    """Where ``got`` does not hold what ``want`` holds (extra keys in ``got`` are fine)."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: want an object, got {got!r}"]
        out = []
        for k, v in want.items():
            if k not in got:
                out.append(f"{path}.{k}: missing (want {v!r})")
            else:
                out += subset_differences(v, got[k], f"{path}.{k}")
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: want {want!r}, got {got!r}"]
        return [d for i, (w, g) in enumerate(zip(want, got, strict=True)) for d in subset_differences(w, g, f"{path}[{i}]")]
    if want != got:
        return [f"{path}: want {want!r}, got {got!r}"]
    return []


def _renamed(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


# Day two's record of a Release (phase, since when, the last healthy spec) and the plugins'
# upgrade fields follow each control plane's own clock: the world soaks the VPC CNI's restart
# with its IRSA role on reconciles of its clock, the real one in seconds. They are compared by the
# day-two tests of test_helm_kwok on the real provider-helm itself; here the rest must agree.
DAY_TWO_ANNOTATIONS = (upgrade.RECORD_ANNOTATION, upgrade.LAST_HEALTHY_ANNOTATION)
DAY_TWO_PLUGIN_FIELDS = ("upgrade", "upgradeSince", "lastHealthyVersion", "targetVersion", "message")


def _timeless(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` without day two's record."""
    annotations = obj.get("metadata", {}).get("annotations", {})
    if not any(a in annotations for a in DAY_TWO_ANNOTATIONS):
        return obj
    out = copy.deepcopy(obj)
    for a in DAY_TWO_ANNOTATIONS:
        out["metadata"]["annotations"].pop(a, None)
    return out


def _plugins_timeless(status: dict[str, Any]) -> dict[str, Any]:
    """``status`` without the plugins' day-two fields."""
    out = copy.deepcopy(status)
    for plugin in out.get("plugins") or []:
        for field in DAY_TWO_PLUGIN_FIELDS:
            plugin.pop(field, None)
    return out


def assert_converged_like_the_world(composite: Composite) -> None:
    """The XR is Ready and Synced; the composed set, every composed body the function asked
    for, the XR status and the function's conditions equal what our InMemoryCrossplane reaches from the
    same XR spec and cluster objects (the XR as Crossplane settles it: Composite.settled_xr)."""
    # A chart may still soak (the VPC CNI's restart with its IRSA role): compare once settled.
    composite.kube.wait_for(
        lambda: ((composite.xr() or {}).get("status") or {}).get("upgrade") in (None, "Healthy"),
        "no chart upgrade in flight",
        timeout_s=180,
    )
    xr = composite.settled_xr()
    assert xr is not None, "the XR is not there"
    assert condition_status(xr, "Ready") == "True", conditions(xr)
    assert condition_status(xr, "Synced") == "True", conditions(xr)
    real = composite.composed()

    fresh = copy.deepcopy(xr)
    fresh.pop("status", None)
    world = model.converge(world_for(composite, xr=fresh))
    assert world.xr_ready, world.xr.get("status")
    assert set(world.composed) == set(real), {
        "only in the InMemoryCrossplane": sorted(set(world.composed) - set(real)),
        "only in Crossplane": sorted(set(real) - set(world.composed)),
    }
    # Crossplane names what the function leaves unnamed (ChildName: <xr>-<sha256(xr uid +
    # resource name)[:12]>); the InMemoryCrossplane names it <xr>-<5 hex>. Usages name their ends by
    # the observed names, so the InMemoryCrossplane's are mapped to Crossplane's before comparing.
    renamed = {
        c.obj["metadata"]["name"]: real[name]["metadata"]["name"] for name, c in world.composed.items()
    }
    rsp, _ = world.call()
    problems = []
    for name, r in rsp.desired.resources.items():
        body = _renamed(resource.struct_to_dict(r.resource), renamed)
        problems += [f"{name}{d}" for d in subset_differences(_timeless(body), _timeless(real[name]))]
    assert not problems, "composed resources differ from the function's desired state:\n" + "\n".join(problems)

    want = _plugins_timeless({k: world.xr["status"].get(k) for k in STATUS_FIELDS})
    got = _plugins_timeless({k: xr["status"].get(k) for k in STATUS_FIELDS})
    assert got == want, {k: (got[k], want[k]) for k in STATUS_FIELDS if got[k] != want[k]}
    function_conditions = {
        c["type"]: (c["status"], c.get("reason"), c.get("message", ""))
        for c in world.xr["status"]["conditions"]
        if c["type"] not in CROSSPLANE_CONDITIONS and c["type"] != "ChartsHealthy"  # day two's, above
    }
    real_conditions = {
        t: (c["status"], c.get("reason"), c.get("message", ""))
        for t, c in conditions(xr).items()
        if t in function_conditions
    }
    assert real_conditions == function_conditions, {
        t: (real_conditions.get(t), v) for t, v in function_conditions.items() if real_conditions.get(t) != v
    }


def assert_creations_follow_gates(composite: Composite) -> dict[str, set[str]]:
    """Every composed resource was created (etcd revision of its creation) after each thing
    its first emission waits for was Ready (the revision the provider reported it) or, for
    the control plane, after the driver moved it. Returns the derived dependencies."""
    xr = composite.xr()
    assert xr is not None
    observed = composite.composed()
    deps = model.dependencies(xr, composite.required(), composite.composition, observed)
    events = composite.providers.history(composite.namespace if composite.namespaced else None)
    created = composite.providers.first("created", events)
    ready = composite.providers.first("ready", events)
    state_revision = {
        model.CONTROL_PLANE_INITIALIZED: composite.control_plane_revisions["initialized"],
        model.CONTROL_PLANE_AVAILABLE: composite.control_plane_revisions["available"],
    }
    violations = []
    for node, needs in deps.items():
        for dep in needs:
            before = state_revision.get(dep, ready.get(dep))
            if before is None or not before < created[node]:
                violations.append(f"{node} created at revision {created[node]}, {dep} ready at {before}")
    assert not violations, "\n".join(violations)
    assert any(deps.values()), "the probe found no gate at all"
    return deps


def usage_ends(usage: dict[str, Any]) -> tuple[tuple[str, str], tuple[str, str], tuple[str, str]]:
    """(kind, name) of a Usage's ``by`` end, its ``of`` end and the Usage itself."""
    spec = usage["spec"]
    return (
        (spec["by"]["kind"], spec["by"]["resourceRef"]["name"]),
        (spec["of"]["kind"], spec["of"]["resourceRef"]["name"]),
        (usage["kind"], usage["metadata"]["name"]),
    )


def assert_deleted_in_usage_order(composite: Composite, usages: dict[str, dict[str, Any]]) -> None:
    """For every Usage whose ``of`` end was deleted: its ``by`` end was gone first, and the
    Usage itself went before ``of`` (etcd revisions of the deletions)."""
    events = composite.providers.history(composite.namespace if composite.namespaced else None)
    deleted = {(e.kind, e.name): e.revision for e in events if e.what == "deleted"}
    assert usages, "no Usage was given"
    problems = []
    checked = 0
    for name, usage in usages.items():
        by, of, itself = usage_ends(usage)
        if of not in deleted:
            continue
        checked += 1
        if not (by in deleted and itself in deleted and deleted[by] < deleted[of] and deleted[itself] < deleted[of]):
            problems.append(
                f"{name}: by {by} deleted at {deleted.get(by)}, the Usage at {deleted.get(itself)}, of {of} at {deleted[of]}"
            )
    assert checked, "no used resource was deleted"
    assert not problems, "\n".join(problems)


def assert_claim_converged(claim: Composite, namespace: str) -> None:
    """A legacy claim and its cluster-scoped XR Ready with the in-memory world's composed set,
    the function's conditions on the claim too, only the legacy flavour's kinds composed."""
    got = claim.resource()
    assert condition_status(got, "Ready") == "True", conditions(got)
    xr = claim.xr()
    assert xr is not None and "namespace" not in xr["metadata"]
    assert xr["metadata"]["labels"]["crossplane.io/claim-namespace"] == namespace
    assert_converged_like_the_world(claim)
    # The function's conditions reach the claim too (target composite and claim).
    for typ in ("PluginsReady", "SecurityGroupsReady"):
        assert conditions(got)[typ]["status"] == conditions(xr)[typ]["status"], typ
    assert {(o["kind"], o["apiVersion"]) for o in claim.composed().values()} <= {(k, v[0]) for k, v in KINDS.items()}


def assert_claim_deletion_in_usage_order(claim: Composite, namespace: str) -> None:
    """Delete the claim: every composed resource goes, in Usage order, and nothing hangs."""
    composed = claim.composed()
    usages = {n: o for n, o in composed.items() if n.startswith("usage-")}
    got = claim.resource()
    assert got is not None
    claim.kube.delete(got["apiVersion"], got["kind"], got["metadata"]["name"], namespace)
    claim.kube.wait_for(lambda: claim.resource() is None, "the claim gone", timeout_s=60)
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in composed.values()}
    claim.kube.wait_for(
        lambda: all(claim.kube.get(a, k, n) is None for a, k, n in names),
        "every composed resource deleted",
        timeout_s=180,
    )
    assert_deleted_in_usage_order(claim, usages)
    assert not [e for e in claim.providers.history() if e.what == "hung"]
