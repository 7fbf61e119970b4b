"""The add-ons, and what follows from their declarations.

A new add-on is a module declaring an ``Addon`` (see ``function/graph.py``) and
one line in ``ADDONS``: which add-ons need IRSA, the ports to open, the values
the user may not set, the deletion order, the preflight's role checks and the
issuer's warnings all come from the declarations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from function.addons import calico, ccm, csi, external_dns, irsa, lbc, pod_identity, vpc_cni
from function.addons.kit import iam
from function.addons.kit.helm import owned_problems
from function.addons.kit.security_groups import report as security_groups_report
from function.context import CallContext
from function.graph import Addon, PortNeed, Usage, Wait
from function.spec import ClusterPluginSpec
from function.spec_base import spec_attributes

# In status.plugins[] order.
ADDONS: tuple[Addon, ...] = (
    ccm.ADDON,
    irsa.ADDON,
    pod_identity.ADDON,
    vpc_cni.ADDON,
    calico.ADDON,
    csi.EBS,
    csi.EFS,
    lbc.ADDON,
    external_dns.ADDON,
)

# Deletion order, as Usages: ``by`` is deleted before ``of``.
USAGES: tuple[Usage, ...] = tuple(u for a in ADDONS for u in a.usages)


def _upgrade_order(usages: tuple[Usage, ...]) -> dict[str, int]:
    """Node -> its place among upgrades (lower first): what others use goes before them.

    The deletion order reversed: a resource is upgraded after every resource it uses
    (the CNI before what needs the CNI, cert-manager before the webhook, Calico's CRDs
    before tigera-operator). A node's rank is the longest chain of users above it.
    """
    users: dict[str, set[str]] = {}
    for u in usages:
        users.setdefault(u.of, set()).add(u.by)

    @functools.cache
    def rank(node: str) -> int:
        return max((rank(by) + 1 for by in users.get(node, ())), default=0)

    return {node: -rank(node) for node in {*users, *(u.by for u in usages)}}


# Releases move one at a time on day two, in this order (ties: status.plugins[] order).
UPGRADE_ORDER: dict[str, int] = _upgrade_order(USAGES)

# Release node -> whether its add-on's versioned policy grants what given chart versions need
# (function/upgrade.py: IAM before the chart, expand then contract).
IAM_CHECKS: dict[str, Callable[[CallContext, tuple[str, ...]], Wait | None]] = {
    a.release.node: iam.covers(a)
    for a in ADDONS
    if a.release is not None
    and a.role is not None
    and a.role.policy is not None
    and a.role.policy.versioned
}

# The add-ons a user asks for in the spec (the issuer follows from them).
REQUESTABLE: tuple[Addon, ...] = tuple(a for a in ADDONS if a.spec_path)

# Each add-on names its place in the spec as the user spells it (its spec model lives with
# it, the frame in function/spec.py places it): a path the frame does not have fails here.
for _addon in REQUESTABLE:
    spec_attributes(ClusterPluginSpec, _addon.spec_path)

# Those with an IRSA role, whose spec asks for the issuer.
WITH_ROLES: tuple[Addon, ...] = tuple(a for a in REQUESTABLE if a.role is not None)

# The AWS-managed policies the add-ons' roles get (the provider may attach only these).
MANAGED_POLICIES: tuple[str, ...] = tuple(
    a.role.managed_policy for a in WITH_ROLES if a.role is not None and a.role.managed_policy
)

# Whether the security groups let through the ports the wanted add-ons need: the planner's
# SecurityGroupsReady condition (the rules themselves are nodes of the add-ons that need them).
ports_report = security_groups_report

# The names status.plugins[] and the metrics' plugin label can hold.
PLUGIN_NAMES: tuple[str, ...] = tuple(a.name for a in ADDONS)


def wanted(spec: ClusterPluginSpec) -> tuple[Addon, ...]:
    """The add-ons the spec asks for."""
    return tuple(a for a in REQUESTABLE if a.spec(spec) is not None)


def wants_irsa(spec: ClusterPluginSpec) -> bool:
    """Whether any add-on the spec asks for has an IRSA role."""
    return any(a.spec(spec) is not None for a in WITH_ROLES)


def port_needs(spec: ClusterPluginSpec) -> tuple[PortNeed, ...]:
    """Every security-group port the wanted add-ons need."""
    out: list[PortNeed] = []
    for addon in REQUESTABLE:
        addon_spec = addon.spec(spec)
        if addon_spec is not None:
            out += addon.ports(addon_spec)
    return tuple(out)


def owned_values_problems(spec: ClusterPluginSpec) -> list[tuple[str, str]]:
    """User values that fight keys the function owns, as (field, message)."""
    problems: list[tuple[str, str]] = []
    for addon in REQUESTABLE:
        addon_spec = addon.spec(spec)
        if addon_spec is not None and addon.owned_values:
            problems += owned_problems(addon_spec.values, addon.owned_values, addon.values_field)
    return problems


def role_fields() -> str:
    """The spec fields of the add-ons with a role, as a person reads them."""
    return ", ".join(a.spec_path.rsplit(".", 1)[-1] for a in WITH_ROLES)
