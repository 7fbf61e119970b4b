"""``aws preflight``: the network.

The ports the add-ons need between the cluster's security groups, and CAPA's
clean-up, at the cluster's deletion, of the load balancers add-ons make.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from function.addons.kit import security_groups
from function.cluster import EXTERNAL_RESOURCE_GC
from function.graph import CONTROL_PLANE, NODE, PortNeed
from function_tools.aws.checks import Check, Status, missing
from function_tools.aws.target import Target


def check_external_resource_gc(target: Target) -> Check | None:
    """CAPA's external resource GC is on when a controller creates load balancers.

    When the cluster is deleted, the load balancers of ``LoadBalancer`` Services and
    Ingresses (made by the load balancer controller and the CCM) are not CAPA's: unless
    its garbage collection removes them they stay, cost money and block the VPC's
    deletion (docs/architecture.md, "The cluster's own deletion").
    """
    makers = [a.title for a in target.accepted.wanted if a.makes_load_balancers]
    if not makers:
        return None
    name = "deletion/external-resource-gc"
    kind = "AWSManagedControlPlane" if target.eks else "AWSCluster"
    if target.external_resource_gc is None:
        msg = f"no {kind} given: cannot tell whether CAPA's external resource GC is on"
        return Check(name, Status.WARN, msg, f"pass the cluster's {kind} with --required")
    if target.external_resource_gc.lower() == "false":
        return Check(
            name,
            Status.WARN,
            f"{kind} {target.namespace}/{target.awscluster_name} turns CAPA's external resource "
            f'GC off ({EXTERNAL_RESOURCE_GC}: "false"): when the cluster is deleted, the load '
            f"balancers {' and '.join(makers)} made stay behind, cost money and block the "
            "deletion of the VPC",
            f"remove the {EXTERNAL_RESOURCE_GC} annotation (CAPA's default is on), or delete "
            "every LoadBalancer Service and Ingress before deleting the cluster",
        )
    return Check(
        name,
        Status.PASS,
        "CAPA's external resource GC removes the load balancers "
        f"{' and '.join(makers)} made when the cluster is deleted",
    )


def _covers(rule: dict[str, Any], need: PortNeed, source_id: str) -> bool:
    """Whether one EC2 ingress rule lets ``need`` in from the group ``source_id``."""
    protocol = str(rule.get("IpProtocol", ""))
    if protocol not in {"-1", need.protocol}:
        return False
    if need.protocol in {"tcp", "udp"} and protocol != "-1":
        lo, hi = rule.get("FromPort", -1), rule.get("ToPort", -1)
        if not (lo <= need.from_port and hi >= need.to_port):
            return False
    ref = rule.get("ReferencedGroupInfo") or {}
    return ref.get("GroupId") == source_id or rule.get("CidrIpv4") == "0.0.0.0/0"


def _rules_by_group(ec2: Any, group_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {g: [] for g in group_ids}
    pages = ec2.get_paginator("describe_security_group_rules").paginate(
        Filters=[{"Name": "group-id", "Values": group_ids}]
    )
    for page in pages:
        for rule in page.get("SecurityGroupRules", []):
            if not rule.get("IsEgress") and rule.get("GroupId") in out:
                out[rule["GroupId"]].append(rule)
    return out


def _composes_onto(target: Target, role: str) -> bool:
    return security_groups.composes_onto(target.spec.security_groups.manage, target.facts, role)


def _json(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": "))


def _capa_fix(target: Target, wanted: tuple[PortNeed, ...], need: PortNeed) -> str:
    where = f"AWSCluster {target.namespace}/{target.awscluster_name}"
    own = (
        "; or list your own groups in spec.network.securityGroupOverrides (the function then "
        "composes the rules)"
    )
    if need.capa_list == "cniIngressRules":
        # Setting cniIngressRules replaces CAPA's default Calico rules: give the whole list.
        entries = [n.capa_entry() for n in wanted if n.capa_list == "cniIngressRules"]
        return (
            f"set {where} spec.network.cni.cniIngressRules to {_json(entries)} (CAPA revokes "
            f"rules it did not create on its own groups){own}"
        )
    return f"add {_json(need.capa_entry())} to {where} spec.network.additionalNodeIngressRules{own}"


@dataclass(frozen=True)
class _SGContext:
    target: Target
    wanted: tuple[PortNeed, ...]
    groups: dict[str, str]
    rules: dict[str, list[dict[str, Any]]]
    after: bool
    strict: bool


def _check_need(ctx: _SGContext, need: PortNeed) -> Check:
    name = f"security-groups/{need.purpose}"
    groups = ctx.groups
    unknown = sorted({r for r in (*need.targets, *need.sources) if r not in groups})
    if unknown:
        msg = f"the AWSCluster reports no {' or '.join(unknown)} security group yet"
        return Check(name, Status.WARN, msg, "re-run once CAPA has made the security groups")
    gaps = [
        (t, s)
        for t in need.targets
        for s in need.sources
        if not any(_covers(r, need, groups[s]) for r in ctx.rules.get(groups[t], []))
    ]
    if not gaps:
        where = ", ".join(groups[t] for t in need.targets)
        return Check(name, Status.PASS, f"{need.description}: open on {where}")
    where = ", ".join(f"{groups[t]} ({t}) from {groups[s]} ({s})" for t, s in gaps)
    if all(_composes_onto(ctx.target, t) for t, _ in gaps):
        if not ctx.after:
            return Check(name, Status.PASS, f"{need.description}: the function composes {where}")
        msg = f"{need.description}: missing on {where}; the function composes these rules"
        fix = f"check the sg-{need.purpose}-* managed resources"
        return Check(name, missing(strict=ctx.strict), msg, fix)
    if need.protocol in {"tcp", "udp"}:
        what = f"{need.description} ({need.protocol} {need.from_port}-{need.to_port})"
    else:
        what = f"{need.description} (protocol {need.protocol})"
    msg = f"{what} is not open on {where}"
    return Check(name, Status.FAIL, msg, _capa_fix(ctx.target, ctx.wanted, need))


def check_security_groups(ec2: Any, target: Target, *, after: bool, strict: bool) -> list[Check]:
    """Each port an add-on needs is open between the cluster's security groups."""
    wanted = target.accepted.port_needs
    if not wanted:
        return []
    name = "security-groups"
    if target.eks:
        return [
            Check(name, Status.PASS, "EKS manages the cluster security group: nothing to check")
        ]
    if not target.infrastructure_found:
        purposes = ", ".join(n.purpose for n in wanted)
        msg = f"no AWSCluster given: cannot check the ports for {purposes}"
        fix = "pass the cluster's AWSCluster (kubectl get awscluster -o yaml) with --required"
        return [Check(name, Status.WARN, msg, fix)]
    groups = {**target.sg_managed, **target.sg_overrides}
    roles = (CONTROL_PLANE, NODE)
    ids = sorted({groups[r] for r in roles if r in groups})
    rules = _rules_by_group(ec2, ids) if ids else {}
    ctx = _SGContext(target, wanted, groups, rules, after, strict)
    return [_check_need(ctx, need) for need in wanted]
