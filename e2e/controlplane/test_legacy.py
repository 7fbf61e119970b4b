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
    assert_claim_converged,
    assert_claim_deletion_in_usage_order,
    assert_creations_follow_gates,
)
from e2e.controlplane.composite import Composite
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane

NAMESPACE = "platform"


@pytest.fixture(scope="module")
def edge(control_plane: ControlPlane, legacy_api: dict, legacy_providers: Providers) -> Iterator[Composite]:
    composite = Composite(control_plane, legacy_providers, "calico-legacy-claim", legacy_api, NAMESPACE, document="claim.yaml")
    composite.converge()
    yield composite


def test_claim_and_xr_converge_ready_with_the_worlds_composed_set(edge: Composite) -> None:
    assert_claim_converged(edge, NAMESPACE)


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
    assert_claim_deletion_in_usage_order(edge, NAMESPACE)
