"""The legacy API on a real Crossplane 1.x control plane (core v1.20.13), not only its CLI.

Crossplane 1.x serves apis/v1 as its only kind of XRD: the claim ClusterPlugin, the cluster-scoped
XR XClusterPlugin, and the cluster-scoped ClusterPluginRollout. Everything else is as
``test_legacy.py`` runs it on v2: the calico-legacy-claim example's claim in namespace
``platform``, its cluster made by the driver from the example's v1beta1 objects, the played
providers, and the same checks: converged like the in-memory world, creations after their gates,
deletion in Usage order with nothing refused by 1.x's usage webhook. 1.x asks the function's
required resources as extra resources, one round trip each (``function/flavour.py``). Then
what only 1.x has: the cluster's own deletion seen through the control plane alone (1.x never
reads the Cluster), and a ClusterPluginRollout across claims.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.controlplane.checks import (
    assert_claim_converged,
    assert_claim_deletion_in_usage_order,
    assert_creations_follow_gates,
    assert_deleted_in_usage_order,
)
from e2e.controlplane.composite import Composite, conditions
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.core_1 import CrossplaneOneControlPlane
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ROOT, ControlPlane
from function_tools.in_memory_crossplane import orphaned

NAMESPACE = "platform"


@pytest.fixture(scope="module")
def core_1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_control_plane(tmp_path_factory.mktemp("crossplane1"), CrossplaneOneControlPlane) as cp:
        yield cp


@pytest.fixture(scope="module")
def providers_1(core_1: ControlPlane) -> Iterator[Providers]:
    providers = Providers(core_1.kube, namespaced=False)
    providers.start()
    yield providers
    providers.stop()


@pytest.fixture(scope="module")
def api_1(core_1: ControlPlane, providers_1: Providers) -> Iterator[dict]:
    """apis/v1 and the legacy example's own Composition (its claim selects it), with a short
    ``ttl.ready``: a converged ClusterPlugin reads the rollouts again only when that is up
    (Crossplane does not watch what a function asks for), as in test_fleet_rollout.py."""
    core_1.install_api("v1")
    own = core_1.install_composition(
        ROOT / "examples" / "calico-legacy-claim" / "composition.yaml",
        edit_input=lambda step_input: step_input.setdefault("ttl", {}).update(ready="5s"),
    )
    yield own
    core_1.remove_api("v1")
    core_1.kube.delete(own["apiVersion"], "Composition", own["metadata"]["name"])


@pytest.fixture(scope="module")
def claim(core_1: ControlPlane, api_1: dict, providers_1: Providers) -> Iterator[Composite]:
    composite = Composite(core_1, providers_1, "calico-legacy-claim", api_1, NAMESPACE, document="claim.yaml")
    composite.converge()
    yield composite


def test_crossplane_1_core_is_what_runs(core_1: ControlPlane) -> None:
    said = subprocess.run([str(core_1.tool(core_1.core_tool)), "--version"], capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "v1.20.13", said


def test_claim_and_xr_converge_ready_with_the_worlds_composed_set(claim: Composite) -> None:
    assert_claim_converged(claim, NAMESPACE)
    # Every condition, IssuerReady included: 1.x lists the control plane by CAPI's label,
    # and the issuer it signs with is the one the roles trust.
    got = claim.resource()
    assert all(c["status"] == "True" for c in conditions(got).values()), conditions(got)


def test_creations_follow_the_functions_gates(claim: Composite) -> None:
    deps = assert_creations_follow_gates(claim)
    assert "cni-release" in deps["cert-manager-release"]


def test_deleting_the_claim_removes_everything(claim: Composite) -> None:
    assert_claim_deletion_in_usage_order(claim, NAMESPACE)


def _refusals(core: ControlPlane) -> int:
    """Deletions 1.20's usage webhook has refused so far (internal/usage/handler.go logs each at
    debug level with the message it answers: "This resource is in-use by ...")."""
    return len(core.log_lines("crossplane", '"msg": "This resource is in-use'))


def test_the_clusters_own_deletion(core_1: ControlPlane, api_1: dict, providers_1: Providers) -> None:
    """docs/architecture.md, "The cluster's own deletion", on 1.x, which never reads the Cluster:
    CAPI deletes the control plane and infrastructure object once the Cluster is deleted, and
    their deletionTimestamp is what the function sees. Deleting -> every Release orphaned,
    nothing deleted; gone (the providers' finalizers done, the garbage collector takes the
    rest) -> everything withdrawn in Usage order, no Release uninstalled nor hanging, no
    deletion refused by 1.20's usage webhook, and the XR says ClusterDeleted."""
    namespace = "gone-1x"
    composite = Composite(core_1, providers_1, "calico-legacy-claim", api_1, namespace, document="claim.yaml")
    composite.create(staged=False)
    composite.wait_ready(timeout_s=240)
    before = composite.composed()
    releases = {n for n, o in before.items() if o["kind"] == "Release"}
    assert releases
    ours = {o["metadata"]["name"] for o in before.values()}
    since = len(providers_1.history())
    refused_before = _refusals(core_1)

    composite.capi.delete()
    composite.capi.delete_descendants()

    def orphaned_and_recorded() -> dict[str, Any] | None:
        composed = composite.composed()
        # Legacy managed resources are orphaned by deletionPolicy: Orphan.
        if not all(orphaned(composed[n]) for n in releases):
            return None
        xr = composite.xr()
        return xr if conditions(xr).get("PluginsReady", {}).get("reason") == "ClusterDeleting" else None

    xr = core_1.kube.wait_for(orphaned_and_recorded, "every Release orphaned, the XR ClusterDeleting", timeout_s=60)
    assert xr["status"]["clusterDeletion"]["phase"] == "Deleting", xr["status"]["clusterDeletion"]
    assert set(composite.composed()) == set(before), "something was dropped while the cluster was only being deleted"
    assert not [e for e in providers_1.history()[since:] if e.name in ours and e.what == "deleted"]

    # The providers are done: the finalizers go, the garbage collector takes the rest, and
    # provider-helm can no longer reach the workload cluster. Legacy Releases are
    # cluster-scoped: "" makes every one unreachable (one deleted without the orphan policy
    # would hang).
    providers_1.unreachable.add("")
    try:
        composite.capi.finish_deletion()
        core_1.kube.wait_for(composite.capi.gone, "the Cluster and what it owned gone", timeout_s=60)
        names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in before.values()}
        core_1.kube.wait_for(
            lambda: all(core_1.kube.get(a, k, n) is None for a, k, n in names),
            "everything composed deleted",
            timeout_s=300,
            interval_s=1,
        )
        def cluster_deleted() -> dict[str, Any] | None:
            got = composite.xr()
            return got if conditions(got).get("PluginsReady", {}).get("reason") == "ClusterDeleted" else None

        xr = core_1.kube.wait_for(
            cluster_deleted,
            "the XR ClusterDeleted",
            timeout_s=120,
            interval_s=1,
        )
    finally:
        providers_1.unreachable.discard("")
    assert xr["status"]["plugins"] == [] and "roleARNs" not in xr["status"], xr["status"]
    events = [e for e in providers_1.history()[since:] if e.name in ours]
    assert {e.resource for e in events if e.what == "orphaned"} == releases, events
    assert {e.resource for e in events if e.what == "deleted"} == set(before), events
    assert not [e for e in events if e.what in {"uninstalled", "hung"}]
    assert_deleted_in_usage_order(composite, {n: o for n, o in before.items() if n.startswith("usage-")})
    assert _refusals(core_1) == refused_before


