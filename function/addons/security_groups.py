"""Security groups (DESIGN section 5): the ports each add-on needs, composed or reported.

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
from typing import Any

from function.cluster import IngressRule
from function.graph import Ctx, MissingFactError, Node, Wait
from function.spec import CalicoEncapsulation, ClusterPluginSpec, SecurityGroupMode

CONTROL_PLANE = "controlplane"
NODE = "node"
BOTH = (CONTROL_PLANE, NODE)
SHORT = {CONTROL_PLANE: "cp", NODE: "node"}


@dataclass(frozen=True)
class PortNeed:
    """Traffic an add-on needs between CAPA security-group roles."""

    purpose: str
    plugin: str
    protocol: str  # CAPA's spelling: tcp, udp, "4" (IP-in-IP), "-1" (all)
    from_port: int
    to_port: int
    targets: tuple[str, ...]
    sources: tuple[str, ...]
    # Which AWSCluster list CAPA takes it in: cniIngressRules apply to both
    # roles from both roles; additionalNodeIngressRules name their sources.
    capa_list: str
    description: str

    def capa_entry(self) -> dict[str, Any]:
        """The entry to put in the AWSCluster spec list."""
        entry: dict[str, Any] = {
            "description": self.description,
            "protocol": self.protocol,
            "fromPort": self.from_port,
            "toPort": self.to_port,
        }
        if self.capa_list != "cniIngressRules":
            entry["sourceSecurityGroupRoles"] = list(self.sources)
        return entry


def _calico(plugin: str, enc: CalicoEncapsulation) -> list[PortNeed]:
    def need(purpose: str, protocol: str, lo: int, hi: int, what: str) -> PortNeed:
        return PortNeed(purpose, plugin, protocol, lo, hi, BOTH, BOTH, "cniIngressRules", what)

    # The operator always deploys Typha; CAPA's default Calico rules lack it.
    needs = [need("calico-typha", "tcp", 5473, 5473, "typha (calico)")]
    if enc is CalicoEncapsulation.VXLAN:
        needs.append(need("calico-vxlan", "udp", 4789, 4789, "vxlan (calico)"))
    else:
        needs.append(need("calico-bgp", "tcp", 179, 179, "bgp (calico)"))
    if enc is CalicoEncapsulation.IPIP:
        needs.append(need("calico-ipip", "4", -1, 65535, "IP-in-IP (calico)"))
    return needs


def needs(spec: ClusterPluginSpec) -> tuple[PortNeed, ...]:
    """Every port need of the wanted add-ons."""
    calico = spec.networking.calico
    return _needs(
        calico.encapsulation if calico is not None else None,
        vpc_cni=spec.networking.amazon_vpc is not None,
        lbc=spec.ingress.aws_load_balancer_controller is not None,
    )


@functools.cache  # a handful of combinations, read three times a call (issue 5)
def _needs(calico: CalicoEncapsulation | None, *, vpc_cni: bool, lbc: bool) -> tuple[PortNeed, ...]:
    out: list[PortNeed] = []
    if calico is not None:
        out += _calico("calico", calico)
    if vpc_cni:
        # Pods get VPC addresses behind the node ENIs' groups: allow all traffic
        # between node and control-plane groups, as EKS's cluster group does.
        out.append(
            PortNeed(
                "vpc-cni-all",
                "vpc-cni",
                "-1",
                -1,
                65535,
                BOTH,
                BOTH,
                "cniIngressRules",
                "all traffic (vpc-cni)",
            )
        )
    if lbc:
        out.append(
            PortNeed(
                "lbc-webhook",
                "aws-load-balancer-controller",
                "tcp",
                9443,
                9443,
                (NODE,),
                (CONTROL_PLANE,),
                "additionalNodeIngressRules",
                "aws-load-balancer-controller webhook",
            )
        )
    return tuple(out)


def _rule_name(need: PortNeed, target: str, source: str) -> str:
    return f"sg-{need.purpose}-{SHORT[target]}-from-{SHORT[source]}"


def _group_id(ctx: Ctx, role: str) -> str | None:
    if role in ctx.facts.sg_overrides:
        return ctx.facts.sg_overrides[role]
    sg = ctx.facts.sg_managed.get(role)
    return sg.id if sg else None


def _composes_onto(ctx: Ctx, role: str) -> bool:
    mode = ctx.spec.security_groups.manage
    if ctx.facts.eks or mode is SecurityGroupMode.NEVER:
        return False
    return mode is SecurityGroupMode.ALWAYS or role in ctx.facts.sg_overrides


def _rule_builder(need: PortNeed, target: str, source: str):
    def build(ctx: Ctx) -> dict[str, Any]:
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
            "tags": {"clusterplugin.dev/cluster": f"{ctx.facts.namespace}/{ctx.spec.cluster_name}"},
        }
        # Ports mean nothing for "all traffic" and IP-in-IP.
        if need.protocol in {"tcp", "udp"}:
            for_provider["fromPort"] = need.from_port
            for_provider["toPort"] = need.to_port
        return ctx.flavour.managed("SecurityGroupIngressRule", for_provider)

    return build


def nodes(ctx: Ctx, plugin: str) -> list[Node]:
    """The rule nodes ``plugin`` composes (only onto groups we may write to)."""
    out = []
    for need in needs(ctx.spec):
        if need.plugin != plugin:
            continue
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


def _gaps(
    ctx: Ctx, wanted: tuple[PortNeed, ...], emitted: set[str]
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


def report(ctx: Ctx, emitted: set[str]) -> SecurityGroupReport:  # noqa: PLR0911  # one per reason
    """Whether every port the wanted add-ons need is open, and how to fix it if not."""
    wanted = needs(ctx.spec)
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
            _fix_message(ctx.facts.namespace, ctx.spec.cluster_name, wanted, tuple(missing)),
        )
    if unknown:
        groups = " or ".join(sorted(unknown))
        return SecurityGroupReport(
            "Unknown",
            "SecurityGroupsUnknown",
            f"the AWSCluster reports no {groups} security group yet",
        )
    if composing:
        shown = ", ".join(composing[:4])
        return SecurityGroupReport(
            "False", "Composing", f"waiting for {len(composing)} ingress rule(s): {shown}"
        )
    return SecurityGroupReport("True", "Available", "every port the add-ons need is open")


# The same message on every call until someone fixes the AWSCluster: kept per cluster.
@functools.lru_cache(maxsize=256)
def _fix_message(
    namespace: str, cluster: str, wanted: tuple[PortNeed, ...], missing: tuple[PortNeed, ...]
) -> str:
    purposes = ", ".join(sorted({n.purpose for n in missing}))
    parts = [f"CAPA-managed security groups lack ports for {purposes}."]
    cni = [n for n in wanted if n.capa_list == "cniIngressRules"]
    if any(n.capa_list == "cniIngressRules" for n in missing):
        # Setting cniIngressRules replaces CAPA's default Calico rules, so the
        # list given is the whole set the CNI needs, not just what is missing.
        entries = json.dumps([n.capa_entry() for n in cni], separators=(", ", ": "))
        where = f"AWSCluster {namespace}/{cluster}"
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
