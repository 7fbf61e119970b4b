"""Calico: the Calico CRDs chart, then tigera-operator with the cluster's pod CIDR. No IAM."""

from __future__ import annotations

from typing import Any

from function.addons import security_groups
from function.addons.helm import release
from function.graph import (
    Addon,
    Ctx,
    MissingFactError,
    Node,
    OwnedValues,
    Plugin,
    Wait,
    after,
    control_plane_initialized,
)
from function.spec import CalicoEncapsulation

PLUGIN = "calico"
NAMESPACE = "tigera-operator"
OWNED = (("installation", "calicoNetwork", "ipPools"), ("installation", "calicoNetwork", "bgp"))


def _pod_cidr(ctx: Ctx) -> str:
    spec = ctx.spec.networking.calico
    if spec is not None and spec.cidr:
        return spec.cidr
    if ctx.facts.pod_cidr:
        return ctx.facts.pod_cidr
    if ctx.facts.cluster_found or ctx.facts.control_plane_found:
        raise MissingFactError(
            Wait(
                "pod CIDR",
                "set spec.networking.calico.cidr, "
                "or the Cluster's spec.clusterNetwork.pods.cidrBlocks",
                blocked=True,
            )
        )
    raise MissingFactError(Wait("Cluster", "the Cluster API Cluster has not been read yet"))


def crds_release(ctx: Ctx) -> dict[str, Any]:
    """Calico's CRDs: tigera-operator v3.32+ no longer ships them."""
    spec = ctx.spec.networking.calico
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    return release(
        ctx,
        chart=ctx.step.charts.calico_crds,
        version=spec.version,
        namespace=NAMESPACE,
        release_name="calico-crds",
        values={},
    )


def cni_release(ctx: Ctx) -> dict[str, Any]:
    """tigera-operator with one IPv4 pool on the cluster's pod CIDR."""
    spec = ctx.spec.networking.calico
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    encapsulation = spec.encapsulation
    values = {
        "installation": {
            # "" is self-managed Kubernetes (not EKS/GKE/AKS...).
            "kubernetesProvider": "",
            "cni": {"type": "Calico"},
            "calicoNetwork": {
                # VXLAN needs no BGP mesh; IPIP and unencapsulated routing do.
                "bgp": "Disabled" if encapsulation is CalicoEncapsulation.VXLAN else "Enabled",
                "ipPools": [
                    {
                        "name": "default-ipv4-ippool",
                        "cidr": _pod_cidr(ctx),
                        "encapsulation": encapsulation.value,
                        "natOutgoing": "Enabled",
                        "nodeSelector": "all()",
                        "blockSize": 26,
                    }
                ],
            },
        }
    }
    return release(
        ctx,
        chart=ctx.step.charts.calico,
        version=spec.version,
        namespace=NAMESPACE,
        release_name="tigera-operator",
        values=values,
        user_values=spec.values,
        wait=True,
    )


def plugin(ctx: Ctx) -> Plugin | None:
    """The Calico plugin, when wanted."""
    if ctx.spec.networking.calico is None:
        return None
    nodes = [
        Node("calico-crds-release", crds_release, (control_plane_initialized,)),
        Node("cni-release", cni_release, (control_plane_initialized, after("calico-crds-release"))),
        *security_groups.nodes(ctx, PLUGIN),
    ]
    return Plugin(PLUGIN, tuple(nodes))


ADDON = Addon(
    plugin,
    owned_values=(
        OwnedValues("spec.networking.calico.values", lambda s: s.networking.calico, OWNED),
    ),
    usages=(("cni-release", "calico-crds-release", "tigera-operator needs Calico's CRDs"),),
)
