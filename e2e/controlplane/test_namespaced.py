"""A namespaced ClusterPlugin (apis/v2) on real Crossplane, API server and garbage collector.

examples/selfhosted-full in namespace team-a, its cluster made by the driver with the
control plane down; the control plane turns initialized, then available, once the XR
waits for it. The tests below run in order on that one XR: converge, gates, Usages,
removing a plugin, deleting the XR. The others (schema, FATAL, the cluster's own deletion)
use XRs of their own.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import ApiError

from e2e.controlplane import model
from e2e.controlplane.checks import (
    assert_converged_like_the_world,
    assert_creations_follow_gates,
    assert_deleted_in_usage_order,
    gone_without_efs,
    world_for,
)
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane
from function.flavour import ORPHAN_MANAGEMENT_POLICIES

NAMESPACE = "team-a"
# Crossplane's usage webhook records a refused deletion on the used object (protection/usage.go).
DELETION_ATTEMPT = "usage.crossplane.io/deletion-attempt-with-policy"


def refusals(control_plane: ControlPlane, namespace: str) -> int:
    """Deletions Crossplane's usage webhook has refused in ``namespace`` so far.

    The webhook (internal/webhook/protection/usage/handler.go) logs each refusal at debug
    level with the object's namespace and the message it answers the API server with.
    """
    return len(control_plane.log_lines("crossplane", f'"namespace": "{namespace}", "msg": "This resource is in-use'))


@pytest.fixture(scope="module")
def demo(control_plane: ControlPlane, namespaced_api: dict, namespaced_providers: Providers) -> Iterator[Composite]:
    composite = Composite(control_plane, namespaced_providers, "selfhosted-full", namespaced_api, NAMESPACE)
    composite.converge()
    yield composite


def test_xr_converges_ready_with_the_worlds_composed_set(demo: Composite) -> None:
    assert_converged_like_the_world(demo)


def test_creations_follow_the_functions_gates(demo: Composite) -> None:
    deps = assert_creations_follow_gates(demo)
    # The derivation found the gates of docs/architecture.md, "The resource graph" (a few, as a
    # check of the probe).
    assert "irsa-oidc-provider" in deps["vpc-cni-role"]
    assert "cni-release" in deps["ebs-release"]
    assert model.CONTROL_PLANE_AVAILABLE in deps["ebs-release"]
    assert model.CONTROL_PLANE_INITIALIZED in deps["ccm-release"]


def test_deleting_a_used_resource_is_refused(demo: Composite) -> None:
    """Crossplane's usage webhook (reached by URL) refuses to delete the OIDC provider while roles use it."""
    composed = demo.composed()
    oidc = composed["irsa-oidc-provider"]
    usages = [o for n, o in composed.items() if n.startswith("usage-") and o["spec"]["of"]["resourceRef"]["name"] == oidc["metadata"]["name"]]
    assert usages, "no Usage of the OIDC provider was composed"
    labels = demo.kube.get(oidc["apiVersion"], oidc["kind"], oidc["metadata"]["name"], NAMESPACE)["metadata"].get("labels", {})
    assert labels.get("crossplane.io/in-use") == "true", labels
    with pytest.raises(ApiError) as refused:
        demo.kube.delete(oidc["apiVersion"], oidc["kind"], oidc["metadata"]["name"], NAMESPACE)
    message = str(refused.value)
    assert "nousages.protection.crossplane.io" in message, message
    assert "in use" in message.lower() or "in-use" in message.lower(), message
    still = demo.kube.get(oidc["apiVersion"], oidc["kind"], oidc["metadata"]["name"], NAMESPACE)
    assert still is not None and not still["metadata"].get("deletionTimestamp")
    # The webhook recorded the attempt; with replayDeletion, every Usage of the provider
    # that goes would send it again (and be refused while others remain). Undone, so the
    # tests below count only the refusals of their own deletions.
    assert DELETION_ATTEMPT in still["metadata"].get("annotations", {}), still["metadata"]
    demo.kube.patch(oidc["apiVersion"], oidc["kind"], oidc["metadata"]["name"], {"metadata": {"annotations": {DELETION_ATTEMPT: None}}}, NAMESPACE)


