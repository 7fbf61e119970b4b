"""An add-on with an IRSA role: its role, policy and attachment, its release's gates, its plugin.

The role trusts exactly the ServiceAccount its ``Release`` declares, in that
release's namespace, through the cluster's OIDC provider (``irsa``), for the
``sts.amazonaws.com`` audience; it gets the one policy its ``Role`` declares.
With ``irsa.mode: PodIdentity`` (EKS) it trusts ``pods.eks.amazonaws.com`` instead,
for that one ServiceAccount of this cluster as the session tags name them, and a
PodIdentityAssociation (``<role>-association``) binds the two; the chart's
ServiceAccount then carries no role annotation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from function import structs
from function.addons import ccm, irsa, pod_identity
from function.addons.kit import cni, helm, security_groups
from function.context import CallContext
from function.graph import (
    Addon,
    Gate,
    Node,
    Plugin,
    Role,
    Usage,
    Wait,
    after,
    control_plane_available,
    control_plane_initialized,
)
from function.names import CLUSTER_TAG, IAM_PATH
from function.policies import managed_policy_arn, pod_identity_trust_policy, trust_policy
from function.spec_base import IRSAMode

ADDON_TAG = "clusterplugin.dev/addon"


def tags(ctx: CallContext, addon: str) -> dict[str, str]:
    """Tags on every IAM object: who it belongs to, for audits and preflight."""
    return {
        CLUSTER_TAG: f"{ctx.facts.namespace}/{ctx.spec.cluster_name}",
        ADDON_TAG: addon,
    }


def role_arn(ctx: CallContext, role: Role) -> str | None:
    """The role's ARN for its release's ServiceAccount annotation.

    None when IRSA is Disabled, and with Pod Identity: a leftover annotation would keep
    IRSA in use (the SDKs' credential chain takes a web identity first).
    """
    if ctx.irsa in (IRSAMode.DISABLED, IRSAMode.POD_IDENTITY):
        return None
    return ctx.arn_of(role.node)


def _trust(ctx: CallContext, namespace: str, service_account: str) -> tuple[str, str]:
    """(trust policy, how the role is reached) for the mode."""
    if ctx.irsa is IRSAMode.POD_IDENTITY:
        policy = pod_identity_trust_policy(
            ctx.partition,
            ctx.region,
            pod_identity.eks_cluster_name(ctx),
            namespace,
            service_account,
        )
        return policy, "EKS Pod Identity"
    provider = irsa.provider_arn(ctx)
    return trust_policy(provider, ctx.issuer_host_path(), namespace, service_account), "IRSA"


@functools.cache  # one per add-on and mode: the nodes are made once
def role_nodes(addon: Addon, *, pod_identity_mode: bool = False) -> tuple[Node, ...]:
    """The add-on's policy (when its own), role and attachment (and Pod Identity association)."""
    role, release = addon.role, addon.release
    assert role is not None and release is not None  # noqa: S101  # only for add-ons with both
    namespace, service_account = release.namespace, release.service_account

    def role_body(ctx: CallContext) -> dict[str, Any]:
        policy, how = _trust(ctx, namespace, service_account)
        return ctx.flavour.managed(
            "Role",
            {
                "assumeRolePolicy": policy,
                "path": IAM_PATH,
                "description": f"{how} role of {namespace}/{service_account} in cluster "
                f"{ctx.facts.namespace}/{ctx.spec.cluster_name}",
                "tags": tags(ctx, role.iam_name),
            },
            external_name=ctx.names.role(role.iam_name),
        )

    def association(ctx: CallContext) -> dict[str, Any]:
        # Session tags stay on (disableSessionTags unset): the trust policy's conditions
        # are on them.
        return ctx.flavour.managed(
            pod_identity.ASSOCIATION_KIND,
            {
                "region": ctx.region,
                "clusterName": pod_identity.eks_cluster_name(ctx),
                "namespace": namespace,
                "serviceAccount": service_account,
                "roleArn": ctx.arn_of(role.node),
                "tags": tags(ctx, role.iam_name),
            },
        )

    custom = role.policy
    if custom is None:

        def policy_arn(ctx: CallContext) -> str:
            return managed_policy_arn(role.managed_policy, ctx.partition)

    else:

        def policy_arn(ctx: CallContext) -> str:
            return ctx.arn_of(custom.node)

    def attachment(ctx: CallContext) -> dict[str, Any]:
        return ctx.flavour.managed(
            "RolePolicyAttachment",
            {"role": ctx.names.role(role.iam_name), "policyArn": policy_arn(ctx)},
        )

    nodes: tuple[Node, ...] = (
        Node(role.node, role_body, (irsa.oidc_ready,)),
        Node(
            role.attachment,
            attachment,
            (after(role.node),) if custom is None else (after(role.node), after(custom.node)),
        ),
    )
    if pod_identity_mode:
        # After the agent: a pod associated on a node without it gets no credentials
        # (aws-node has been seen to crash-loop silently then); and in an EKS cluster that
        # exists (its control plane initialized).
        gates = (control_plane_initialized, after(role.node), pod_identity.agent_ready)
        association_node = Node(
            role.association, association, gates, diagnose=pod_identity.stuck_association
        )
        nodes = (*nodes, association_node)
    if custom is None:
        return nodes

    def policy(ctx: CallContext) -> dict[str, Any]:
        return ctx.flavour.managed(
            "Policy",
            {
                "policy": custom.document(ctx, chart_versions(ctx, addon)),
                "path": IAM_PATH,
                # IAM cannot change a policy's description (the provider would replace the
                # attached policy): an existing one keeps what it was created with.
                "description": _created_with(ctx, custom.node) or custom.description,
                "tags": tags(ctx, role.iam_name),
            },
            external_name=ctx.names.policy(role.iam_name),
        )

    return (Node(custom.node, policy, (irsa.oidc_ready,)), *nodes)


def _created_with(ctx: CallContext, policy: str) -> str | None:
    """The description an observed policy was created with."""
    observed = ctx.observed.get(policy)
    return structs.str_at(observed, "spec", "forProvider", "description") if observed else None


def chart_versions(ctx: CallContext, addon: Addon) -> tuple[str, ...]:
    """The chart versions of ``addon``'s release whose permissions its policy grants now.

    While an upgrade is wanted or under way, the old and the new (function/upgrade.py);
    otherwise the version the release installs.
    """
    release = addon.release
    assert release is not None  # noqa: S101  # only for add-ons with a release
    decided = ctx.chart_versions.get(release.node)
    if decided:
        return decided
    spec = addon.spec(ctx.spec)
    return (helm.chart_version(ctx, release, spec.version if spec is not None else None),)


@functools.cache
def covers(addon: Addon) -> Callable[[CallContext, tuple[str, ...]], Wait | None]:
    """Whether ``addon``'s versioned policy grants what the given chart versions need, ready.

    An upgrade of its release waits for it: a new controller started before its new
    permissions are in place fails its new calls (expand, then contract).
    """
    role = addon.role
    assert role is not None and role.policy is not None  # noqa: S101  # versioned policies
    custom = role.policy

    def check(ctx: CallContext, versions: tuple[str, ...]) -> Wait | None:
        obj = ctx.observed.get(custom.node)
        if obj is None:
            return None  # not composed (IRSA Disabled): nothing to wait for
        want = custom.document(ctx, versions)
        have = structs.str_at(obj, "spec", "forProvider", "policy")
        if have == want and ctx.observed.ready(custom.node):
            return None
        return Wait(
            f"{custom.node} Ready",
            f"{custom.node} grants the permissions of {' and '.join(versions)} first",
            reason="IAM before chart",
        )

    return check


def role_usages(role: Role, release: str) -> tuple[Usage, ...]:
    """Deletion order of a role and of ``release``, which uses it.

    The release before the attachment (its pods act with the role's permissions until they
    are gone: a policy detached first leaves a chart being uninstalled, or stuck in its
    uninstall, without them), attachment before role (and its policy), role before
    provider; with Pod Identity the release before its association and the agent, the
    association before the role.
    """
    usages = (
        Usage(release, role.attachment, "its pods need the role's permissions until they are gone"),
        Usage(role.attachment, role.node, "a role with attached policies cannot be deleted"),
        Usage(role.node, irsa.OIDC_PROVIDER, "the role trusts this OIDC provider"),
        Usage(release, role.association, "its pods get their credentials through this association"),
        Usage(release, pod_identity.AGENT.node, "its pods get their credentials from the agent"),
        Usage(role.association, role.node, "the association names this role"),
    )
    if role.policy is None:
        return usages
    return (
        *usages,
        Usage(role.attachment, role.policy.node, "an attached policy cannot be deleted"),
    )


@functools.cache
def role_ready(role: Role) -> Gate:
    """Gate: an add-on's role and its policy attachment are ready (unless IRSA is Disabled).

    With Pod Identity also its association and the agent: EKS injects credentials only
    into pods created after both.
    """
    ready = after(role.node, role.attachment)
    associated = after(role.association)

    def gate(ctx: CallContext) -> Wait | None:
        if ctx.irsa is IRSAMode.DISABLED:
            return None
        if ctx.irsa is IRSAMode.POD_IDENTITY:
            return ready(ctx) or associated(ctx) or pod_identity.agent_ready(ctx)
        return ready(ctx)

    return gate


@functools.cache
def release_gates(role: Role) -> tuple[Gate, ...]:
    """The gates of an IRSA add-on's Release.

    The control plane is available, the CNI runs, the CCM (when wanted) has initialized
    the nodes, the add-on's role is ready, and the webhook that injects its credentials
    runs (SelfHosted): started before any of these, its pods would not schedule, have
    no network, or silently run on the node's role.
    """
    return (control_plane_available, cni.ready, ccm.ready, role_ready(role), irsa.webhook_ready)


def plugin(ctx: CallContext, addon: Addon, release: Node, spec: Any) -> Plugin:
    """The add-on's plugin: its role's nodes (unless IRSA is Disabled), release, port rules."""
    nodes: tuple[Node, ...] = (release,)
    if ctx.irsa is not IRSAMode.DISABLED:
        nodes = (*role_nodes(addon, pod_identity_mode=ctx.irsa is IRSAMode.POD_IDENTITY), release)
    needs = addon.ports(spec)
    if needs:
        nodes = (*nodes, *security_groups.nodes(ctx, needs))
    return Plugin(addon.name, nodes, role=addon.role)
