"""Every IAM and S3 policy the function composes, linted.

Across every scenario of tests/scenarios.py, played to convergence:
- identity policies (``Policy.spec.forProvider.policy``) pass parliament, except findings
  allow-listed below by name, each with the reason it is a false positive or by design;
- trust policies (``Role.assumeRolePolicy``) and the bucket policy have no parliament mode:
  they are checked against exact structural rules;
- no statement allows ``*`` actions (or a whole service) or ``*`` principals, beyond the
  public read of the two discovery documents and the Deny of plain-HTTP access;
- the managed policies attached are exactly the three AWS-managed add-on policies.

And the claims SECURITY.md makes about what an XR author can steer (or not) in them.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from crossplane.function import logging
from hypothesis import given
from hypothesis import strategies as st
from parliament import analyze_policy_string

from function.names import PARTITIONS, Names
from function.policies import lbc_policy, union_policy
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests import strategies as gen
from tests.scenarios import SCENARIOS, Scenario, by_name, find

logging.configure(logging.Level.DISABLED)

SUBJECTS = {
    "vpc-cni-role": "system:serviceaccount:kube-system:aws-node",
    "ebs-role": "system:serviceaccount:kube-system:ebs-csi-controller-sa",
    "efs-role": "system:serviceaccount:kube-system:efs-csi-controller-sa",
    "lbc-role": "system:serviceaccount:kube-system:aws-load-balancer-controller",
    "external-dns-role": "system:serviceaccount:kube-system:external-dns",
}
# Attachments of the function's own (customer-managed) policies: attachment -> its Policy node.
CUSTOM = {"lbc-role-attachment": "lbc-policy", "external-dns-role-attachment": "external-dns-policy"}
MANAGED = {
    "vpc-cni-role-attachment": "policy/AmazonEKS_CNI_Policy",
    "ebs-role-attachment": "policy/AmazonEBSCSIDriverPolicyV2",
    "efs-role-attachment": "policy/service-role/AmazonEFSCSIDriverPolicy",
}
PARTITION_OF = {"cn-": "aws-cn", "us-gov-": "aws-us-gov"}

# Parliament findings accepted, by (issue, detail). Anything else fails the test.
ALLOWED_FINDINGS: dict[tuple[str, str], str] = {
    # Added to the controller's policy for its IPAM support (v2.12+); parliament's bundled
    # IAM database predates the action. A real action: see the AWS ELBv2 API reference.
    ("UNKNOWN_ACTION", "elasticloadbalancing:ModifyIpPools"): "parliament's database predates it",
    # The documented elasticloadbalancing:CreateAction condition key on AddTags (tagging
    # only at creation time); parliament's database does not list it for AddTags.
    (
        "UNKNOWN_CONDITION_FOR_ACTION",
        "elasticloadbalancing:CreateAction for action elasticloadbalancing:AddTags",
    ): "documented condition key missing from parliament's database",
}
# RESOURCE_STAR (severity LOW): statements of the upstream aws-load-balancer-controller
# v3.5.0 iam_policy.json that use Resource "*" by design. The controller creates and
# names these resources at run time, so no ARN can be known up front; most are further
# scoped by tag conditions (aws:RequestTag / aws:ResourceTag elbv2.k8s.aws/cluster). Listed
# exactly: a new Resource-"*" statement fails until someone reviews it.
ALLOWED_RESOURCE_STAR = {
    frozenset({"iam:CreateServiceLinkedRole"}),
    frozenset({"ec2:GetCoipPoolUsage", "ec2:GetSecurityGroupsForVpc"}),
    frozenset(
        {
            "acm:DescribeCertificate", "cognito-idp:DescribeUserPoolClient", "iam:GetServerCertificate",
            "shield:DeleteProtection", "shield:DescribeProtection", "waf-regional:AssociateWebACL",
            "waf-regional:DisassociateWebACL", "waf-regional:GetWebACL", "waf-regional:GetWebACLForResource",
            "wafv2:AssociateWebACL", "wafv2:GetWebACL", "wafv2:GetWebACLForResource",
        }
    ),
    frozenset({"ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"}),
    frozenset({"ec2:CreateSecurityGroup"}),
    frozenset({"ec2:AuthorizeSecurityGroupIngress", "ec2:DeleteSecurityGroup", "ec2:RevokeSecurityGroupIngress"}),
    frozenset({"elasticloadbalancing:CreateTargetGroup"}),
    frozenset({"elasticloadbalancing:CreateRule", "elasticloadbalancing:DeleteListener", "elasticloadbalancing:DeleteRule"}),
    frozenset(
        {
            "elasticloadbalancing:AddListenerCertificates", "elasticloadbalancing:ModifyListener",
            "elasticloadbalancing:ModifyRule", "elasticloadbalancing:RemoveListenerCertificates",
            "elasticloadbalancing:SetRulePriorities",
        }
    ),
}


# The same upstream statements in the older controller versions the function serves per
# chart version (function/data, v2.7.0 to v2.12.0), with the actions they had then: the
# describe calls before ec2:GetSecurityGroupsForVpc was added (v2.7, v2.9), the tag-scoped
# (aws:ResourceTag/elbv2.k8s.aws/cluster) changes to the controller's own target groups before
# elasticloadbalancing:ModifyIpPools (unknown to parliament, which then skips the statement)
# joined them (v2.7 to v2.11), and the listener changes before SetRulePriorities (v2.7 to v2.11).
ALLOWED_RESOURCE_STAR_OLDER = {
    frozenset({"ec2:GetCoipPoolUsage"}),
    frozenset(
        {
            "elasticloadbalancing:DeleteTargetGroup", "elasticloadbalancing:ModifyTargetGroup",
            "elasticloadbalancing:ModifyTargetGroupAttributes",
        }
    ),
    frozenset(
        {
            "elasticloadbalancing:DeleteTargetGroup", "elasticloadbalancing:ModifyListenerAttributes",
            "elasticloadbalancing:ModifyTargetGroup", "elasticloadbalancing:ModifyTargetGroupAttributes",
        }
    ),
    frozenset(
        {
            "elasticloadbalancing:AddListenerCertificates", "elasticloadbalancing:ModifyListener",
            "elasticloadbalancing:ModifyRule", "elasticloadbalancing:RemoveListenerCertificates",
        }
    ),
}


def _spec_region(region: str) -> Any:
    def mutate(xr: dict[str, Any]) -> None:
        xr["spec"]["region"] = region

    return mutate


def _cluster_region(region: str) -> Any:
    def mutate(required: list[dict[str, Any]]) -> None:
        find(required, "AWSCluster")["spec"]["region"] = region

    return mutate


# The shared china-region/govcloud-region scenarios set the AWSCluster's region, which the
# selfhosted example's spec.region (us-east-1) overrides: these really are in those partitions.
PARTITIONED = [
    Scenario("cn-spec-region", "selfhosted-full", mutate_xr=_spec_region("cn-north-1")),
    Scenario("gov-spec-region", "selfhosted-full", mutate_xr=_spec_region("us-gov-west-1")),
    Scenario("cn-cluster-region", "calico-legacy-claim", mutate_required=_cluster_region("cn-northwest-1")),
]
ALL = {s.name: s for s in [*SCENARIOS, *PARTITIONED]}


@dataclass(frozen=True)
class Doc:
    """One policy document the function composed."""

    scenario: str
    node: str
    kind: str  # trust | identity | bucket
    text: str
    context: tuple[tuple[str, str], ...]  # region, bucket, issuer, provider

    @property
    def ctx(self) -> dict[str, str]:
        return dict(self.context)


def _partition(region: str) -> str:
    return next((p for prefix, p in PARTITION_OF.items() if region.startswith(prefix)), "aws")


class PartitionedWorld(InMemoryCrossplane):
    """The in-memory world, reporting ARNs in the partition of the XR's region.

    function_tools/in_memory_crossplane.py derives an ARN's partition from ``forProvider.region``, which IAM
    resources do not have, so it reports ``arn:aws:`` roles and (GovCloud) OIDC providers
    in every region. AWS would not: fix the observed ARNs so the checks see real ones.
    """

    partition = "aws"

    def _observed_object(self, c: Any) -> dict[str, Any]:
        obj = super()._observed_object(c)
        at = obj.get("status", {}).get("atProvider", {})
        if "arn" in at:
            at["arn"] = re.sub(r"^arn:[a-z-]+:", f"arn:{self.partition}:", at["arn"])
        return obj


@cache
def converged(name: str) -> InMemoryCrossplane:
    base = ALL[name].world(staged=False)
    world = PartitionedWorld(
        base.xr, base.required, step_input=base.step_input, crossplane_v1=base.crossplane_v1
    )
    region = world.xr["spec"].get("region") or find(world.required, "AWSCluster" if any(
        o["kind"] == "AWSCluster" for o in world.required) else "AWSManagedControlPlane")["spec"]["region"]
    world.partition = _partition(region)
    world.run(20)
    assert world.xr_ready, name
    return world


def policies(world: InMemoryCrossplane, scenario: str) -> list[Doc]:
    status = world.xr["status"]
    out = []
    for node, c in sorted(world.composed.items()):
        fp = c.obj["spec"].get("forProvider", {})
        region = fp.get("region") or next(
            (o["spec"].get("region") for o in world.required if o["kind"] in {"AWSCluster", "AWSManagedControlPlane"}),
            world.xr["spec"].get("region", "us-east-1"),
        )
        eks = next((o for o in world.required if o["kind"] == "AWSManagedControlPlane"), {})
        ctx = {
            "region": world.xr["spec"].get("region") or region,
            "issuer": status.get("issuerURL", ""),
            "provider": status.get("oidcProviderARN", ""),
            "bucket": fp.get("bucket", ""),
            "eks_cluster": eks.get("spec", {}).get("eksClusterName", ""),
        }
        kind = {"Role": "trust", "Policy": "identity", "BucketPolicy": "bucket"}.get(c.obj["kind"])
        field = {"trust": "assumeRolePolicy"}.get(kind or "", "policy")
        if kind:
            out.append(Doc(scenario, node, kind, fp[field], tuple(sorted(ctx.items()))))
    return out


@cache
def all_docs() -> tuple[Doc, ...]:
    docs = [d for name in ALL for d in policies(converged(name), name)]
    kinds = {d.kind for d in docs}
    assert kinds == {"trust", "identity", "bucket"}, kinds
    return tuple(docs)


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _doc_id(d: Doc) -> str:
    return f"{d.scenario}/{d.node}"


# --- parliament: identity policies ------------------------------------------------


def parliament_problems(text: str, stars: set[frozenset[str]] = ALLOWED_RESOURCE_STAR) -> list[str]:
    """Parliament's findings on an identity policy, less the allow-listed ones."""
    out = []
    for f in analyze_policy_string(text).findings:
        if f.issue == "RESOURCE_STAR" and frozenset(f.detail) in stars:
            continue
        detail = f.detail if isinstance(f.detail, str) else json.dumps(f.detail)
        key = (f.issue, detail.removeprefix("Unknown action ").removeprefix("Unknown condition "))
        if key in ALLOWED_FINDINGS:
            continue
        out.append(f"{f.issue}: {detail} at {f.location}")
    return out


