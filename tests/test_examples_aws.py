"""Every example, as its files stand, passes ``aws preflight`` against the AWS emulator (moto).

external-eks has no AWSCluster (EKS manages its security group): its account holds the IAM OIDC
provider CAPA associates (``spec.associateOIDCProvider``), in moto's account.

The account is the one the example's user has: a VPC with the security groups CAPA made for the
example's AWSCluster, holding exactly the ingress rules CAPA authorizes for its spec
(tests/capa.py, a model of CAPA's securitygroups.go), and what a platform team sets up beforehand
as docs/issuer.md says (a Shared distribution's bucket; a Managed distribution's certificate and hosted
zone; external-dns' hosted zones). Only ids AWS assigns are substituted: the security groups', and
moto's for the placeholder certificate ARN and hosted zone ids. The command runs (through the CLI)
before the function created anything and again after (what it composes, made with boto3 as in
tests/aws_helpers.compose), and must report 0 failed both times.

The same account built from an AWSCluster as CAPA defaults it (Calico's rules) fails: that is
the gap the examples had. And each example's AWSCluster status is what CAPA publishes for its spec.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function.policies import STS_AUDIENCE, pod_identity_trust_policy
from function_tools.aws.checks import Clients
from function_tools.aws.pod_identity_checks import ASSUMED
from function_tools.aws.role_checks import addon_roles
from function_tools.aws.target import Target, build_target
from function_tools.commands.aws import aws
from function_tools.input_files import load_documents
from tests import aws_helpers as h
from tests import capa
from tests.test_aws_preflight_cloudfront import certificate, platform_setup

EXAMPLES = h.EXAMPLES
# The examples on CAPA-managed EC2 (AWSCluster); external-eks runs on EKS (no AWSCluster).
CAPA_EXAMPLES = (
    "selfhosted-full",
    "calico-legacy-claim",
    "cloudfront-managed",
    "cloudfront-shared",
    "external-dns",
)
ROLES = (capa.CONTROL_PLANE, capa.NODE, capa.APISERVER_LB)


def _awscluster(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d.get("kind") == "AWSCluster")


def _step_input(example: str) -> dict[str, Any] | None:
    """The Input of the example's own Composition, if it ships one."""
    path = EXAMPLES / example / "composition.yaml"
    if not path.is_file():
        return None
    composition = yaml.safe_load(path.read_text())
    return next(
        s["input"]
        for s in composition["spec"]["pipeline"]
        if (s.get("input") or {}).get("kind") == "Input"
    )


# --- the examples model what CAPA publishes ------------------------------------------------------


def _multiset(rules: list[dict[str, Any]]) -> Counter[str]:
    return Counter(json.dumps(r, sort_keys=True) for r in rules)


@pytest.mark.parametrize("example", CAPA_EXAMPLES)
def test_the_awscluster_status_is_what_capa_publishes_for_its_spec(example: str) -> None:
    infra = _awscluster(load_documents([EXAMPLES / example / "required"]))
    groups = infra["status"]["networkStatus"]["securityGroups"]
    published = capa.published_rules(infra, {r: groups[r]["id"] for r in ROLES})
    for role in (capa.CONTROL_PLANE, capa.NODE):
        assert _multiset(groups[role]["ingressRule"]) == _multiset(published[role]), role


# --- aws preflight against the emulator ---------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


