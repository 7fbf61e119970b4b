"""Calico: the Calico CRDs chart, then tigera-operator with the cluster's pod CIDR. No IAM."""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator

from function import compat
from function.addons.kit import cni, security_groups
from function.addons.kit.helm import chart_version, release
from function.context import CallContext
from function.graph import (
    Addon,
    MissingFactError,
    Plugin,
    PortNeed,
    Release,
    Usage,
    Wait,
    after,
    control_plane_initialized,
)
from function.spec_base import CIDR_V4, AddonSpec

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class CalicoEncapsulation(StrEnum):
    """Calico IP pool encapsulation."""

    IPIP = "IPIP"
    VXLAN = "VXLAN"
    NONE = "None"


class CalicoSpec(AddonSpec):
    """Calico through the tigera-operator chart (no IAM role)."""

    encapsulation: CalicoEncapsulation = Field(
        default=CalicoEncapsulation.IPIP,
        description=(
            "Encapsulation of the default IP pool: IPIP or VXLAN between nodes, or None for a "
            "flat network (every node in one subnet)."
        ),
    )
    cidr: str | None = Field(
        default=None,
        description=(
            "IPv4 pod CIDR of the default IP pool, e.g. 192.168.0.0/16. Unset: the Cluster's "
            "spec.clusterNetwork.pods.cidrBlocks[0], or the KubeadmControlPlane's "
            "networking.podSubnet. On Crossplane 1.x, which cannot read those for the "
            "function, set it here."
        ),
        json_schema_extra={"pattern": CIDR_V4.pattern},
    )

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str | None) -> str | None:
        if v is not None and not CIDR_V4.match(v):
            msg = f"{v!r} is not an IPv4 CIDR such as 192.168.0.0/16"
            raise ValueError(msg)
        return v

NAMESPACE = "tigera-operator"
# tigera-operator v3.32+ no longer ships Calico's CRDs: they are a chart of their own,
# installed first. Before it, the operator's chart carries them (crds/), and a move to v3.32
# adopts the CRDs that chart left (takeOwnership) before the operator moves.
CRDS_APART_SINCE = "v3.32.0"
CRDS = Release(
    "calico-crds-release",
    lambda charts: charts.calico_crds,
    NAMESPACE,
    "calico-crds",
    take_ownership=True,
)
OPERATOR = Release(
    cni.RELEASE, lambda charts: charts.calico, NAMESPACE, "tigera-operator", wait=True
)
OWNED = (("installation", "calicoNetwork", "ipPools"), ("installation", "calicoNetwork", "bgp"))


def _pod_cidr(ctx: CallContext) -> str:
    spec = ADDON.spec(ctx.spec)
    if spec is not None and spec.cidr:
        return spec.cidr
    if ctx.facts.pod_cidr:
        return ctx.facts.pod_cidr
    if ctx.facts.cluster_found:
        raise MissingFactError(
            Wait(
                "pod CIDR",
                f"set {ADDON.spec_path}.cidr, or the Cluster's spec.clusterNetwork.pods.cidrBlocks",
                blocked=True,
            )
        )
    if ctx.facts.control_plane_found:
        # Crossplane 1.x reads no Cluster (its selectors carry no namespace, see
        # function/cluster.py): only the spec or the control plane can say.
        raise MissingFactError(
            Wait(
                "pod CIDR",
                f"set {ADDON.spec_path}.cidr: on Crossplane 1.x the function cannot read "
                "the namespaced Cluster (its spec.clusterNetwork), and the control plane "
                "sets no kubeadm clusterConfiguration.networking.podSubnet",
                blocked=True,
            )
        )
    raise MissingFactError(Wait("Cluster", "the Cluster API Cluster has not been read yet"))


def crds_release(ctx: CallContext) -> dict[str, Any]:
    """Calico's CRDs."""
    spec = ADDON.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    return release(ctx, CRDS, values={}, version=spec.version)


def cni_release(ctx: CallContext) -> dict[str, Any]:
    """tigera-operator with one IPv4 pool on the cluster's pod CIDR."""
    spec = ADDON.spec(ctx.spec)
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
    return release(ctx, OPERATOR, values=values, version=spec.version, user_values=spec.values)


@functools.cache  # one per encapsulation
def _ports(encapsulation: CalicoEncapsulation) -> tuple[PortNeed, ...]:
    def need(purpose: str, protocol: str, lo: int, hi: int, what: str) -> PortNeed:
        return security_groups.cni_need(purpose, protocol, lo, hi, what)

    # The operator always deploys Typha; CAPA's default Calico rules lack it.
    needs = [need("calico-typha", "tcp", 5473, 5473, "typha (calico)")]
    if encapsulation is CalicoEncapsulation.VXLAN:
        needs.append(need("calico-vxlan", "udp", 4789, 4789, "vxlan (calico)"))
    else:
        needs.append(need("calico-bgp", "tcp", 179, 179, "bgp (calico)"))
    if encapsulation is CalicoEncapsulation.IPIP:
        needs.append(need("calico-ipip", "4", -1, 65535, "IP-in-IP (calico)"))
    return tuple(needs)


def ports(spec: CalicoSpec) -> tuple[PortNeed, ...]:
    """Typha, and VXLAN or BGP (and IP-in-IP) between every node."""
    return _ports(spec.encapsulation)


_CRDS_APART = (
    CRDS.as_node(crds_release, (control_plane_initialized,)),
    OPERATOR.as_node(cni_release, (control_plane_initialized, after(CRDS.node))),
)
_CRDS_IN_THE_OPERATOR = (OPERATOR.as_node(cni_release, (control_plane_initialized,)),)


def _crds_apart(ctx: CallContext, spec: CalicoSpec) -> bool:
    """Whether Calico's CRDs are a Release of their own in this call."""
    if ctx.observed.exists(CRDS.node):
        # Never withdrawn while Calico is wanted: its uninstall would delete the CRDs, and
        # with them every Calico object.
        return True
    try:
        version = chart_version(ctx, OPERATOR, spec.version)
    except MissingFactError:
        return True  # nothing of Calico is composed before the control plane is read
    return compat.at_least(version, CRDS_APART_SINCE)


def plugin(ctx: CallContext) -> Plugin | None:
    """The Calico plugin, when wanted."""
    spec = ADDON.spec(ctx.spec)
    if spec is None:
        return None
    releases = _CRDS_APART if _crds_apart(ctx, spec) else _CRDS_IN_THE_OPERATOR
    return Plugin(ADDON.name, (*releases, *security_groups.nodes(ctx, ports(spec))))


ADDON = Addon(
    "calico",
    plugin,
    spec_path="spec.networking.calico",
    title="Calico",
    release=OPERATOR,
    extra_releases=(CRDS,),
    owned_values=OWNED,
    ports=ports,
    usages=(Usage(OPERATOR.node, CRDS.node, "tigera-operator needs Calico's CRDs"),),
)