def test_identity_policies_pass_parliament() -> None:
    seen: dict[str, str] = {}
    for d in all_docs():
        if d.kind == "identity" and d.text not in seen:
            seen[d.text] = _doc_id(d)
            problems = parliament_problems(d.text)
            assert not problems, f"{_doc_id(d)}:\n" + "\n".join(problems)
    assert len(seen) >= 3, "expected the LBC policy in three partitions"
    gen.figure("iam", "identity policies linted", len(seen))


def test_the_allow_list_is_not_stale() -> None:
    """Every allow-listed finding still occurs: the list never hides more than it says."""
    text = next(d.text for d in all_docs() if d.node == "lbc-policy")
    found = analyze_policy_string(text).findings
    issues = {(f.issue, f.detail if isinstance(f.detail, str) else "") for f in found}
    for issue, detail in ALLOWED_FINDINGS:
        assert any(i == issue and detail in dt for i, dt in issues), (issue, detail)
    stars = {frozenset(f.detail) for f in found if f.issue == "RESOURCE_STAR"}
    assert stars == ALLOWED_RESOURCE_STAR


LBC_CHARTS = ("1.7.0", "1.9.0", "1.10.0", "1.11.0", "1.12.0", "3.5.0")  # one per distinct policy


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_every_lbc_policy_version_and_union_passes_parliament(partition: str) -> None:
    """The policy of every chart version the function serves, and the union of any two (what
    an upgrade or a rollback applies while both run), in every partition."""
    p = PARTITIONS[partition]
    versions = [lbc_policy(p, chart) for chart in LBC_CHARTS]
    assert len(set(versions)) == len(LBC_CHARTS)
    docs = versions + [union_policy(a, b) for a, b in itertools.permutations(versions, 2)]
    stars = ALLOWED_RESOURCE_STAR | ALLOWED_RESOURCE_STAR_OLDER
    for text in docs:
        problems = parliament_problems(text, stars)
        assert not problems, "\n".join(problems)
    found = {
        frozenset(f.detail)
        for text in versions
        for f in analyze_policy_string(text).findings
        if f.issue == "RESOURCE_STAR"
    }
    assert found == stars, "the allow-lists name exactly what the versions have"
    gen.figure("iam", "LBC policy versions and unions linted", len(docs))