def _capa_groups(ec2: Any, cluster: str) -> dict[str, str]:
    """The VPC and the groups CAPA creates (``<cluster>-<role>``); returns role -> id."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    return {
        role: ec2.create_security_group(
            GroupName=f"{cluster}-{role}",
            Description=f"Kubernetes cluster {cluster}: {role}",
            VpcId=vpc,
        )["GroupId"]
        for role in ROLES
    }


def _with_group_ids(infra: dict[str, Any], ids: dict[str, str]) -> None:
    """The AWSCluster as CAPA reports it for groups ``ids``: their ids, and its rules on them."""
    groups = infra["status"]["networkStatus"]["securityGroups"]
    for role, gid in ids.items():
        groups[role]["id"] = gid
    for role, rules in capa.published_rules(infra, ids).items():
        groups[role]["ingressRule"] = rules


def _xr(example: str) -> dict[str, Any]:
    return load_documents([EXAMPLES / example / "xr.yaml"])[0]


def _placeholders(example: str, clients: Clients, xr: dict[str, Any]) -> None:
    """What the platform team has before the example's user runs preflight, with AWS's ids."""
    spec = xr["spec"]
    cloud_front = ((spec.get("irsa") or {}).get("hosting") or {}).get("cloudFront") or {}
    if cloud_front.get("distribution") == "Shared":
        platform_setup(clients)
    if cloud_front.get("distribution") == "Managed":
        domain = cloud_front["domain"]
        cloud_front["certificateArn"] = certificate(clients.acm, domain)
        zone = domain.split(".", 1)[1]
        made = clients.route53.create_hosted_zone(Name=zone, CallerReference=zone)
        cloud_front["hostedZoneId"] = made["HostedZone"]["Id"].removeprefix("/hostedzone/")
    dns = (spec.get("dns") or {}).get("externalDNS")
    if dns is not None:
        # The example's comments name each zone: "- Z0123456789ABCDEFGHIJ   # example.com".
        text = (EXAMPLES / example / "xr.yaml").read_text()
        names = {
            line.split("-", 1)[1].split("#")[0].strip(): line.split("#", 1)[1].strip()
            for line in text.splitlines()
            if line.strip().startswith("- Z") and "#" in line
        }
        dns["hostedZoneIDs"] = [
            clients.route53.create_hosted_zone(Name=names[z], CallerReference=names[z])[
                "HostedZone"
            ]["Id"].removeprefix("/hostedzone/")
            for z in dns["hostedZoneIDs"]
        ]


@dataclass
class Account:
    """One example's account in moto, and the files the CLI is given."""

    clients: Clients
    target: Target
    xr_file: Path
    required_dir: Path
    public_pem: bytes


def _account(
    server: h.MotoServer,
    tmp_path: Path,
    example: str,
    mutate_infra: Callable[[dict[str, Any]], None] | None = None,
) -> Account:
    server.reset()
    clients = h.make_clients(server.endpoint)
    xr = _xr(example)
    docs = load_documents([EXAMPLES / example / "required"])
    infra = _awscluster(docs)
    if mutate_infra is not None:
        mutate_infra(infra)
    # The groups are in the cluster's region (the rest is global, or placed by its own call).
    ec2 = h.make_clients(server.endpoint, region=infra["spec"]["region"]).ec2
    ids = _capa_groups(ec2, infra["metadata"]["name"])
    _with_group_ids(infra, ids)
    # What CAPA authorizes for this AWSCluster: its rules, nothing else.
    capa.authorize(ec2, infra, ids)
    _placeholders(example, clients, xr)
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(xr))
    required_dir = h.write_required(tmp_path / "required", docs)
    target = build_target(xr, required=docs, step_input=_step_input(example))
    secret = next(d for d in docs if d.get("kind") == "Secret")
    return Account(
        clients, target, xr_file, required_dir, base64.b64decode(secret["data"]["tls.crt"])
    )


def _preflight(
    server: h.MotoServer, example: str, account: Account, *args: str
) -> tuple[int, dict[str, Any]]:
    argv = [
        "preflight",
        str(account.xr_file),
        "--endpoint-url",
        server.endpoint,
        "--required",
        str(account.required_dir),
        "-o",
        "json",
        *args,
    ]
    if (EXAMPLES / example / "composition.yaml").is_file():
        argv += ["--composition", str(EXAMPLES / example / "composition.yaml")]
    r = CliRunner().invoke(aws, argv)
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.output)


def _not_passed(report: dict[str, Any]) -> dict[str, str]:
    return {
        c["name"]: f"{c['status']}: {c['message']}"
        for c in report["checks"]
        if c["status"] != "pass"
    }


@pytest.mark.usefixtures("fake_aws_credentials")
@pytest.mark.parametrize("example", CAPA_EXAMPLES)
def test_aws_preflight_passes_each_example_before_and_after(
    server: h.MotoServer, tmp_path: Path, example: str
) -> None:
    account = _account(server, tmp_path, example)
    code, before = _preflight(server, example, account)
    assert before["phase"] == "before"
    assert (code, before["summary"]["fail"]) == (0, 0), _not_passed(before)
    ports = [c for c in before["checks"] if c["name"].startswith("security-groups/")]
    assert ports and all(c["status"] == "pass" for c in ports), ports
    h.compose(account.clients, account.target, public_pem=account.public_pem)
    code, after = _preflight(server, example, account, "--phase", "after")
    # Every check passes once the function's resources exist: no warning left either.
    assert (code, _not_passed(after)) == (0, {})