def test_removing_a_plugin_deletes_exactly_its_resources(demo: Composite) -> None:
    refused_before = refusals(demo.cp, NAMESPACE)
    before = demo.composed()
    xr = demo.xr()
    assert xr is not None
    expected_gone = gone_without_efs(demo, before)

    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": {"storage": {"efs": None}}}, NAMESPACE)
    demo.kube.wait_for(lambda: not (expected_gone & set(demo.composed())), f"{sorted(expected_gone)} deleted", timeout_s=90)
    after = demo.wait_ready()
    assert condition_status(after, "Synced") == "True", conditions(after)
    assert set(demo.composed()) == set(before) - expected_gone
    assert "efs" not in after["status"]["roleARNs"]
    assert "efs-csi" not in {p["name"] for p in after["status"]["plugins"]}
    events = demo.providers.history(NAMESPACE)
    assert {e.resource for e in events if e.what == "deleted"} == expected_gone
    # The Release was uninstalled (the cluster is there), and in Usage order.
    assert {e.resource for e in events if e.what == "uninstalled"} == {"efs-release"}
    assert_deleted_in_usage_order(demo, {n: before[n] for n in expected_gone if n.startswith("usage-")})
    # Withdrawn one layer per reconcile: the usage webhook never had to refuse a deletion.
    assert refusals(demo.cp, NAMESPACE) == refused_before


def test_deleting_the_xr_removes_everything_through_the_garbage_collector(demo: Composite) -> None:
    composed = demo.composed()
    usages = {n: o for n, o in composed.items() if n.startswith("usage-")}
    xr = demo.xr()
    assert xr is not None
    for obj in composed.values():
        refs = obj["metadata"].get("ownerReferences", [])
        assert any(r["uid"] == xr["metadata"]["uid"] and r.get("controller") for r in refs), obj["metadata"]
    demo.kube.delete(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], NAMESPACE)
    demo.kube.wait_for(lambda: demo.xr() is None, "the XR gone", timeout_s=60)
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in composed.values()}
    demo.kube.wait_for(
        lambda: all(demo.kube.get(a, k, n, NAMESPACE) is None for a, k, n in names),
        "every composed resource deleted",
        timeout_s=180,
    )
    assert_deleted_in_usage_order(demo, usages)
    # Nothing was uninstalled from a cluster that is gone, nothing hangs.
    assert not [e for e in demo.providers.history(NAMESPACE) if e.what == "hung"]


def test_the_schema_rejects_a_malformed_xr(control_plane: ControlPlane, namespaced_api: dict) -> None:
    manifest = Composite(control_plane, Providers(control_plane.kube, namespaced=True), "selfhosted-full", namespaced_api, "team-m").manifest
    manifest["spec"]["networking"] = {"amazonVPC": {}, "calico": {}}
    control_plane.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-m"}})
    with pytest.raises(ApiError) as refused:
        control_plane.kube.create(manifest)
    assert refused.value.status.code == 422
    assert "spec.networking" in str(refused.value)
    assert "set at most one of amazonVPC and calico" in str(refused.value)


def test_a_fatal_result_reaches_the_xr(control_plane: ControlPlane, namespaced_api: dict, namespaced_providers: Providers) -> None:
    """A spec the schema accepts and the function refuses: values fighting a key it owns."""
    composite = Composite(control_plane, namespaced_providers, "selfhosted-full", namespaced_api, "team-f")
    composite.manifest["spec"]["networking"]["amazonVPC"] = {"values": {"serviceAccount": {"name": "mine"}}}
    world = world_for(composite, xr=composite.manifest, required=_example_required(composite))
    expected = world.reconcile().fatal
    assert expected and "spec.networking.amazonVPC.values" in expected, expected

    composite.create(staged=False)
    xr = control_plane.kube.wait_for(
        lambda: (got := composite.xr()) is not None and condition_status(got, "Synced") == "False" and got,
        "the XR Synced False",
        timeout_s=60,
    )
    synced = conditions(xr)["Synced"]
    assert expected in synced["message"], synced
    assert condition_status(xr, "Ready") != "True"
    assert composite.composed() == {}, "a FATAL result applied something"


