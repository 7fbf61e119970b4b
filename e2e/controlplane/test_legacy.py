"""A legacy claim (apis/v1: claim ClusterPlugin, cluster-scoped XR XClusterPlugin) on real Crossplane v2.

Crossplane v2 still serves apiextensions.crossplane.io/v1 XRDs (scope LegacyCluster):
examples/calico-legacy-claim's claim in namespace platform, its cluster made by the driver from
the example's v1beta1 objects; the claim selects the example's own Composition, which asks for them
in v1beta1.
The XR composes the cluster-scoped kinds and apiextensions.crossplane.io/v1beta1 Usages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.controlplane.checks import (
    assert_converged_like_the_world,
    assert_creations_follow_gates,
    assert_deleted_in_usage_order,
)
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane
from function.flavour import KINDS

NAMESPACE = "platform"


@pytest.fixture(scope="module")
def edge(control_plane: ControlPlane, legacy_api: dict, legacy_providers: Providers) -> Iterator[Composite]:
    composite = Composite(control_plane, legacy_providers, "calico-legacy-claim", legacy_api, NAMESPACE, document="claim.yaml")
    composite.converge()
    yield composite


def test_claim_and_xr_converge_ready_with_the_worlds_composed_set(edge: Composite) -> None:
    claim = edge.resource()
    assert condition_status(claim, "Ready") == "True", conditions(claim)
    xr = edge.xr()
    assert xr is not None and "namespace" not in xr["metadata"]
    assert xr["metadata"]["labels"]["crossplane.io/claim-namespace"] == NAMESPACE
    assert_converged_like_the_world(edge)
    # The function's conditions reach the claim too (target composite and claim).
    for typ in ("PluginsReady", "SecurityGroupsReady"):
        assert conditions(claim)[typ]["status"] == conditions(xr)[typ]["status"], typ
    # The cluster-scoped kinds of the legacy flavour, Usages included.
    assert {(o["kind"], o["apiVersion"]) for o in edge.composed().values()} <= {(k, v[0]) for k, v in KINDS.items()}


def test_creations_follow_the_functions_gates(edge: Composite) -> None:
    deps = assert_creations_follow_gates(edge)
    # Calico's CRDs are a chart of their own, installed first, from tigera-operator v3.32
    # (function/addons/calico.py); the default for the example's Kubernetes minor may be older,
    # its CRDs then in the operator's chart (function/data/kubernetes-compatibility.json).
    if "calico-crds-release" in edge.composed():
        assert "calico-crds-release" in deps["cni-release"]
    # What installs pods waits for the CNI.
    assert "cni-release" in deps["cert-manager-release"]


def test_deleting_the_claim_removes_everything(edge: Composite) -> None:
    composed = edge.composed()
    usages = {n: o for n, o in composed.items() if n.startswith("usage-")}
    claim = edge.resource()
    assert claim is not None
    edge.kube.delete(claim["apiVersion"], claim["kind"], claim["metadata"]["name"], NAMESPACE)
    edge.kube.wait_for(lambda: edge.resource() is None, "the claim gone", timeout_s=60)
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in composed.values()}
    edge.kube.wait_for(
        lambda: all(edge.kube.get(a, k, n) is None for a, k, n in names),
        "every composed resource deleted",
        timeout_s=180,
    )
    assert_deleted_in_usage_order(edge, usages)
    assert not [e for e in edge.providers.history() if e.what == "hung"]
