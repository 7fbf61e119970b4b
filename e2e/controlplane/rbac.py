"""Crossplane with its Helm chart's RBAC instead of ``system:masters``.

Crossplane core and its RBAC manager each get a client certificate named as the service
account the chart runs them as (``system:serviceaccount:crossplane-system:crossplane`` and
``...:rbac-manager``), and the chart's ClusterRoles and ClusterRoleBindings are applied as
``helm template`` renders them from core's own module (``cluster/charts/crossplane``). The RBAC
manager runs for real (``crossplane rbac start``): from each XRD it grants core the composite
kinds, aggregated into the ``crossplane`` ClusterRole.

The providers are not packages here, so what the RBAC manager grants core for a provider's
ProviderRevision is played from its code (``internal/controller/rbac/provider/roles``,
``RenderClusterRoles``: the edit role of each provider's CRDs, aggregated to crossplane).
Cluster API is not a Crossplane provider: nothing grants core its kinds but what the project
asks users to apply, ``apis/rbac``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane.harness import (
    CROSSPLANE_NAMESPACE,
    FIXTURE_CRDS,
    ROOT,
    ControlPlane,
    kubeconfig_file,
)
from e2e.controlplane.processes import wait_until
from tests.helm import helm_binary

CORE_ACCOUNT = "crossplane"
RBAC_MANAGER_ACCOUNT = "rbac-manager"
PROJECT_RBAC = ROOT / "apis" / "rbac"
# The CRDs under tests/fixtures/crds that Crossplane providers install, one directory each
# (provider-*; the others are Cluster API's).
PROVIDER_CRDS = tuple(sorted(p.name for p in FIXTURE_CRDS.glob("provider-*") if p.is_dir()))
RBAC_KINDS = frozenset({"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"})


def username(account: str) -> str:
    """The user name the API server gives a service account (and RBAC subjects match)."""
    return f"system:serviceaccount:{CROSSPLANE_NAMESPACE}:{account}"


def chart_rbac(chart: Path) -> list[dict[str, Any]]:
    """The RBAC objects of Crossplane's Helm chart, rendered for crossplane-system."""
    out = subprocess.run(
        [str(helm_binary()), "template", "crossplane", str(chart), "--namespace", CROSSPLANE_NAMESPACE],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] in RBAC_KINDS]


def provider_edit_role(provider: str) -> dict[str, Any]:
    """The ClusterRole the RBAC manager renders for a provider's CRDs that aggregates to
    crossplane: every kind and its status, all verbs; finalizers of every kind, update."""
    resources: dict[str, list[str]] = {}
    for path in sorted((FIXTURE_CRDS / provider).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        plural = crd["spec"]["names"]["plural"]
        resources.setdefault(crd["spec"]["group"], []).extend([plural, f"{plural}/status"])
    groups = sorted(resources)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": f"crossplane:provider:{provider}:aggregate-to-edit",
            "labels": {"rbac.crossplane.io/aggregate-to-crossplane": "true"},
        },
        "rules": [
            *({"apiGroups": [g], "resources": sorted(resources[g]), "verbs": ["*"]} for g in groups),
            {"apiGroups": groups, "resources": ["*/finalizers"], "verbs": ["update"]},
        ],
    }


def project_rbac(name: str) -> dict[str, Any]:
    """``apis/rbac/<name>``: what the README has users apply beside the Configuration."""
    return yaml.safe_load((PROJECT_RBAC / name).read_text())


class ChartRBACControlPlane(ControlPlane):
    """A control plane whose Crossplane is who the Helm chart makes it, not ``system:masters``.

    ``apis/rbac`` is not applied at start: a test applies it (``apply_project_rbac``), as
    the README's step does.
    """

    # The chart's ``crossplane`` ClusterRole is an aggregation: kube-controller-manager's
    # clusterrole-aggregation controller fills it in.
    controllers = (*ControlPlane.controllers, "clusterrole-aggregation")

    def steps(self) -> list[tuple[str, Any]]:
        steps = super().steps()
        at = [name for name, _ in steps].index("function")
        return [*steps[:at], ("chart RBAC", self._chart_rbac), ("rbac-manager", self._rbac_manager), *steps[at:]]

    def _certificates(self) -> None:
        super()._certificates()
        self.core_identity = self.ca.leaf(username(CORE_ACCOUNT), client=True, organization="system:serviceaccounts")
        self.rbac_manager_identity = self.ca.leaf(
            username(RBAC_MANAGER_ACCOUNT), client=True, organization="system:serviceaccounts"
        )

    def crossplane_kubeconfig(self) -> Path:
        return kubeconfig_file(self.root / "kubeconfig-crossplane", self.server, self.ca.path, self.core_identity)

    def _chart_rbac(self) -> None:
        chart = self.tool_source("crossplane-core") / "cluster" / "charts" / "crossplane"
        objects = chart_rbac(chart)
        bound = {s["name"] for o in objects if o["kind"] == "ClusterRoleBinding" for s in o["subjects"] if s["kind"] == "ServiceAccount"}
        assert {CORE_ACCOUNT, RBAC_MANAGER_ACCOUNT} <= bound, f"the chart binds {sorted(bound)}"
        for obj in objects:
            self.kube.apply(obj)
        for provider in PROVIDER_CRDS:
            self.kube.apply(provider_edit_role(provider))

    def _rbac_manager(self) -> None:
        config = kubeconfig_file(self.root / "kubeconfig-rbac-manager", self.server, self.ca.path, self.rbac_manager_identity)
        process = self._start(
            "rbac-manager",
            [
                str(self.tool("crossplane-core")),
                "rbac",
                "start",
                "--provider-clusterrole=crossplane:allowed-provider-permissions",
                "--debug",
            ],
            env={"KUBECONFIG": str(config), "POD_NAMESPACE": CROSSPLANE_NAMESPACE},
        )
        wait_until(process, lambda: "Starting workers" in process.log_path.read_text(errors="replace"), "its controllers started", timeout_s=90)

    def apply_project_rbac(self, name: str) -> None:
        self.kube.apply(project_rbac(name))

    def may(self, account: str, verb: str, group: str, resource: str, namespace: str = "") -> bool:
        """Whether the API server lets ``account`` do ``verb`` (a SubjectAccessReview)."""
        attrs: dict[str, str] = {"verb": verb, "group": group, "resource": resource}
        if namespace:
            attrs["namespace"] = namespace
        review = self.kube.create(
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": username(account), "groups": ["system:serviceaccounts"], "resourceAttributes": attrs},
            }
        )
        return bool(review.get("status", {}).get("allowed"))