def _as_capa_defaults_it(infra: dict[str, Any]) -> None:
    """The AWSCluster the examples had: CAPA's default (Calico) CNI rules, nothing more."""
    network = infra["spec"]["network"]
    network["cni"] = {
        "cniIngressRules": [
            {"description": "bgp (calico)", "protocol": "tcp", "fromPort": 179, "toPort": 179},
            {
                "description": "IP-in-IP (calico)",
                "protocol": "4",
                "fromPort": -1,
                "toPort": 65535,
            },
        ]
    }
    network.pop("additionalNodeIngressRules", None)


@pytest.mark.usefixtures("fake_aws_credentials")
def test_the_ports_capa_opens_by_default_fail_the_preflight(
    server: h.MotoServer, tmp_path: Path
) -> None:
    account = _account(server, tmp_path, "selfhosted-full", mutate_infra=_as_capa_defaults_it)
    code, report = _preflight(server, "selfhosted-full", account)
    assert code == 1
    failed = {c["name"]: c for c in report["checks"] if c["status"] == "fail"}
    assert set(failed) == {"security-groups/vpc-cni-all", "security-groups/lbc-webhook"}
    assert "spec.network.cni.cniIngressRules" in failed["security-groups/vpc-cni-all"]["fix"]
    assert "spec.network.additionalNodeIngressRules" in failed["security-groups/lbc-webhook"]["fix"]


@pytest.mark.usefixtures("fake_aws_credentials")
def test_aws_preflight_passes_the_eks_example_before_and_after(
    server: h.MotoServer, tmp_path: Path
) -> None:
    server.reset()
    example = "external-eks"
    xr = _xr(example)
    docs = load_documents([EXAMPLES / example / "required"])
    control_plane = next(d for d in docs if d["kind"] == "AWSManagedControlPlane")
    provider = control_plane["status"]["oidcProvider"]
    # What CAPA made for spec.associateOIDCProvider, in moto's account.
    provider["arn"] = provider["arn"].replace(":111122223333:", f":{h.ACCOUNT}:")
    clients = h.make_clients(server.endpoint, region=xr["spec"]["region"])
    made = clients.iam.create_open_id_connect_provider(
        Url="https://" + provider["arn"].split(":oidc-provider/", 1)[1],
        ClientIDList=[STS_AUDIENCE],
    )
    assert made["OpenIDConnectProviderArn"] == provider["arn"]
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(xr))
    target = build_target(xr, required=docs)
    account = Account(clients, target, xr_file, h.write_required(tmp_path / "required", docs), b"")
    code, before = _preflight(server, example, account)
    assert before["phase"] == "before"
    assert (code, _not_passed(before)) == (0, {})
    # The function composes the add-on roles alone (h.compose makes a SelfHosted issuer too).
    for addon in addon_roles(target.spec):
        h._compose_role(
            clients=clients,
            target=target,
            addon=addon,
            provider=provider["arn"],
            account=h.ACCOUNT,
            trust_overrides={},
            extra_attachments={},
        )
    code, after = _preflight(server, example, account, "--phase", "after")
    assert (code, _not_passed(after)) == (0, {})
    assert {c["name"] for c in after["checks"]} >= {"oidc-provider", "role/vpc-cni", "role/lbc"}


