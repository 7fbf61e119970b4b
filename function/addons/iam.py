"""The IRSA role of an add-on: role, policy attachment, and (LBC) a custom policy."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from function.graph import Ctx, Gate, Node, Wait, after
from function.names import IAM_PATH
from function.policies import managed_policy_arn, trust_policy
from function.spec import IRSAMode


def oidc_ready(ctx: Ctx) -> Wait | None:
    """Gate: the IAM OIDC provider exists (SelfHosted) or was given (External)."""
    if ctx.irsa is IRSAMode.SELF_HOSTED:
        return after("irsa-oidc-provider")(ctx)
    return None


def tags(ctx: Ctx, addon: str) -> dict[str, str]:
    """Tags on every IAM object: who it belongs to, for audits and preflight."""
    return {
        "clusterplugin.dev/cluster": f"{ctx.facts.namespace}/{ctx.spec.cluster_name}",
        "clusterplugin.dev/addon": addon,
    }


def role_usages(role: str) -> tuple[tuple[str, str, str], ...]:
    """Deletion order of an add-on's role: attachment before role, role before the provider."""
    return (
        (f"{role}-attachment", role, "a role with attached policies cannot be deleted"),
        (role, "irsa-oidc-provider", "the role trusts this OIDC provider"),
    )


@functools.cache
def managed_policy(addon: str) -> Callable[[Ctx], str]:
    """``policy_arn`` for ``role_nodes``: the AWS managed policy of ``addon`` in the partition."""

    def arn(ctx: Ctx) -> str:
        return managed_policy_arn(addon, ctx.partition)

    return arn


@functools.cache  # arguments are the add-ons' constants: the nodes are made once
def role_nodes(
    *,
    node: str,
    addon: str,
    namespace: str,
    service_account: str,
    policy_arn: Callable[[Ctx], str],
    policy_gates: tuple[Gate, ...] = (),
) -> tuple[Node, Node]:
    """The role ``node`` and ``<node>-attachment`` for one add-on's service account."""

    def role(ctx: Ctx) -> dict[str, Any]:
        name = ctx.names.role(addon)
        return ctx.flavour.managed(
            "Role",
            {
                "assumeRolePolicy": trust_policy(
                    ctx.oidc_provider_arn(), ctx.issuer_host_path(), namespace, service_account
                ),
                "path": IAM_PATH,
                "description": f"IRSA role of {namespace}/{service_account} in cluster "
                f"{ctx.facts.namespace}/{ctx.spec.cluster_name}",
                "tags": tags(ctx, addon),
            },
            external_name=name,
        )

    def attachment(ctx: Ctx) -> dict[str, Any]:
        return ctx.flavour.managed(
            "RolePolicyAttachment",
            {"role": ctx.names.role(addon), "policyArn": policy_arn(ctx)},
        )

    return (
        Node(node, role, (oidc_ready,)),
        Node(f"{node}-attachment", attachment, (after(node), *policy_gates)),
    )


@functools.cache
def _arn_of(node: str) -> Callable[[Ctx], str]:
    def arn(ctx: Ctx) -> str:
        return ctx.arn_of(node)

    return arn


@functools.cache  # arguments are the add-ons' constants: the nodes are made once
def custom_policy_role_nodes(
    *,
    policy_node: str,
    policy: Callable[[Ctx], dict[str, Any]],
    node: str,
    addon: str,
    namespace: str,
    service_account: str,
) -> tuple[Node, Node, Node]:
    """An add-on's own Policy, then its role and the attachment of that policy."""
    return (
        Node(policy_node, policy, (oidc_ready,)),
        *role_nodes(
            node=node,
            addon=addon,
            namespace=namespace,
            service_account=service_account,
            policy_arn=_arn_of(policy_node),
            policy_gates=(after(policy_node),),
        ),
    )


def custom_policy_usages(role: str, policy_node: str) -> tuple[tuple[str, str, str], ...]:
    """Deletion order of a role with its own policy: role_usages, and the policy last."""
    return (
        *role_usages(role),
        (f"{role}-attachment", policy_node, "an attached policy cannot be deleted"),
    )
