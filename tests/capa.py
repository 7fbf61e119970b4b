"""What CAPA makes of an AWSCluster's network spec: the ingress rules of its control-plane and node groups.

A model of cluster-api-provider-aws ``pkg/cloud/services/securitygroup/securitygroups.go``
(``getSecurityGroupIngressRules``, ``processIngressRulesSGs``, ``expandIngressRules``,
``ingressRulesFromSDKType``) for the two groups the add-ons' ports live on, IPv4 and no
bastion, which is what the examples model:

- ``spec.network.cni.cniIngressRules`` go onto both groups, from both groups (a missing
  ``cni`` means CAPA's default Calico rules: bgp tcp 179 and IP-in-IP);
- the control plane also gets the API server (6443 from the API server load balancer, the
  control plane and the nodes), etcd and etcd peer (from the control plane), and
  ``additionalControlPlaneIngressRules``;
- the nodes get NodePort services (30000-32767 from ``nodePortIngressRuleCidrBlocks`` or
  0.0.0.0/0), the kubelet (10250 from both groups) and ``additionalNodeIngressRules``;
- an additional rule without CIDRs or sources comes from the control plane; source roles
  become those groups' ids.

CAPA revokes every other rule on the groups it manages, and publishes in
``status.networkStatus.securityGroups.<role>.ingressRule`` what it reads back from EC2:
one entry per source, and no ports for protocols other than tcp, udp and icmp (0, 0).
"""

from __future__ import annotations

from typing import Any

CONTROL_PLANE, NODE, APISERVER_LB = "controlplane", "node", "apiserver-lb"
_PORTED = {"tcp", "udp", "icmp", "58"}


def _rule(description: str, protocol: str, lo: int, hi: int, **source: list[str]) -> dict[str, Any]:
    return {
        "description": description,
        "protocol": protocol,
        "fromPort": lo,
        "toPort": hi,
        **source,
    }


def _sourced(rule: dict[str, Any], groups: dict[str, str]) -> dict[str, Any]:
    """processIngressRulesSGs: roles to ids, and the control plane when no source is given."""
    out = {k: v for k, v in rule.items() if k != "sourceSecurityGroupRoles"}
    if rule.get("cidrBlocks") or rule.get("ipv6CidrBlocks"):
        return out
    ids = set(rule.get("sourceSecurityGroupIds") or [])
    ids |= {groups[r] for r in rule.get("sourceSecurityGroupRoles") or []}
    out["sourceSecurityGroupIds"] = sorted(ids) if ids else [groups[CONTROL_PLANE]]
    return out


def desired_rules(
    awscluster: dict[str, Any], groups: dict[str, str]
) -> dict[str, list[dict[str, Any]]]:
    """CAPA's desired ingress rules of the control-plane and node groups (grouped sources).

    ``groups``: role -> security group id, for controlplane, node and apiserver-lb.
    """
    network = (awscluster.get("spec") or {}).get("network") or {}
    cni = network.get("cni")
    cni_rules = (
        [_rule("bgp (calico)", "tcp", 179, 179), _rule("IP-in-IP (calico)", "4", -1, 65535)]
        if cni is None
        else list(cni.get("cniIngressRules") or [])
    )
    both = [groups[CONTROL_PLANE], groups[NODE]]
    cni_out = [
        _rule(
            r["description"], r["protocol"], r["fromPort"], r["toPort"], sourceSecurityGroupIds=both
        )
        for r in cni_rules
    ]
    cp = [
        _rule(
            "Kubernetes API",
            "tcp",
            6443,
            6443,
            sourceSecurityGroupIds=[groups[APISERVER_LB], *both],
        ),
        _rule("etcd", "tcp", 2379, 2379, sourceSecurityGroupIds=[groups[CONTROL_PLANE]]),
        _rule("etcd peer", "tcp", 2380, 2380, sourceSecurityGroupIds=[groups[CONTROL_PLANE]]),
        *(_sourced(r, groups) for r in network.get("additionalControlPlaneIngressRules") or []),
    ]
    node = [
        _rule(
            "Node Port Services",
            "tcp",
            30000,
            32767,
            cidrBlocks=list(network.get("nodePortIngressRuleCidrBlocks") or ["0.0.0.0/0"]),
        ),
        _rule("Kubelet API", "tcp", 10250, 10250, sourceSecurityGroupIds=both),
        *(_sourced(r, groups) for r in network.get("additionalNodeIngressRules") or []),
    ]
    return {CONTROL_PLANE: cni_out + cp, NODE: cni_out + node}


def expand(rule: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per source, as CAPA reads a rule back from EC2 (ports only where EC2 has them)."""
    protocol = rule["protocol"]
    base: dict[str, Any] = {
        "description": rule.get("description", ""),
        "protocol": protocol,
        "fromPort": rule.get("fromPort", 0) if protocol in _PORTED else 0,
        "toPort": rule.get("toPort", 0) if protocol in _PORTED else 0,
    }
    out = [{**base, "cidrBlocks": [c]} for c in rule.get("cidrBlocks") or []]
    out += [{**base, "ipv6CidrBlocks": [c]} for c in rule.get("ipv6CidrBlocks") or []]
    out += [
        {**base, "sourceSecurityGroupIds": [g]} for g in rule.get("sourceSecurityGroupIds") or []
    ]
    return out or [base]


def published_rules(
    awscluster: dict[str, Any], groups: dict[str, str]
) -> dict[str, list[dict[str, Any]]]:
    """What CAPA publishes in status.networkStatus.securityGroups.<role>.ingressRule once settled."""
    return {
        role: [e for r in rules for e in expand(r)]
        for role, rules in desired_rules(awscluster, groups).items()
    }


def ip_permission(rule: dict[str, Any]) -> dict[str, Any]:
    """CAPA's ingressRuleToSDKType: the EC2 IpPermission it authorizes for one desired rule."""
    perm: dict[str, Any] = {"IpProtocol": rule["protocol"]}
    if rule["protocol"] in _PORTED:
        perm |= {"FromPort": rule["fromPort"], "ToPort": rule["toPort"]}
    described = {"Description": rule["description"]} if rule.get("description") else {}
    if rule.get("cidrBlocks"):
        perm["IpRanges"] = [{"CidrIp": c, **described} for c in rule["cidrBlocks"]]
    if rule.get("sourceSecurityGroupIds"):
        perm["UserIdGroupPairs"] = [
            {"GroupId": g, **described} for g in rule["sourceSecurityGroupIds"]
        ]
    return perm


def authorize(ec2: Any, awscluster: dict[str, Any], groups: dict[str, str]) -> None:
    """Authorize on ``groups`` (moto's) exactly the rules CAPA would for ``awscluster``.

    moto 5.2 cannot store a rule without ports for a protocol other than -1 (IP-in-IP
    fails in int(None)): such rules get -1, -1, which AWS accepts and ignores there.
    """
    for role, rules in desired_rules(awscluster, groups).items():
        perms = [ip_permission(r) for r in rules]
        for perm in perms:
            if perm["IpProtocol"] not in _PORTED | {"-1"}:
                perm |= {"FromPort": -1, "ToPort": -1}
        ec2.authorize_security_group_ingress(GroupId=groups[role], IpPermissions=perms)
