"""Amazon VPC CNI: the aws-vpc-cni chart with an IRSA role holding AmazonEKS_CNI_Policy."""

from __future__ import annotations

from typing import Any

from function import structs
from function.addons import irsa
from function.addons.kit import cni, iam, security_groups
from function.addons.kit.helm import IRSA_ANNOTATION, release, service_account
from function.context import CallContext
from function.graph import Addon, Plugin, PortNeed, Release, Role, Usage, control_plane_initialized
from function.spec_base import AddonSpec

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class AmazonVPCSpec(AddonSpec):
    """Amazon VPC CNI (aws-vpc-cni chart, IRSA role with AmazonEKS_CNI_Policy)."""

RELEASE = Release(
    cni.RELEASE,
    lambda charts: charts.vpc_cni,
    namespace="kube-system",
    name="aws-vpc-cni",
    service_account="aws-node",
    wait=True,
)
ROLE = Role(
    "vpc-cni-role", "vpc-cni", status_key="vpcCni", managed_policy="policy/AmazonEKS_CNI_Policy"
)
OWNED = (("serviceAccount", "name"), ("serviceAccount", "annotations", IRSA_ANNOTATION))
# Set once the webhook is ready: the pod-template change restarts aws-node,
# which started before the webhook existed and so got no IRSA credentials.
RESTART_ANNOTATION = "clusterplugin.dev/restarted-for-irsa"
# Pods get VPC addresses behind the node ENIs' groups: allow all traffic between
# node and control-plane groups, as EKS's cluster group does.
PORTS = (security_groups.cni_need("vpc-cni-all", "-1", -1, 65535, "all traffic (vpc-cni)"),)


def _restarted(ctx: CallContext) -> bool:
    if not irsa.webhook_installed(ctx):
        return False
    if ctx.is_ready(irsa.WEBHOOK.node):
        return True
    # Once set it stays set, so a webhook flap never restarts aws-node again.
    observed = ctx.observed.get(RELEASE.node)
    return observed is not None and (
        structs.str_at(
            observed, "spec", "forProvider", "values", "podAnnotations", RESTART_ANNOTATION
        )
        is not None
    )


def cni_release(ctx: CallContext) -> dict[str, Any]:
    """The aws-vpc-cni Release."""
    spec = ADDON.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values: dict[str, Any] = {
        "serviceAccount": service_account(RELEASE.service_account, iam.role_arn(ctx, ROLE))
    }
    if _restarted(ctx):
        values["podAnnotations"] = {RESTART_ANNOTATION: "true"}
    return release(ctx, RELEASE, values=values, version=spec.version, user_values=spec.values)


def ports(_: AmazonVPCSpec) -> tuple[PortNeed, ...]:
    """All traffic between the node and control-plane groups."""
    return PORTS


# The CNI runs on the host network: it waits neither for the CCM nor for the webhook.
_RELEASE = RELEASE.as_node(cni_release, (control_plane_initialized, iam.role_ready(ROLE)))


def plugin(ctx: CallContext) -> Plugin | None:
    """The VPC CNI plugin, when wanted."""
    spec = ADDON.spec(ctx.spec)
    if spec is None:
        return None
    return iam.plugin(ctx, ADDON, _RELEASE, spec)


ADDON = Addon(
    "vpc-cni",
    plugin,
    spec_path="spec.networking.amazonVPC",
    title="the Amazon VPC CNI",
    eks_addon="vpc-cni",
    release=RELEASE,
    role=ROLE,
    owned_values=OWNED,
    ports=ports,
    usages=(
        Usage(RELEASE.node, ROLE.node, "aws-node uses this role until it is uninstalled"),
        *iam.role_usages(ROLE, RELEASE.node),
    ),
)