def test_parliament_does_catch_what_it_is_here_for() -> None:
    """Control: a policy granting everything is not silently accepted by the filter above."""
    bad = json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    )
    assert parliament_problems(bad)


# --- structural rules: every document ---------------------------------------------------


def statement_problems(d: Doc) -> list[str]:
    """Rules for every statement of every kind of document."""
    doc = json.loads(d.text)
    out = []
    if doc.get("Version") != "2012-10-17":
        out.append(f"Version {doc.get('Version')!r}")
    partition = _partition(d.ctx["region"])
    for i, s in enumerate(doc["Statement"]):
        where = f"statement {i} ({s.get('Sid', '')})"
        for inverted in ("NotAction", "NotPrincipal", "NotResource"):
            if inverted in s:
                out.append(f"{where}: {inverted} inverts a grant")
        actions = _list(s.get("Action", []))
        if s.get("Effect") == "Allow":
            for a in actions:
                if a == "*" or a.endswith(":*"):
                    out.append(f"{where}: allows {a!r}")
        principal = s.get("Principal")
        star = principal == "*" or (isinstance(principal, dict) and "*" in _list(principal.get("AWS", [])))
        if star and d.kind != "bucket":
            out.append(f"{where}: principal * outside the bucket policy")
        for arn in re.findall(r"arn:[a-z-]+:", d.text):
            if arn != f"arn:{partition}:":
                out.append(f"an ARN of partition {arn!r} in region {d.ctx['region']}")
                break
    limit = {"trust": 2048, "identity": 6144, "bucket": 20480}[d.kind]
    if len(re.sub(r"\s", "", d.text)) > limit:
        out.append(f"{len(d.text)} characters, over the {d.kind} policy limit {limit}")
    return out