@pytest.mark.usefixtures("fake_aws_credentials")
def test_aws_preflight_of_the_pod_identity_example_checks_the_agents_node_permission(
    server: h.MotoServer, tmp_path: Path
) -> None:
    """examples/eks-pod-identity: with the node role as CAPA makes it (AmazonEKSWorkerNodePolicy)
    preflight passes; without eks-auth:AssumeRoleForPodIdentity it fails, naming the fix."""
    server.reset()
    example = "eks-pod-identity"
    xr = _xr(example)
    docs = load_documents([EXAMPLES / example / "required"])
    clients = h.make_clients(server.endpoint, region=xr["spec"]["region"])
    role = "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io"  # CAPA's default node group role
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    clients.iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(trust))
    worker = h.EKS_WORKER_NODE_POLICY
    clients.iam.attach_role_policy(RoleName=role, PolicyArn=worker)
    xr_file = tmp_path / "xr.yaml"
    xr_file.write_text(yaml.safe_dump(xr))
    target = build_target(xr, required=docs)
    account = Account(clients, target, xr_file, h.write_required(tmp_path / "required", docs), b"")
    code, report = _preflight(server, example, account)
    assert (code, _not_passed(report)) == (0, {})
    node = next(c for c in report["checks"] if c["name"] == f"pod-identity/node-role/{role}")
    assert node["message"].startswith(f"policy {worker} of the node role {role} allows eks-auth:AssumeRoleForPodIdentity (used by CAPA's default")
    assert report["issuerURL"] is None
    assert report["phase"] == "before"

    # The add-on roles as the function makes them: preflight passes after, then fails a role
    # trusting EKS Pod Identity without conditions (any association in the account could use it).
    trusts = {
        a.addon: pod_identity_trust_policy(
            target.partition, "us-west-2", "prod", a.namespace, a.service_account
        )
        for a in addon_roles(target.spec)
    }
    for addon in addon_roles(target.spec):
        h._compose_role(
            clients=clients,
            target=target,
            addon=addon,
            provider="",
            account=h.ACCOUNT,
            trust_overrides=trusts,
            extra_attachments={},
        )
    code, report = _preflight(server, example, account)
    assert report["phase"] == "after"
    assert (code, _not_passed(report)) == (0, {})
    assert {"role/vpc-cni", "role/ebs-csi", "role/lbc"} <= {c["name"] for c in report["checks"]}
    unconditioned = json.loads(trusts["ebs-csi"])
    unconditioned["Statement"][0].pop("Condition")
    clients.iam.update_assume_role_policy(
        RoleName=target.names.role("ebs-csi"), PolicyDocument=json.dumps(unconditioned)
    )
    code, report = _preflight(server, example, account)
    assert code == 1
    assert _not_passed(report) == {
        "role/ebs-csi": f"fail: role {target.names.role('ebs-csi')}: trust policy is not the "
        "function's EKS Pod Identity trust policy"
    }
    failed = next(c for c in report["checks"] if c["status"] == "fail")
    assert failed["fix"].startswith(f"aws iam update-assume-role-policy --role-name {target.names.role('ebs-csi')}")
    assert "aws:RequestTag/kubernetes-service-account" in failed["fix"]
    clients.iam.update_assume_role_policy(RoleName=target.names.role("ebs-csi"), PolicyDocument=trusts["ebs-csi"])

    # The same role without the agent's permission (the CNI policy instead).
    clients.iam.detach_role_policy(RoleName=role, PolicyArn=worker)
    clients.iam.attach_role_policy(RoleName=role, PolicyArn="arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy")
    code, report = _preflight(server, example, account)
    assert code == 1
    assert _not_passed(report) == {
        f"pod-identity/node-role/{role}": (
            f"fail: no policy of the node role {role} allows eks-auth:AssumeRoleForPodIdentity: the "
            "eks-pod-identity-agent cannot get the add-ons' credentials, and their pods run without them "
            f"(used by {ASSUMED})"
        )
    }
    failed = next(c for c in report["checks"] if c["status"] == "fail")
    assert failed["fix"].startswith(f"aws iam attach-role-policy --role-name {role} --policy-arn {worker}")

    # Another node role, named with --node-role; an inline Deny wins over the managed Allow.
    clients.iam.create_role(RoleName="nodes-prod", AssumeRolePolicyDocument=json.dumps(trust))
    clients.iam.attach_role_policy(RoleName="nodes-prod", PolicyArn=worker)
    deny = {"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Action": "eks-auth:*", "Resource": "*"}]}
    clients.iam.put_role_policy(RoleName="nodes-prod", PolicyName="no-pod-identity", PolicyDocument=json.dumps(deny))
    code, report = _preflight(server, example, account, "--node-role", "nodes-prod")
    assert code == 1
    assert set(_not_passed(report)) == {"pod-identity/node-role/nodes-prod"}
    assert "inline no-pod-identity of the node role nodes-prod denies" in _not_passed(report)["pod-identity/node-role/nodes-prod"]
    code, report = _preflight(server, example, account, "--node-role", "missing-role")
    assert _not_passed(report)["pod-identity/node-role/missing-role"].startswith(
        "fail: the node role missing-role does not exist"
    )
