"""AWS Load Balancer Controller: a custom IAM policy (upstream iam_policy.json), role and chart."""

from __future__ import annotations

from typing import Any

from function.addons.kit import cni, iam
from function.addons.kit.helm import IRSA_ANNOTATION, release, service_account
from function.context import CallContext
from function.graph import (
    CONTROL_PLANE,
    NODE,
    Addon,
    CustomPolicy,
    MissingFactError,
    Plugin,
    PortNeed,
    Release,
    Role,
    Usage,
    Wait,
)
from function.policies import (
    UnknownChartVersionError,
    lbc_policy,
    lbc_policy_version,
    union_policy,
)
from function.spec_base import AddonSpec

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class LBCSpec(AddonSpec):
    """AWS Load Balancer Controller."""

RELEASE = Release(
    "lbc-release",
    lambda charts: charts.load_balancer_controller,
    namespace="kube-system",
    name="aws-load-balancer-controller",
    service_account="aws-load-balancer-controller",
)


def _policy_document(ctx: CallContext, versions: tuple[str, ...]) -> str:
    """The upstream policy of each chart version's controller, as one (their union)."""
    return union_policy(*(lbc_policy(ctx.partition, v) for v in versions))


def version_problem(version: str) -> str | None:
    """Why the function cannot give chart ``version`` its IAM policy, or None."""
    try:
        lbc_policy_version(version)
    except UnknownChartVersionError as err:
        return f"{err}: its IAM policy goes with it, and the function has none for it"
    return None


ROLE = Role(
    "lbc-role",
    "lbc",
    status_key="loadBalancerController",
    policy=CustomPolicy(
        "lbc-policy",
        _policy_document,
        "AWS Load Balancer Controller (upstream iam_policy.json of its chart's version)",
        versioned=True,
    ),
)
OWNED = (
    ("clusterName",),
    ("serviceAccount", "name"),
    ("serviceAccount", "annotations", IRSA_ANNOTATION),
)
PORTS = (
    PortNeed(
        "lbc-webhook",
        "tcp",
        9443,
        9443,
        (NODE,),
        (CONTROL_PLANE,),
        "additionalNodeIngressRules",
        "aws-load-balancer-controller webhook",
    ),
)


def _vpc_id(ctx: CallContext) -> str:
    if ctx.facts.vpc_id:
        return ctx.facts.vpc_id
    raise MissingFactError(Wait("VPC id", "the AWSCluster reports no spec.network.vpc.id yet"))


def lbc_release(ctx: CallContext) -> dict[str, Any]:
    """The controller, told its cluster, region and VPC (IMDS is often out of reach of pods)."""
    spec = ADDON.spec(ctx.spec)
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    values = {
        # Must match the kubernetes.io/cluster/<name> tag CAPA puts on subnets.
        "clusterName": ctx.facts.kubernetes_cluster_name or ctx.spec.cluster_name,
        "region": ctx.region,
        "vpcId": _vpc_id(ctx),
        "serviceAccount": service_account(RELEASE.service_account, iam.role_arn(ctx, ROLE)),
    }
    return release(ctx, RELEASE, values=values, version=spec.version, user_values=spec.values)


def ports(_: LBCSpec) -> tuple[PortNeed, ...]:
    """The controller's webhook, called by the API server on the nodes."""
    return PORTS


_RELEASE = RELEASE.as_node(lbc_release, iam.release_gates(ROLE))


def plugin(ctx: CallContext) -> Plugin | None:
    """The load balancer controller plugin, when wanted."""
    spec = ADDON.spec(ctx.spec)
    return None if spec is None else iam.plugin(ctx, ADDON, _RELEASE, spec)


ADDON = Addon(
    "aws-load-balancer-controller",
    plugin,
    spec_path="spec.ingress.awsLoadBalancerController",
    title="the AWS Load Balancer Controller",
    release=RELEASE,
    role=ROLE,
    owned_values=OWNED,
    ports=ports,
    makes_load_balancers=True,
    version_problem=version_problem,
    usages=(
        Usage(
            RELEASE.node,
            ROLE.node,
            "the load balancer controller uses this role until it is uninstalled",
        ),
        cni.needed_by(RELEASE.node, "the load balancer controller needs the CNI until it is gone"),
        *iam.role_usages(ROLE, RELEASE.node),
    ),
)
