"""The cluster's own deletion (docs/architecture.md) with the real AWS provider against moto.

examples/selfhosted-full, namespaced, in team-x, converged through provider-aws v2.5.0. Then
CAPI deletes the cluster, as the driver plays it (``ClusterAPI``): the Cluster is marked for
deletion and held by CAPI's finalizer; later it goes, the garbage collector takes its control
plane, infrastructure and Secrets, and provider-helm can no longer reach the workload cluster.

- While the cluster is being deleted: the Releases take the orphan policy, the XR says
  ``ClusterDeleting`` and records the cluster in ``status.clusterDeletion``, nothing is marked
  for deletion and moto gets no Delete call over several of the provider's polls.
- Once it is gone: the function withdraws everything through provider-aws, in Usage order in
  the control plane and in the order of moto's Delete calls; nothing is uninstalled, nothing
  hangs; the XR goes through the phases Deleting, (Gone,) Deleted and ends ``ClusterDeleted``
  with nothing composed; moto holds nothing the XR made; the usage webhook refused nothing.
  ``ClusterDeleted`` comes once the API server holds nothing composed: the last layer, which
  Crossplane forgets as soon as it deletes it while provider-aws's finalizer still holds it
  (the OIDC provider, for about a second), is asked for by name until it is gone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from e2e.aws.conftest import POLL_S, aws_objects, converge
from e2e.aws.deletion import (
    assert_withdrawn_in_usage_order,
    deletions,
    named_deletions,
    order_report,
    refusals,
)
from e2e.aws.provider import AwsControlPlane, Moto, new_in
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from function.flavour import ORPHAN_MANAGEMENT_POLICIES

NAMESPACE = "team-x"
EXAMPLE = "selfhosted-full"
# While the cluster is only being deleted, several of the provider's polls pass.
HELD_S = 3 * POLL_S
WITHDRAW_S = 900
PHASES = ("Deleting", "Gone", "Deleted")


def _summary(xr: dict[str, Any] | None) -> dict[str, Any]:
    return conditions(xr).get("PluginsReady", {})


def _phase(xr: dict[str, Any] | None) -> str | None:
    return ((xr or {}).get("status", {}).get("clusterDeletion") or {}).get("phase")


@dataclass(frozen=True)
class Said:
    """What the XR's PluginsReady said, and what was left of what it composed, at one reading."""

    reason: str
    message: str
    left: list[str]  # composed resources the API server still held
    at: float


@dataclass
class Deletion:
    """The XR converged, and what the tests below see of its cluster's deletion, in order."""

    composite: Composite
    held_before: dict[str, Any]  # what moto held before the XR
    before: dict[str, dict[str, Any]]  # what the XR composed, converged
    held_converged: dict[str, Any]  # what moto held then
    phases: list[str] = field(default_factory=list)  # status.clusterDeletion.phase, as read

    @property
    def releases(self) -> set[str]:
        return {n for n, o in self.before.items() if o["kind"] == "Release"}

    def read(self) -> dict[str, Any] | None:
        xr = self.composite.xr()
        if phase := _phase(xr):
            self.phases.append(phase)
        return xr

    def seen_phases(self) -> list[str]:
        return [p for i, p in enumerate(self.phases) if i == 0 or self.phases[i - 1] != p]


@pytest.fixture(scope="module")
def deletion(aws_control_plane: AwsControlPlane, aws_api: dict, aws_providers: Providers, moto: Moto) -> Iterator[Deletion]:
    held_before = moto.snapshot()
    composite = Composite(aws_control_plane, aws_providers, EXAMPLE, aws_api, NAMESPACE)
    converge(composite)
    state = Deletion(composite, held_before, composite.composed(), moto.snapshot())
    assert state.releases and aws_objects(composite), sorted(state.before)
    assert new_in(state.held_converged, held_before), "moto holds nothing of the XR"
    yield state


def test_while_the_cluster_is_being_deleted_nothing_is(deletion: Deletion, aws_providers: Providers, moto: Moto) -> None:
    """CAPI marks the Cluster (its finalizer keeps it): the Releases take the orphan policy,
    the XR says ClusterDeleting and records the cluster; every AWS resource stays (the load
    balancer controller and the CCM keep their roles while CAPA removes the load balancers)."""
    composite = deletion.composite
    moto.start_recording()
    started = time.monotonic()
    composite.capi.delete()

    def orphaned_and_recorded() -> dict[str, Any] | None:
        composed = composite.composed()
        xr = deletion.read()
        if any(composed[n]["spec"].get("managementPolicies") != list(ORPHAN_MANAGEMENT_POLICIES) for n in deletion.releases):
            return None
        return xr if _summary(xr).get("reason") == "ClusterDeleting" else None

    xr = composite.kube.wait_for(orphaned_and_recorded, "every Release orphaned, the XR ClusterDeleting", timeout_s=120, interval_s=0.5)
    print(f"\nReleases orphaned and the XR ClusterDeleting {time.monotonic() - started:.0f}s after the Cluster was marked")
    record = {"name": composite.capi.name, "uid": composite.capi.uid, "phase": "Deleting"}
    assert xr["status"]["clusterDeletion"] == record, xr["status"]
    assert condition_status(xr, "Ready") == "False", conditions(xr)
    time.sleep(HELD_S)  # several of the provider's polls
    calls = moto.stop_recording()
    assert set(composite.composed()) == set(deletion.before), "something was dropped while the cluster was only being deleted"
    marked = [f"{e.what} {e.kind} {e.name}" for e in aws_providers.history(NAMESPACE) if e.what in {"deleting", "deleted"}]
    assert not marked, marked
    assert not deletions(calls), deletions(calls)
    assert moto.snapshot() == deletion.held_converged
    xr = deletion.read()
    assert _summary(xr).get("reason") == "ClusterDeleting", _summary(xr)


