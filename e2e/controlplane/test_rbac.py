"""Crossplane with its Helm chart's RBAC, and the RBAC the README has users apply.

Every other module runs Crossplane as ``system:masters``. Here core and its RBAC manager are
the service accounts of Crossplane's chart (``e2e/controlplane/rbac.py``), so nothing but
``apis/rbac`` lets Crossplane touch the Cluster API objects: without ``clusterrole.yaml`` the
XR cannot get its Cluster, with it (README, "Install") it converges; with ``protectCluster``
the Usage of the Cluster holds only once ``clusterrole-protect-cluster.yaml`` lets Crossplane
label the Cluster in use.
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
# Crossplane's usage controller labels a used object so that its webhook sees its deletion.
IN_USE = "crossplane.io/in-use"
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


@pytest.fixture(scope="module")
def namespaced_api(control_plane: ControlPlane, namespaced_providers: Providers) -> Iterator[dict]:
    """apis/v2 with Input.protectCluster (this module's own, in place of conftest's)."""
    composition = control_plane.install_api("v2", edit_input=lambda step: step.update(protectCluster=True))
    yield composition
    control_plane.remove_api("v2")


def test_crossplane_is_not_an_admin(rbac_plane: ChartRBACControlPlane) -> None:
    """The checks below mean something: core may do what its chart grants, not everything;
    before apis/rbac is applied (the next test applies it), nothing of Cluster API."""
    assert rbac_plane.may(CORE_ACCOUNT, "create", "apiextensions.k8s.io", "customresourcedefinitions")
    assert rbac_plane.may(CORE_ACCOUNT, "get", "", "secrets", NAMESPACE)
    assert not rbac_plane.may(CORE_ACCOUNT, "create", "rbac.authorization.k8s.io", "clusterroles")
    for group, resource in CAPI_READS:
        assert not rbac_plane.may(CORE_ACCOUNT, "list", group, resource, NAMESPACE), (group, resource)


def test_the_xr_converges_and_its_cluster_is_protected_once_apis_rbac_is_applied(
    rbac_plane: ChartRBACControlPlane, namespaced_api: dict, namespaced_providers: Providers
) -> None:
    composite = Composite(rbac_plane, namespaced_providers, "selfhosted-full", namespaced_api, NAMESPACE)
    composite.create(staged=False)

    # Without apis/rbac the API server refuses Crossplane the Cluster the function asks for.
    # Crossplane reads required resources through an informer, which then never syncs: its
    # log says "forbidden" at once, while the XR only says, two minutes later, "cannot get
    # required resource by name: Timeout: failed waiting for *unstructured.Unstructured
    # Informer to sync" (docs/installing.md, "Installing in detail").
    refusal = r'cannot list resource \"clusters\" in API group \"cluster.x-k8s.io\"'

    def refused() -> list[str] | None:
        return rbac_plane.log_lines("crossplane", refusal) or None

    lines = rbac_plane.kube.wait_for(refused, "Crossplane refused the Cluster", timeout_s=60)
    assert f"system:serviceaccount:{CROSSPLANE_NAMESPACE}:{CORE_ACCOUNT}" in lines[0], lines[0]
    assert not composite.composed(), sorted(composite.composed())

    rbac_plane.apply_project_rbac("clusterrole.yaml")

    # kube-controller-manager aggregates the new rules into the crossplane ClusterRole.
    def granted() -> bool | None:
        return all(rbac_plane.may(CORE_ACCOUNT, "watch", g, r, NAMESPACE) for g, r in CAPI_READS) or None

    rbac_plane.kube.wait_for(granted, "crossplane may watch the CAPI kinds", timeout_s=30)
    xr = composite.wait_ready(timeout_s=180)
    assert condition_status(xr, "Synced") == "True", conditions(xr)
    assert_converged_like_the_world(composite)

    # protectCluster: the Usage of the Cluster by the helm ProviderConfig. Crossplane's usage
    # controller labels the Cluster in use (an update), which clusterrole.yaml does not allow.
    (usage,) = [o for o in composite.composed().values() if o["kind"] == "Usage" and o["spec"]["of"]["kind"] == "Cluster"]
    cluster = usage["spec"]["of"]
    refusal = r'cannot update resource \"clusters\" in API group \"cluster.x-k8s.io\"'
    rbac_plane.kube.wait_for(
        lambda: rbac_plane.log_lines("crossplane", refusal) or None, "Crossplane refused the in-use label", timeout_s=60
    )

    def labeled() -> dict | None:
        got = rbac_plane.kube.get(cluster["apiVersion"], "Cluster", cluster["resourceRef"]["name"], NAMESPACE) or {}
        return got if got.get("metadata", {}).get("labels", {}).get(IN_USE) == "true" else None

    assert labeled() is None
    rbac_plane.apply_project_rbac("clusterrole-protect-cluster.yaml")
    rbac_plane.kube.wait_for(labeled, "the Cluster labeled in use", timeout_s=120)
    rbac_plane.kube.wait_for(
        lambda: condition_status(rbac_plane.kube.get(usage["apiVersion"], "Usage", usage["metadata"]["name"], NAMESPACE), "Ready") == "True" or None,
        "the Usage of the Cluster Ready",
        timeout_s=60,
    )
    print(f"\nconverged with the chart's RBAC and apis/rbac: {len(composite.composed())} composed resources")