def pod_identity_trust_problems(d: Doc) -> list[str]:
    """The exact shape of an EKS Pod Identity trust policy: one service account of one cluster.

    The session tags EKS puts on its AssumeRole request (aws:RequestTag/...) name the
    cluster (name, and ARN in its region: the account is the one wildcard, as EKS associates
    only roles of the cluster's own account), the namespace and the service account.
    """
    doc = json.loads(d.text)
    namespace, account = SUBJECTS[d.node].removeprefix("system:serviceaccount:").split(":")
    cluster, region = d.ctx["eks_cluster"], d.ctx["region"]
    if not cluster:
        return ["no EKS cluster name"]
    want = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-name": cluster,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": account,
                    },
                    "StringLike": {
                        "aws:RequestTag/eks-cluster-arn": f"arn:{_partition(region)}:eks:{region}:*:cluster/{cluster}"
                    },
                },
            }
        ],
    }
    return [] if doc == want else [f"Pod Identity trust policy is not exactly the expected one: {d.text}"]


def trust_problems(d: Doc) -> list[str]:
    """The exact shape of an IRSA (or EKS Pod Identity) trust policy."""
    doc = json.loads(d.text)
    if doc["Statement"][0].get("Principal") == {"Service": "pods.eks.amazonaws.com"}:
        return pod_identity_trust_problems(d)
    issuer = d.ctx["issuer"].removeprefix("https://")
    provider = d.ctx["provider"]
    if not re.fullmatch(rf"arn:{_partition(d.ctx['region'])}:iam::\d{{12}}:oidc-provider/.+", provider) and not (
        d.scenario == "external-eks" and re.fullmatch(r"arn:aws:iam::\d{12}:oidc-provider/.+", provider)
    ):
        return [f"provider ARN {provider!r}"]
    want = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {f"{issuer}:sub": SUBJECTS[d.node], f"{issuer}:aud": "sts.amazonaws.com"}
                },
            }
        ],
    }
    return [] if doc == want else [f"trust policy is not exactly the expected one: {d.text}"]