# --- a rollout across three claims ---------------------------------------------------------------
# Three claims of the example in namespaces of their own, the first the canary; the rollout moves
# their EBS CSI driver's chart. Crossplane 1.x copies a claim's labels to its XR, which is what a
# legacy rollout selects by, and serves the rollout's cluster-scoped XR with the function asking
# for the XRs as extra resources.
EBS = "ebs-csi"
OLD_EBS, NEW_EBS = "2.64.0", "2.64.1"
RINGS = ("ring-0", "ring-1", "ring-2")


def _ring(core: ControlPlane, providers: Providers, api: dict, namespace: str) -> Composite:
    c = Composite(core, providers, "calico-legacy-claim", api, namespace, document="claim.yaml")
    c.manifest["metadata"]["labels"] = {"fleet": "e2e-1x", **({"ring": "canary"} if namespace == RINGS[0] else {})}
    c.manifest["spec"]["upgradePolicy"] = {"soakSeconds": 5, "progressDeadlineSeconds": 60}
    return c


def _ebs_chart(c: Composite) -> str:
    release = c.composed().get("ebs-release") or {}
    return str(release.get("spec", {}).get("forProvider", {}).get("chart", {}).get("version", ""))


def test_a_rollout_moves_the_claims_canary_first_to_complete(core_1: ControlPlane, api_1: dict, providers_1: Providers) -> None:
    rings = [_ring(core_1, providers_1, api_1, ns) for ns in RINGS]
    for c in rings:
        c.create(staged=False)
    for c in rings:
        c.wait_ready(timeout_s=240)
        xr = c.xr()
        assert xr is not None
        # 1.x copied the claim's labels to the XR: the rollout selects XRs by them.
        assert xr["metadata"]["labels"].get("fleet") == "e2e-1x", xr["metadata"]["labels"]
    assert {_ebs_chart(c) for c in rings} == {OLD_EBS}

    xrd = yaml.safe_load((ROOT / "apis" / "v1" / "rollout-definition.yaml").read_text())
    api_version = f"{xrd['spec']['group']}/{xrd['spec']['versions'][0]['name']}"
    core_1.kube.apply(
        {
            "apiVersion": api_version,
            "kind": "ClusterPluginRollout",
            "metadata": {"name": "ebs-1x"},
            "spec": {
                "selector": {"matchLabels": {"fleet": "e2e-1x"}},
                "target": {"plugins": [{"name": EBS, "version": NEW_EBS}]},
                "strategy": {
                    "canary": {"matchLabels": {"ring": "canary"}},
                    "waves": [{}],
                    "soakSeconds": 5,
                    "progressDeadlineSeconds": 180,
                    "onFailure": "Halt",
                },
            },
        }
    )
    # Each sample reads the Releases first, then the rollout: a Release that moved was admitted
    # no later than the rollout status read after it.
    samples: list[tuple[float, tuple[str, ...], str, str]] = []
    started = time.monotonic()
    deadline = started + 300
    phase = ""
    while phase != "Complete" and time.monotonic() < deadline:
        charts = tuple(_ebs_chart(c) for c in rings)
        rollout = core_1.kube.get(api_version, "ClusterPluginRollout", "ebs-1x") or {}
        status = rollout.get("status", {})
        phase, wave = str(status.get("phase", "")), str(status.get("wave", ""))
        sample = (round(time.monotonic() - started, 1), charts, phase, wave)
        if not samples or samples[-1][1:] != sample[1:]:
            samples.append(sample)
        time.sleep(0.5)
    print("\nrollout on Crossplane 1.20 (s, ring-0 ring-1 ring-2 chart, phase, open wave):")
    for s in samples:
        print(f"  {s[0]:6.1f}s  {' '.join(s[1])}  {s[2] or '-'} {s[3] or '-'}")
    assert phase == "Complete", samples[-1]
    assert rollout["status"]["counts"]["admitted"] == rollout["status"]["counts"]["healthy"] == len(RINGS)
    # The canary moved first; the others only once the canary's wave had closed.
    for _, charts, _, wave in samples:
        if wave == "canary":
            assert charts[1:] == (OLD_EBS, OLD_EBS), samples
    assert any(charts == (NEW_EBS, OLD_EBS, OLD_EBS) for _, charts, _, _ in samples), samples
    for c in rings:
        entry = next(p for p in c.xr()["status"]["plugins"] if p["name"] == EBS)  # type: ignore[index]
        assert entry.get("version") == NEW_EBS, entry
