"""Security groups: the ports each add-on needs, composed or reported.

See docs/architecture.md, "Security groups".

CAPA revokes, on the groups it manages, every ingress rule it did not create.
So with ``manage: Auto`` rules are composed only onto groups the user owns
(``AWSCluster.spec.network.securityGroupOverrides``); for CAPA-managed groups
the function reads the rules CAPA reports and, where a port is missing, says
exactly which ``cniIngressRules`` / ``additionalNodeIngressRules`` entries to add.
``Always`` composes regardless; ``Never`` only reports.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import Field

from function import structs
from function.cluster import ClusterFacts, IngressRule, infrastructure_name
from function.context import CallContext
from function.graph import BOTH, CONTROL_PLANE, NODE, MissingFactError, Node, PortNeed, Wait
from function.names import CLUSTER_TAG
from function.spec_base import StrictModel

# --- its place in the ClusterPlugin spec (function/spec.py frames it) ----------------


class SecurityGroupMode(StrEnum):
    """How the function handles the ports add-ons need."""

    AUTO = "Auto"
    ALWAYS = "Always"
    NEVER = "Never"


class SecurityGroupsSpec(StrictModel):
    """Security-group handling."""

    manage: SecurityGroupMode = Field(
        default=SecurityGroupMode.AUTO,
        description=(
            "Auto: compose rules only onto security groups CAPA does not manage "
            "(securityGroupOverrides) and report missing rules on CAPA-managed ones. "
            "Always: compose rules regardless. Never: only report."
        ),
    )

SHORT = {CONTROL_PLANE: "cp", NODE: "node"}


def cni_need(purpose: str, protocol: str, lo: int, hi: int, what: str) -> PortNeed:
    """Traffic a CNI needs between every node and control-plane group (cniIngressRules)."""
    return PortNeed(purpose, protocol, lo, hi, BOTH, BOTH, "cniIngressRules", what)


def _rule_name(need: PortNeed, target: str, source: str) -> str:
    return f"sg-{need.purpose}-{SHORT[target]}-from-{SHORT[source]}"


def _group_id(ctx: CallContext, role: str) -> str | None:
    if role in ctx.facts.sg_overrides:
        return ctx.facts.sg_overrides[role]
    sg = ctx.facts.sg_managed.get(role)
    return sg.id if sg else None


def composes_onto(mode: SecurityGroupMode, facts: ClusterFacts, role: str) -> bool:
    """Whether rules are composed onto the group of ``role`` (else only checked)."""
    if facts.eks or mode is SecurityGroupMode.NEVER:
        return False
    return mode is SecurityGroupMode.ALWAYS or role in facts.sg_overrides


def _composes_onto(ctx: CallContext, role: str) -> bool:
    return composes_onto(ctx.spec.security_groups.manage, ctx.facts, role)


def _rule_builder(need: PortNeed, target: str, source: str):
    def build(ctx: CallContext) -> dict[str, Any]:
        target_id, source_id = _group_id(ctx, target), _group_id(ctx, source)
        if not target_id or not source_id:
            raise MissingFactError(
                Wait(
                    "security groups", "the AWSCluster has not reported its security group ids yet"
                )
            )
        for_provider: dict[str, Any] = {
            "region": ctx.region,
            "securityGroupId": target_id,
            "referencedSecurityGroupId": source_id,
            "ipProtocol": need.protocol,
            "description": f"{need.description} from {source}",
            "tags": {CLUSTER_TAG: f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"},
        }
        # Ports mean nothing for "all traffic" and IP-in-IP.
        if need.protocol in {"tcp", "udp"}:
            for_provider["fromPort"] = need.from_port
            for_provider["toPort"] = need.to_port
        return ctx.flavour.managed("SecurityGroupIngressRule", for_provider)

    return build


def nodes(ctx: CallContext, needs: tuple[PortNeed, ...]) -> list[Node]:
    """The rule nodes an add-on composes for its ``needs`` (only onto groups we may write to)."""
    out = []
    for need in needs:
        for target in need.targets:
            for source in need.sources:
                name = _rule_name(need, target, source)
                # Facts come and go (an AWSCluster briefly unreadable); a rule that
                # exists stays unless the user asked for Never.
                keep = (
                    ctx.observed.exists(name)
                    and ctx.spec.security_groups.manage is not SecurityGroupMode.NEVER
                )
                if _composes_onto(ctx, target) or keep:
                    out.append(Node(name, _rule_builder(need, target, source)))
    return out


def _covers(rule: IngressRule, need: PortNeed, source: str, source_id: str | None) -> bool:
    if rule.protocol not in {"-1", need.protocol}:
        return False
    if (
        need.protocol in {"tcp", "udp"}
        and rule.protocol != "-1"
        and not (rule.from_port <= need.from_port and rule.to_port >= need.to_port)
    ):
        return False
    return (
        source in rule.source_roles
        or (source_id is not None and source_id in rule.source_ids)
        or "0.0.0.0/0" in rule.cidrs
    )


@dataclass(frozen=True)
class SecurityGroupReport:
    """The SecurityGroupsReady condition: status, reason, message."""

    status: str
    reason: str
    message: str
    # Entering it emits a result of this severity (a person must act), or "".
    event: str = ""


def _gaps(
    ctx: CallContext, wanted: tuple[PortNeed, ...], emitted: set[str]
) -> tuple[list[PortNeed], list[str], set[str]]:
    """(needs CAPA's groups lack, composed rules not ready yet, roles with no known group)."""
    missing: list[PortNeed] = []
    composing: list[str] = []
    unknown: set[str] = set()
    for need in wanted:
        for target in need.targets:
            for source in need.sources:
                name = _rule_name(need, target, source)
                if _composes_onto(ctx, target):
                    if name not in emitted or not ctx.is_ready(name):
                        composing.append(name)
                    continue
                group = ctx.facts.sg_managed.get(target)
                if group is None:
                    unknown.add(target)
                elif need not in missing and not any(
                    _covers(r, need, source, _group_id(ctx, source)) for r in group.rules
                ):
                    missing.append(need)
    return missing, composing, unknown


def report(ctx: CallContext, emitted: set[str]) -> SecurityGroupReport:  # noqa: PLR0911  # one per reason
    """Whether every port the wanted add-ons need is open, and how to fix it if not."""
    wanted = ctx.port_needs
    if not wanted:
        return SecurityGroupReport("True", "NotRequired", "no add-on needs extra ports")
    if ctx.facts.eks:
        return SecurityGroupReport(
            "True", "ManagedByEKS", "EKS manages the cluster security group; nothing to check"
        )
    if not ctx.facts.infrastructure_found:
        return SecurityGroupReport(
            "Unknown", "WaitingForAWSCluster", "the AWSCluster has not been read yet"
        )
    missing, composing, unknown = _gaps(ctx, wanted, emitted)
    if missing:
        return SecurityGroupReport(
            "False",
            "IngressRulesMissing",
            _fix_message(
                ctx.facts.namespace,
                infrastructure_name(ctx.facts) or ctx.spec.cluster_name,
                ctx.facts.topology_class,
                wanted,
                tuple(missing),
            ),
            "Warning",
        )
    if unknown:
        groups = " or ".join(sorted(unknown))
        return SecurityGroupReport(
            "Unknown",
            "SecurityGroupsUnknown",
            f"the AWSCluster reports no {groups} security group yet",
        )
    if composing:
        unobservable = [n for n in composing if _never_created(ctx, n)]
        if unobservable:
            message = _provider_bug(unobservable)
            return SecurityGroupReport("False", PROVIDER_VERSION, message, "Warning")
        shown = ", ".join(composing[:4])
        return SecurityGroupReport(
            "False", "Composing", f"waiting for {len(composing)} ingress rule(s): {shown}"
        )
    return SecurityGroupReport("True", "Available", "every port the add-ons need is open")


# provider-upjet-aws v2.5.0 cannot observe a SecurityGroupIngressRule that does not exist yet:
# the Terraform resource has an identity, which v2.5.0's upjet does not support, so its first
# Observe fails and the rule is never created (crossplane-contrib/provider-upjet-aws#2003,
# #2085). v2.6.0 has upjet's support for such resources (commit f5e6f92, upjet's "treat
# Missing Resource Identity diagnostic as resource-not-found").
PROVIDER_VERSION = "ProviderVersion"
_MISSING_IDENTITY = "Missing Resource Identity After Read"
FIXED_IN = "v2.6.0"


def _never_created(ctx: CallContext, name: str) -> bool:
    observed = ctx.observed.get(name)
    return observed is not None and _MISSING_IDENTITY in structs.failing_message(observed)


def _provider_bug(names: list[str]) -> str:
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return (
        f"the AWS provider never creates ingress rule(s) {shown}: their Synced=False says "
        f'"{_MISSING_IDENTITY}", the bug of provider-aws-ec2 v2.5.0 (crossplane-contrib/'
        "provider-upjet-aws#2003, #2085), which cannot observe a SecurityGroupIngressRule before "
        f"it exists. Install provider-aws-ec2 (and provider-family-aws) {FIXED_IN} or later, the "
        "version the Configuration depends on (kubectl get providers.pkg.crossplane.io shows "
        "what runs); the rules are then created on the provider's next poll"
    )


# The same message on every call until someone fixes the AWSCluster: kept per cluster.
@functools.lru_cache(maxsize=256)
def _fix_message(
    namespace: str,
    aws_cluster: str,
    topology_class: str | None,
    wanted: tuple[PortNeed, ...],
    missing: tuple[PortNeed, ...],
) -> str:
    """What to set, and where.

    On the AWSCluster the Cluster references (``aws_cluster``), or, for a Cluster made from a
    ClusterClass, on what the topology controller makes that AWSCluster from.
    """
    purposes = ", ".join(sorted({n.purpose for n in missing}))
    parts = [f"CAPA-managed security groups lack ports for {purposes}."]
    if topology_class:
        parts.append(
            f"The Cluster is made from ClusterClass {topology_class}: the topology controller "
            f"owns AWSCluster {namespace}/{aws_cluster} and reverts a direct edit, so set what "
            "follows in the ClusterClass's AWSClusterTemplate (spec.template.spec.network), or "
            "through a variable the ClusterClass patches into it."
        )
    cni = [n for n in wanted if n.capa_list == "cniIngressRules"]
    if any(n.capa_list == "cniIngressRules" for n in missing):
        # Setting cniIngressRules replaces CAPA's default Calico rules, so the
        # list given is the whole set the CNI needs, not just what is missing.
        entries = json.dumps([n.capa_entry() for n in cni], separators=(", ", ": "))
        where = f"AWSCluster {namespace}/{aws_cluster}"
        parts.append(f"Set {where} spec.network.cni.cniIngressRules to {entries}.")
    node = [n for n in missing if n.capa_list == "additionalNodeIngressRules"]
    if node:
        entries = json.dumps([n.capa_entry() for n in node], separators=(", ", ": "))
        parts.append(f"Add to spec.network.additionalNodeIngressRules: {entries}.")
    parts.append(
        "Or list your own groups in spec.network.securityGroupOverrides "
        "and the function composes the rules."
    )
    return " ".join(parts)