def test_once_the_cluster_is_gone_everything_is_withdrawn_in_usage_order(
    deletion: Deletion, aws_control_plane: AwsControlPlane, aws_providers: Providers, moto: Moto
) -> None:
    """CAPI is done: the Cluster goes, the garbage collector takes what it owned, and
    provider-helm can no longer reach the workload cluster. The function withdraws everything,
    one layer per reconcile, through provider-aws; the XR ends ClusterDeleted, empty."""
    composite, kube = deletion.composite, aws_control_plane.kube
    moto.start_recording()
    aws_providers.unreachable.add(NAMESPACE)
    gone_at = time.monotonic()
    composite.capi.finish_deletion()
    kube.wait_for(composite.capi.gone, "the Cluster and what it owned gone", timeout_s=60)
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in deletion.before.values()}
    said: list[Said] = []

    def all_deleted() -> bool:
        summary = _summary(deletion.read())
        left = [o for a, k, n in names if (o := kube.get(a, k, n, NAMESPACE)) is not None]
        held = [f"{o['kind']} {o['metadata']['name']}" for o in left]
        said.append(Said(str(summary.get("reason")), str(summary.get("message")), held, time.monotonic()))
        return not left

    kube.wait_for(all_deleted, "everything composed deleted through provider-aws", timeout_s=WITHDRAW_S, interval_s=1)
    withdrawn_s = time.monotonic() - gone_at
    xr = kube.wait_for(
        lambda: (got := deletion.read()) is not None and _summary(got).get("reason") == "ClusterDeleted" and got,
        "the XR ClusterDeleted",
        timeout_s=120,
        interval_s=1,
    )
    calls = moto.stop_recording()
    print(f"\neverything withdrawn {withdrawn_s:.0f}s after the Cluster was gone; phases {deletion.seen_phases()}")
    print("moto's Delete calls, in order:\n  " + "\n  ".join(named_deletions(deletions(calls), deletion.before)))

    # What the XR said along the way.
    assert any(w.reason == "ClusterDeleting" and "being deleted in Usage order" in w.message for w in said), said
    # ClusterDeleted only once the API server holds nothing composed: what Crossplane deleted
    # last (and forgot at once) is listed in status.clusterDeletion.finalizing and asked for
    # by name while provider-aws's finalizer still holds it.
    assert not [w for w in said if w.reason == "ClusterDeleted" and w.left], said
    finalizing = [w for w in said if "still being deleted by their providers" in w.message]
    print(f"readings while the last layer was finalizing: {len(finalizing)} ({finalizing[0].left if finalizing else []})")
    record = {"name": composite.capi.name, "uid": composite.capi.uid, "phase": "Deleted"}
    assert xr["status"]["clusterDeletion"] == record, xr["status"]
    seen = deletion.seen_phases()
    assert seen[0] == "Deleting" and seen[-1] == "Deleted" and seen == sorted(seen, key=PHASES.index), deletion.phases
    assert condition_status(xr, "Synced") == "True", conditions(xr)
    assert condition_status(xr, "Ready") == "False", conditions(xr)
    assert xr["status"]["plugins"] == [] and "roleARNs" not in xr["status"], xr["status"]
    assert composite.composed() == {}

    # What the played provider-helm saw: orphaned, never uninstalled, nothing hanging.
    events = aws_providers.history(NAMESPACE)
    assert {e.resource for e in events if e.what == "orphaned"} == deletion.releases
    assert not [e for e in events if e.what in {"uninstalled", "hung"}]
    assert {e.resource for e in events if e.what == "deleted"} == set(deletion.before)

    # moto holds nothing the XR made; every AWS resource went through a Delete call, in Usage order.
    left = new_in(moto.snapshot(), deletion.held_before)
    assert not left, left
    order = assert_withdrawn_in_usage_order(aws_providers, NAMESPACE, deletion.before, set(deletion.before), calls)
    print(order_report(order, calls, deletion.before))
    refused = refusals(aws_control_plane, aws_providers, deletion.before, NAMESPACE)
    assert not refused, "\n".join(refused)


def test_the_empty_xr_goes_at_once(deletion: Deletion) -> None:
    xr = deletion.composite.xr()
    assert xr is not None and deletion.composite.composed() == {}
    deletion.composite.kube.delete(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], NAMESPACE)
    deletion.composite.kube.wait_for(lambda: deletion.composite.xr() is None, "the empty XR deleted", timeout_s=60)
