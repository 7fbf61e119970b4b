"""Amazon VPC CNI: the aws-vpc-cni chart with an IRSA role holding AmazonEKS_CNI_Policy."""

from __future__ import annotations

from typing import Any

from function import structs
from function.addons import security_groups
from function.addons.helm import IRSA_ANNOTATION, release, service_account
from function.addons.iam import managed_policy, role_nodes, role_usages
from function.graph import (
    Addon,
    Ctx,
    Node,
    OwnedValues,
    Plugin,
    control_plane_initialized,
    role_ready,
    webhook_installed,
)
from function.spec import IRSAMode

PLUGIN = "vpc-cni"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "aws-node"
ROLE = "vpc-cni-role"
OWNED = (("serviceAccount", "name"), ("serviceAccount", "annotations", IRSA_ANNOTATION))
# Set once the webhook is ready: the pod-template change restarts aws-node,
# which started before the webhook existed and so got no IRSA credentials.
RESTART_ANNOTATION = "clusterplugin.dev/restarted-for-irsa"


def _restarted(ctx: Ctx) -> bool:
    if not webhook_installed(ctx):
        return False
    if ctx.is_ready("pod-identity-webhook-release"):
        return True
    # Once set it stays set, so a webhook flap never restarts aws-node again.
    observed = ctx.observed.get("cni-release")
    return observed is not None and (
        structs.str_at(
            observed, "spec", "forProvider", "values", "podAnnotations", RESTART_ANNOTATION
        )
        is not None
    )


def cni_release(ctx: Ctx) -> dict[str, Any]:
    """The aws-vpc-cni Release."""
    spec = ctx.spec.networking.amazon_vpc
    assert spec is not None  # noqa: S101  # plugin() only adds this node when set
    role_arn = None if ctx.irsa is IRSAMode.DISABLED else ctx.arn_of(ROLE)
    values: dict[str, Any] = {"serviceAccount": service_account(SERVICE_ACCOUNT, role_arn)}
    if _restarted(ctx):
        values["podAnnotations"] = {RESTART_ANNOTATION: "true"}
    return release(
        ctx,
        chart=ctx.step.charts.vpc_cni,
        version=spec.version,
        namespace=NAMESPACE,
        release_name="aws-vpc-cni",
        values=values,
        user_values=spec.values,
        wait=True,
    )


def plugin(ctx: Ctx) -> Plugin | None:
    """The VPC CNI plugin, when wanted."""
    if ctx.spec.networking.amazon_vpc is None:
        return None
    nodes: list[Node] = []
    if ctx.irsa is not IRSAMode.DISABLED:
        nodes += role_nodes(
            node=ROLE,
            addon=PLUGIN,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            policy_arn=managed_policy(PLUGIN),
        )
    nodes.append(Node("cni-release", cni_release, (control_plane_initialized, role_ready(ROLE))))
    nodes += security_groups.nodes(ctx, PLUGIN)
    return Plugin(PLUGIN, tuple(nodes), role_key="vpcCni", role_node=ROLE)


ADDON = Addon(
    plugin,
    owned_values=(
        OwnedValues("spec.networking.amazonVPC.values", lambda s: s.networking.amazon_vpc, OWNED),
    ),
    usages=(
        ("cni-release", ROLE, "aws-node uses this role until it is uninstalled"),
        *role_usages(ROLE),
    ),
)
