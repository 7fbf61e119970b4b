"""Crossplane with its Helm chart's RBAC, and the RBAC the README has users apply.

Every other module runs Crossplane as ``system:masters``. Here core and its RBAC manager are
the service accounts of Crossplane's chart (``e2e/controlplane/rbac.py``), so nothing but
``apis/rbac`` lets Crossplane read the Cluster API objects the function asks for: without it
the XR cannot get its Cluster; with it (README, "Install") it converges.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.controlplane.checks import assert_converged_like_the_world
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import CROSSPLANE_NAMESPACE, ControlPlane
from e2e.controlplane.rbac import CORE_ACCOUNT, ChartRBACControlPlane

NAMESPACE = "team-r"
# What the function asks Crossplane to read (function/cluster.py), by API group and resource.
CAPI_READS = (
    ("cluster.x-k8s.io", "clusters"),
    ("controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes"),
    ("infrastructure.cluster.x-k8s.io", "awsclusters"),
)


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """This module's own control plane, with the chart's RBAC (it stands in for the session's)."""
    with running_control_plane(tmp_path_factory.mktemp("rbac"), ChartRBACControlPlane) as cp:
        yield cp


@pytest.fixture(scope="module")
def rbac_plane(control_plane: ControlPlane) -> ChartRBACControlPlane:
    assert isinstance(control_plane, ChartRBACControlPlane)
    return control_plane


def test_crossplane_is_not_an_admin(rbac_plane: ChartRBACControlPlane) -> None:
    """The checks below mean something: core may do what its chart grants, not everything."""
    assert rbac_plane.may(CORE_ACCOUNT, "create", "apiextensions.k8s.io", "customresourcedefinitions")
    assert rbac_plane.may(CORE_ACCOUNT, "get", "", "secrets", NAMESPACE)
    assert not rbac_plane.may(CORE_ACCOUNT, "create", "rbac.authorization.k8s.io", "clusterroles")
    for group, resource in CAPI_READS:
        assert not rbac_plane.may(CORE_ACCOUNT, "list", group, resource, NAMESPACE), (group, resource)


def test_the_xr_converges_once_apis_rbac_is_applied(
    rbac_plane: ChartRBACControlPlane, namespaced_api: dict, namespaced_providers: Providers
) -> None:
    composite = Composite(rbac_plane, namespaced_providers, "selfhosted-full", namespaced_api, NAMESPACE)
    composite.create(staged=False)

    # Without apis/rbac the API server refuses Crossplane the Cluster the function asks for.
    # Crossplane reads required resources through an informer, which then never syncs: its
    # log says "forbidden" at once, while the XR only says, two minutes later, "cannot get
    # required resource by name: Timeout: failed waiting for *unstructured.Unstructured
    # Informer to sync" (README, "Install").
    refusal = r'cannot list resource \"clusters\" in API group \"cluster.x-k8s.io\"'

    def refused() -> list[str] | None:
        return rbac_plane.log_lines("crossplane", refusal) or None

    lines = rbac_plane.kube.wait_for(refused, "Crossplane refused the Cluster", timeout_s=60)
    assert f"system:serviceaccount:{CROSSPLANE_NAMESPACE}:{CORE_ACCOUNT}" in lines[0], lines[0]
    assert not composite.composed(), sorted(composite.composed())

    rbac_plane.apply_project_rbac()

    # kube-controller-manager aggregates the new rules into the crossplane ClusterRole.
    def granted() -> bool | None:
        return all(rbac_plane.may(CORE_ACCOUNT, "watch", g, r, NAMESPACE) for g, r in CAPI_READS) or None

    rbac_plane.kube.wait_for(granted, "crossplane may watch the CAPI kinds", timeout_s=30)
    xr = composite.wait_ready(timeout_s=180)
    assert condition_status(xr, "Synced") == "True", conditions(xr)
    assert_converged_like_the_world(composite)
    print(f"\nconverged with the chart's RBAC and apis/rbac: {len(composite.composed())} composed resources")