def bucket_problems(d: Doc) -> list[str]:
    """GetObject of the two discovery documents (public, or behind CloudFront for one
    distribution only, never ``*``), a Deny of plain HTTP; nothing else."""
    doc = json.loads(d.text)
    arn = f"arn:{_partition(d.ctx['region'])}:s3:::{d.ctx['bucket']}"
    issuer = d.ctx["issuer"]
    path = re.sub(r"^https://[^/]+/?", "", issuer)
    keys = [f"{path}/{k}" if path else k for k in (".well-known/openid-configuration", "keys.json")]
    read: dict[str, Any] = {
        "Sid": "PublicReadOIDCDiscovery",
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": [f"{arn}/{k}" for k in keys],
    }
    if not issuer.startswith(f"https://{d.ctx['bucket']}.s3."):
        # Behind CloudFront: the service principal, for this XR's distribution only.
        source = doc["Statement"][0].get("Condition", {}).get("StringEquals", {}).get("AWS:SourceArn", "")
        if not re.fullmatch(r"arn:aws:cloudfront::\d{12}:distribution/[A-Z0-9]+", source):
            return [f"the CloudFront read names no single distribution: {d.text}"]
        read = {
            "Sid": "CloudFrontReadsOIDCDiscovery",
            "Effect": "Allow",
            "Principal": {"Service": "cloudfront.amazonaws.com"},
            "Action": "s3:GetObject",
            "Resource": read["Resource"],
            "Condition": {"StringEquals": {"AWS:SourceArn": source}},
        }
    want = [
        read,
        {
            "Sid": "DenyInsecureTransport",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [arn, f"{arn}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        },
    ]
    return [] if doc["Statement"] == want else [f"bucket policy is not exactly the expected one: {d.text}"]


@pytest.mark.parametrize("kind", ["trust", "identity", "bucket"])
def test_every_composed_policy_follows_the_rules(kind: str) -> None:
    problems = []
    n = 0
    for d in all_docs():
        if d.kind != kind:
            continue
        n += 1
        found = statement_problems(d)
        if kind == "trust":
            found += trust_problems(d)
        elif kind == "bucket":
            found += bucket_problems(d)
        problems += [f"{_doc_id(d)}: {p}" for p in found]
    assert n > 0
    assert not problems, "\n".join(problems[:20])
    gen.figure("iam", f"{kind} policies checked", n)


def test_the_structural_rules_catch_a_wildcard() -> None:
    """Control: the rules above do fail a wildcard principal or action."""
    d = next(d for d in all_docs() if d.kind == "trust")
    doc = json.loads(d.text)
    doc["Statement"][0]["Principal"] = "*"
    assert statement_problems(Doc(d.scenario, d.node, "trust", json.dumps(doc), d.context))
    assert trust_problems(Doc(d.scenario, d.node, "trust", json.dumps(doc), d.context))
    ident = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "iam:*", "Resource": "*"}]}
    assert statement_problems(Doc(d.scenario, "x", "identity", json.dumps(ident), d.context))


def test_only_the_add_on_managed_policies_are_attached() -> None:
    for name in ALL:
        world = converged(name)
        for node, c in world.composed.items():
            if c.obj["kind"] != "RolePolicyAttachment":
                continue
            arn = c.obj["spec"]["forProvider"]["policyArn"]
            if node in CUSTOM:
                assert arn == world._observed_object(world.composed[CUSTOM[node]])["status"]["atProvider"]["arn"], arn
            else:
                assert re.fullmatch(rf"arn:aws(-cn|-us-gov)?:iam::aws:{re.escape(MANAGED[node])}", arn), (name, arn)


# --- what an XR author can and cannot steer ------------------------------------------

TRICKY_VALUES = {
    "networking.amazonVPC": st.fixed_dictionaries(
        {}, optional={"serviceAccount": st.fixed_dictionaries({}, optional={"create": st.booleans(), "annotations": st.just({"x": "y"})}),
                      "fullnameOverride": st.just("evil"), "nameOverride": st.just("evil")}
    ),
    "storage.ebs": st.fixed_dictionaries(
        {}, optional={"controller": st.just({"serviceAccount": {"create": True, "annotations": {"x": "y"}}}),
                      "node": st.just({"serviceAccount": {"name": "ebs-csi-controller-sa"}}),
                      "nameOverride": st.just("evil")}
    ),
    "storage.efs": st.fixed_dictionaries(
        {}, optional={"controller": st.just({"serviceAccount": {"create": False}}), "fullnameOverride": st.just("evil")}
    ),
    "ingress.awsLoadBalancerController": st.fixed_dictionaries(
        {}, optional={"serviceAccount": st.just({"create": True, "annotations": {"a": "b"}}), "fullnameOverride": st.just("evil"),
                      "nameOverride": st.just("evil")}
    ),
}


