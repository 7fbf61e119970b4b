"""The control plane with Crossplane 1.x core instead of v2: the legacy API as a 1.x user runs it.

The same processes as ``harness.ControlPlane`` (etcd, kube-apiserver, the controller manager,
the function served with mTLS and installed from the package cache), but Crossplane core is
``crossplane-core-1`` of ``e2e/tools.json`` (v1.20.13, the newest 1.20 the Go module proxy
serves), with its own CRDs and usage webhook. 1.20's ``core start`` has the External package
runtime and the TLS directories v2 has, but no watch circuit breaker (added in v2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.controlplane.harness import ControlPlane

# The groups whose kinds Cluster API moved to the v1beta2 contract in v1.11.
CAPI_GROUPS = frozenset({"cluster.x-k8s.io", "controlplane.cluster.x-k8s.io", "bootstrap.cluster.x-k8s.io"})


class CrossplaneOneControlPlane(ControlPlane):
    core_tool = "crossplane-core-1"

    def core_version_args(self) -> list[str]:
        return []

    def crds(self) -> list[dict[str, Any]]:
        """Cluster API's kinds as a CAPI before v1.11 serves them: v1beta1 only, and stored so.

        The vendored CRDs are CAPI v1.11's: v1beta2 stored, v1beta1 served beside it, converted
        by CAPI's webhook, which does not run here. Without it, a v1beta1 object is stored as
        it is written, pruned by the v1beta2 schema: its kubeadm ``networking`` and its
        ``extraArgs`` map are lost. The legacy example is written for a CAPI that serves
        v1beta1 alone (its Composition asks for it), as a Crossplane 1.x user's often does.
        """
        out = super().crds()
        for crd in out:
            v1beta1 = next((v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"), None)
            if crd["spec"]["group"] in CAPI_GROUPS and v1beta1 is not None:
                crd["spec"]["versions"] = [{**v1beta1, "served": True, "storage": True}]
        return out

    def cached_package(self, source: str, digest: str) -> Path:
        # 1.20 keys a package with packagePullPolicy Never by its source as written, slashes
        # and all (revision/reconciler.go: ``id = pr.GetSource()``; xpkg.BuildPath), where v2
        # keys it by FriendlyID.
        return self.xpkg_cache / f"{source}@{digest}.gz"


__all__ = ["CrossplaneOneControlPlane"]