def _example_required(composite: Composite) -> list[dict[str, Any]]:
    """The example's required objects moved to the composite's namespace (before creating them)."""
    out = []
    for obj in composite.capi.examples.values():
        o = copy.deepcopy(obj)
        o["metadata"]["namespace"] = composite.namespace
        out.append(o)
    return out


def test_the_clusters_own_deletion(control_plane: ControlPlane, namespaced_api: dict, namespaced_providers: Providers) -> None:
    """docs/architecture.md, "The cluster's own deletion", with real objects: deleting -> orphan
    policy, nothing deleted; gone -> everything withdrawn in Usage order, no Release uninstalled
    nor hanging, no deletion refused by the usage webhook."""
    namespace = "team-b"
    composite = Composite(control_plane, namespaced_providers, "selfhosted-full", namespaced_api, namespace)
    composite.create(staged=False)
    composite.wait_ready()
    before = composite.composed()
    releases = {n for n, o in before.items() if o["kind"] == "Release"}
    assert releases

    refused_before = refusals(control_plane, namespace)
    composite.capi.delete()

    def orphaned_and_recorded() -> dict[str, Any] | None:
        composed = composite.composed()
        if any(composed[n]["spec"].get("managementPolicies") != list(ORPHAN_MANAGEMENT_POLICIES) for n in releases):
            return None
        xr = composite.xr()
        if conditions(xr).get("PluginsReady", {}).get("reason") != "ClusterDeleting":
            return None
        return xr

    xr = control_plane.kube.wait_for(orphaned_and_recorded, "every Release orphaned, the XR ClusterDeleting", timeout_s=60)
    assert xr["status"]["clusterDeletion"]["name"] == composite.capi.name
    assert xr["status"]["clusterDeletion"]["uid"] == composite.capi.uid
    assert condition_status(xr, "Ready") == "False"
    assert set(composite.composed()) == set(before), "something was dropped while the cluster was only being deleted"
    assert not [e for e in namespaced_providers.history(namespace) if e.what == "deleted"]

    # CAPI is done: the Cluster goes, the garbage collector takes what it owned, and
    # provider-helm can no longer reach the workload cluster.
    namespaced_providers.unreachable.add(namespace)
    composite.capi.finish_deletion()
    control_plane.kube.wait_for(composite.capi.gone, "the Cluster and what it owned gone", timeout_s=60)
    # The function withdraws what it composed one layer per reconcile, in Usage order,
    # saying so; ClusterDeleted only once nothing is left.
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in before.values()}
    said: list[tuple[str, bool]] = []

    def all_deleted() -> bool:
        summary = conditions(composite.xr()).get("PluginsReady", {})
        gone = all(control_plane.kube.get(a, k, n, namespace) is None for a, k, n in names)
        said.append((f"{summary.get('reason')}: {summary.get('message')}", gone))
        return gone

    control_plane.kube.wait_for(all_deleted, "everything composed deleted", timeout_s=300, interval_s=1)
    assert any("being deleted in Usage order" in what for what, _ in said), said
    assert not [what for what, gone in said if what.startswith("ClusterDeleted:") and not gone]
    xr = control_plane.kube.wait_for(
        lambda: (got := composite.xr()) is not None and conditions(got).get("PluginsReady", {}).get("reason") == "ClusterDeleted" and got,
        "the XR ClusterDeleted",
        timeout_s=120,
        interval_s=1,
    )
    assert condition_status(xr, "Synced") == "True", conditions(xr)
    assert xr["status"]["plugins"] == [] and "roleARNs" not in xr["status"]
    events = namespaced_providers.history(namespace)
    assert {e.resource for e in events if e.what == "orphaned"} == releases
    assert not [e for e in events if e.what in {"uninstalled", "hung"}]
    assert {e.resource for e in events if e.what == "deleted"} == set(before)
    assert_deleted_in_usage_order(composite, {n: o for n, o in before.items() if n.startswith("usage-")})
    # Crossplane deletes what a function stops emitting in no particular order and stops at
    # the first deletion its usage webhook refuses; withdrawn in layers, none is refused.
    assert refusals(control_plane, namespace) == refused_before