@gen.profile(fast=8, soak=200)
@given(values=st.fixed_dictionaries(dict(TRICKY_VALUES.items())))
def test_values_cannot_steer_a_trust_policy(values: dict[str, dict[str, Any]]) -> None:
    """Whatever else the values say, each role trusts exactly its add-on's fixed service account."""
    scenario = by_name("selfhosted-full")
    world = scenario.world(staged=False)
    for path, v in values.items():
        a, b = path.split(".")
        world.xr["spec"][a][b] = {**world.xr["spec"][a][b], "values": copy.deepcopy(v)}
    world.run(16)
    assert world.xr_ready
    for d in policies(world, "values"):
        if d.kind == "trust":
            assert trust_problems(d) == [], d.text


def test_an_owned_service_account_key_is_refused() -> None:
    for path, values in (
        ("storage.ebs", {"controller": {"serviceAccount": {"name": "default"}}}),
        ("networking.amazonVPC", {"serviceAccount": {"name": "default"}}),
        ("ingress.awsLoadBalancerController", {"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}}}),
    ):
        world = by_name("selfhosted-full").world(staged=False)
        a, b = path.split(".")
        world.xr["spec"][a][b] = {"values": values}
        rec = world.reconcile()
        assert rec.fatal is not None and rec.fatal.startswith(f"spec.{path}.values."), rec.fatal
        assert world.composed == {}


def test_external_mode_trusts_the_named_provider_for_fixed_accounts_only() -> None:
    """External: the provider ARN the XR names (or, left out, the EKS control plane's) is
    trusted, but only for the add-ons' fixed service accounts, only if it is the provider of
    the issuer named beside it, and on EKS only if it is the cluster's own."""
    world = by_name("external-eks").world(staged=False)
    other = "oidc.eks.eu-west-1.amazonaws.com/id/0THERC1USTER0000000000000000000"
    world.xr["spec"]["irsa"] = {
        "mode": "External",
        "issuerURL": f"https://{other}",
        "oidcProviderARN": f"arn:aws:iam::999999999999:oidc-provider/{other}",
    }
    # Another cluster's provider than the control plane reports is refused...
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith("spec.irsa.oidcProviderARN: "), rec.fatal
    assert "reports arn:aws:iam::111122223333:oidc-provider/" in rec.fatal
    # ...and trusted once it is the one the control plane reports.
    cp = next(o for o in world.required if o["kind"] == "AWSManagedControlPlane")
    cp["status"]["oidcProvider"]["arn"] = world.xr["spec"]["irsa"]["oidcProviderARN"]
    world.run(12)
    assert world.xr_ready
    docs = [d for d in policies(world, "external-eks") if d.kind == "trust"]
    assert docs
    for d in docs:
        assert trust_problems(d) == [], d.text
        assert json.loads(d.text)["Statement"][0]["Principal"]["Federated"].startswith("arn:aws:iam::999999999999:")
    # A provider that is not the issuer's own is refused.
    world.xr["spec"]["irsa"]["oidcProviderARN"] = "arn:aws:iam::999999999999:oidc-provider/oidc.example.com"
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith("spec.irsa.oidcProviderARN: ")


def test_a_bucket_name_cannot_point_at_another_namespaces_issuer() -> None:
    """An XR must not make the function write discovery documents into another tenant's bucket.

    Derived bucket names are predictable (``function-cluster-plugin issuer`` prints them).
    Were the override accepted, the composed ``irsa-jwks`` Object would overwrite the other
    cluster's keys.json with this cluster's key, and the other tenant's OIDC provider (and
    every role trusting it) would then accept tokens this cluster signs.
    """
    victim = Names("", "team-a", "demo").bucket
    xr = gen.make_xr("namespaced", "mallory", {"clusterName": "evil", "storage": {"ebs": {}}, "irsa": {"mode": "SelfHosted", "bucketName": victim}})
    world = InMemoryCrossplane(xr, gen.cluster_objects("kubeadm", "evil", "mallory"))
    world.run(10)
    written = {
        c.obj["spec"]["forProvider"].get("bucket") or c.obj["metadata"].get("annotations", {}).get(gen.EXTERNAL_NAME)
        for c in world.composed.values()
        if c.obj["kind"] in {"Bucket", "Object", "BucketPolicy", "BucketPublicAccessBlock", "BucketOwnershipControls"}
    }
    fatal = world.history[0].fatal
    assert victim not in written, (
        f"namespace mallory's XR composes S3 resources on {victim!r}, the issuer bucket of team-a/demo "
        f"(FATAL: {fatal})"
    )
    assert fatal is not None and fatal.startswith("spec.irsa.bucketName: "), fatal
