"""AWS Load Balancer Controller: a custom IAM policy (upstream iam_policy.json), role and chart."""

from __future__ import annotations

from typing import Any

from function.addons import security_groups
from function.addons.helm import IRSA_ANNOTATION, release, service_account
from function.addons.iam import custom_policy_role_nodes, custom_policy_usages, tags
from function.graph import (
    Addon,
    Ctx,
    MissingFactError,
    Node,
    OwnedValues,
    Plugin,
    Wait,
    addon_release_gates,
)
from function.names import IAM_PATH
from function.policies import lbc_policy
from function.spec import IRSAMode

PLUGIN = "aws-load-balancer-controller"
# The add-on's part of its IAM names and tags (names.role, names.policy).
IAM_NAME = "lbc"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-load-balancer-controller"
ROLE = "lbc-role"
POLICY = "lbc-policy"
OWNED = (
    ("clusterName",),
    ("serviceAccount", "name"),
    ("serviceAccount", "annotations", IRSA_ANNOTATION),
)


def policy(ctx: Ctx) -> dict[str, Any]:
    """The controller's customer-managed policy."""
    return ctx.flavour.managed(
        "Policy",
        {
            "policy": lbc_policy(ctx.partition),
            "path": IAM_PATH,
            "description": "AWS Load Balancer Controller v3.5.0 (upstream iam_policy.json)",
            "tags": tags(ctx, IAM_NAME),
        },
        external_name=ctx.names.policy(IAM_NAME),
    )


def _vpc_id(ctx: Ctx) -> str:
    if ctx.facts.vpc_id:
        return ctx.facts.vpc_id
    raise MissingFactError(Wait("VPC id", "the AWSCluster reports no spec.network.vpc.id yet"))


def lbc_release(ctx: Ctx) -> dict[str, Any]:
    """The controller, told its cluster, region and VPC (IMDS is often out of reach of pods)."""
    spec = ctx.spec.ingress.aws_load_balancer_controller
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    role_arn = None if ctx.irsa is IRSAMode.DISABLED else ctx.arn_of(ROLE)
    values = {
        # Must match the kubernetes.io/cluster/<name> tag CAPA puts on subnets.
        "clusterName": ctx.facts.kubernetes_cluster_name or ctx.spec.cluster_name,
        "region": ctx.region,
        "vpcId": _vpc_id(ctx),
        "serviceAccount": service_account(SERVICE_ACCOUNT, role_arn),
    }
    return release(
        ctx,
        chart=ctx.step.charts.load_balancer_controller,
        version=spec.version,
        namespace=NAMESPACE,
        release_name="aws-load-balancer-controller",
        values=values,
        user_values=spec.values,
    )


def plugin(ctx: Ctx) -> Plugin | None:
    """The load balancer controller plugin, when wanted."""
    if ctx.spec.ingress.aws_load_balancer_controller is None:
        return None
    nodes: list[Node] = []
    if ctx.irsa is not IRSAMode.DISABLED:
        nodes += custom_policy_role_nodes(
            policy_node=POLICY,
            policy=policy,
            node=ROLE,
            addon=IAM_NAME,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
        )
    nodes.append(Node("lbc-release", lbc_release, addon_release_gates(ROLE)))
    nodes += security_groups.nodes(ctx, PLUGIN)
    return Plugin(PLUGIN, tuple(nodes), role_key="loadBalancerController", role_node=ROLE)


ADDON = Addon(
    plugin,
    owned_values=(
        OwnedValues(
            "spec.ingress.awsLoadBalancerController.values",
            lambda s: s.ingress.aws_load_balancer_controller,
            OWNED,
        ),
    ),
    usages=(
        (
            "lbc-release",
            ROLE,
            "the load balancer controller uses this role until it is uninstalled",
        ),
        (
            "lbc-release",
            "cni-release",
            "the load balancer controller needs the CNI until it is gone",
        ),
        *custom_policy_usages(ROLE, POLICY),
    ),
)
