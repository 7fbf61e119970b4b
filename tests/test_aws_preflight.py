"""``aws preflight`` against a moto server (one per session, reset before each test).

The "good account" is built with boto3 exactly as the function composes the
examples/selfhosted-full example (tests/aws_helpers.compose); each failure test
plants one fault in it and checks the message says what to change.

What moto cannot simulate, and how it is covered instead:
- a bucket owned by another AWS account: moto answers HeadBucket with 200 even
  across moto accounts (buckets are one global namespace there, with no
  cross-account access check), never 403. The 403 branch is unit-tested with a
  botocore Stubber; the "exists in this account but is someone else's" branch
  (tag mismatch) runs against moto.
- account-level Block Public Access is stored and returned by moto but not
  enforced (PutBucketPolicy still succeeds), which is all preflight needs: it
  reads the setting.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from click.testing import CliRunner

from function.accept import RegionError
from function.addons.oidc_issuer import jwks_document
from function.names import CLUSTER_TAG, partition_of
from function.policies import JWKS_KEY, STS_AUDIENCE, managed_policy_arn, trust_policy
from function_tools.aws import issuer_checks, role_checks
from function_tools.aws import preflight as pf
from function_tools.aws.checks import Check, Clients, Phase, Status
from function_tools.aws.target import Target, build_target
from function_tools.commands.aws import aws
from tests import aws_helpers as h


@pytest.fixture(scope="session")
def moto_server() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


@dataclass
class InMemoryCrossplane:
    server: h.MotoServer
    clients: Clients
    network: h.Network
    target: Target

    def run(self, phase: Phase = Phase.AUTO, target: Target | None = None) -> pf.Report:
        return pf.run(target or self.target, self.clients, phase)

    def compose(self, **kw: Any) -> h.Composed:
        h.open_ports(self.clients.ec2, self.target, self.network.groups)
        return h.compose(
            self.clients, self.target, public_pem=kw.pop("public_pem", h.example_public_key()), **kw
        )


@pytest.fixture
def world(moto_server: h.MotoServer) -> InMemoryCrossplane:
    moto_server.reset()
    clients = h.make_clients(moto_server.endpoint)
    network = h.make_network(clients.ec2)
    return InMemoryCrossplane(moto_server, clients, network, h.example_target(network.groups))


def by_name(report: pf.Report) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


def problems(report: pf.Report) -> dict[str, str]:
    return {
        c.name: f"{c.status.value}: {c.message}"
        for c in report.checks
        if c.status is not Status.PASS
    }


ALL_CHECKS = [
    "credentials",
    "issuer/api-server",
    "account/s3-block-public-access",
    "bucket",
    "bucket/public-access-block",
    "issuer/discovery",
    "issuer/jwks",
    "oidc-provider",
    "oidc-provider/quota",
    *[f"role/{a}{s}" for a in ("vpc-cni", "ebs-csi", "efs-csi", "lbc") for s in ("", "/policies")],
    "security-groups/vpc-cni-all",
    "security-groups/lbc-webhook",
    "deletion/external-resource-gc",
]


def test_a_good_account_passes_every_check(world: InMemoryCrossplane) -> None:
    world.compose()
    for phase in (Phase.AFTER, Phase.AUTO):
        report = world.run(phase)
        assert report.phase is Phase.AFTER
        assert problems(report) == {}
        assert [c.name for c in report.checks] == ALL_CHECKS
        assert not report.failed


def test_an_empty_account_passes_before_creation(world: InMemoryCrossplane) -> None:
    h.open_ports(world.clients.ec2, world.target, world.network.groups)
    report = world.run()
    assert report.phase is Phase.BEFORE
    assert problems(report) == {}
    checks = by_name(report)
    assert "is free" in checks["bucket"].message
    assert "issuer/jwks" not in checks  # nothing to read yet
    assert "the function creates" in checks["role/lbc"].message


def test_phase_after_fails_for_what_is_missing_and_auto_only_warns(world: InMemoryCrossplane) -> None:
    h.open_ports(world.clients.ec2, world.target, world.network.groups)
    after = world.run(Phase.AFTER)
    assert by_name(after)["bucket"].status is Status.FAIL
    assert by_name(after)["role/vpc-cni"].status is Status.FAIL
    # The bucket exists but nothing else does yet: auto reports the rest as not created yet.
    s3 = world.clients.s3
    bucket = world.target.names.bucket
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_tagging(
        Bucket=bucket, Tagging={"TagSet": [{"Key": CLUSTER_TAG, "Value": "team-a/demo"}]}
    )
    auto = world.run()
    assert auto.phase is Phase.AFTER
    assert not auto.failed, problems(auto)
    assert {n for n, c in by_name(auto).items() if c.status is Status.WARN} >= {
        "issuer/discovery",
        "issuer/jwks",
        "oidc-provider",
        "role/vpc-cni",
    }


def test_account_level_block_public_access_fails_with_the_fix(world: InMemoryCrossplane) -> None:
    world.compose()
    world.clients.s3control.put_public_access_block(
        AccountId=h.ACCOUNT,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": True,
        },
    )
    report = world.run()
    check = by_name(report)["account/s3-block-public-access"]
    assert check.status is Status.FAIL
    assert "BlockPublicPolicy=true" in check.message
    assert "RestrictPublicBuckets=true" in check.message
    assert f"--account-id {h.ACCOUNT}" in check.fix
    assert "BlockPublicPolicy=false,RestrictPublicBuckets=false" in check.fix
    assert report.failed


def test_account_level_block_of_acls_only_passes(world: InMemoryCrossplane) -> None:
    world.clients.s3control.put_public_access_block(
        AccountId=h.ACCOUNT,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": False,
            "RestrictPublicBuckets": False,
        },
    )
    assert by_name(world.run())["account/s3-block-public-access"].status is Status.PASS


@pytest.mark.parametrize(
    ("tags", "phrase"),
    [
        ([{"Key": CLUSTER_TAG, "Value": "team-b/other"}], "belongs to team-b/other"),
        ([], "has no clusterplugin.dev/cluster tag"),
    ],
)
def test_a_bucket_of_someone_else_in_this_account_fails(
    world: InMemoryCrossplane, tags: list[dict[str, str]], phrase: str
) -> None:
    bucket = world.target.names.bucket
    world.clients.s3.create_bucket(Bucket=bucket)
    if tags:
        world.clients.s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})
    report = world.run()
    check = by_name(report)["bucket"]
    assert check.status is Status.FAIL
    assert phrase in check.message
    assert "Crossplane would take it over" in check.message
    assert "spec.irsa.bucketName" in check.fix
    assert "namePrefix" in check.fix
    assert report.phase is Phase.BEFORE  # not ours: nothing else is read from it


def test_a_bucket_owned_by_another_account_fails() -> None:
    # moto cannot answer 403 for another account's bucket (see the module docstring):
    # the 403 HeadBucket is stubbed on a real client that makes no network call.
    s3 = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(s3) as stub:
        stub.add_client_error(
            "head_bucket",
            service_error_code="403",
            service_message="Forbidden",
            http_status_code=403,
        )
        check, state = issuer_checks.check_bucket(s3, "irsa-team-a-demo-1960e3", "us-east-1", "team-a/demo")
    assert state is issuer_checks.BucketState.TAKEN
    assert check.status is Status.FAIL
    assert "owned by another AWS account" in check.message
    assert "spec.irsa.bucketName" in check.fix
    assert "namePrefix" in check.fix


def test_a_wrong_service_account_in_the_trust_policy_is_named(world: InMemoryCrossplane) -> None:
    t = world.target
    provider = issuer_checks.provider_arn_for(t.partition, h.ACCOUNT, t.issuer_host_path)
    wrong = trust_policy(provider, t.issuer_host_path, "kube-system", "aws-vpc-cni")
    world.compose(trust_overrides={"vpc-cni": wrong})
    check = by_name(world.run())["role/vpc-cni"]
    assert check.status is Status.FAIL
    assert (
        "trust policy sub is system:serviceaccount:kube-system:aws-vpc-cni, "
        "expected system:serviceaccount:kube-system:aws-node"
    ) in check.message
    assert "update-assume-role-policy" in check.fix
    assert "system:serviceaccount:kube-system:aws-node" in check.fix


def test_a_missing_audience_is_named(world: InMemoryCrossplane) -> None:
    t = world.target
    provider = issuer_checks.provider_arn_for(t.partition, h.ACCOUNT, t.issuer_host_path)
    doc = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": provider},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{t.issuer_host_path}:sub": "system:serviceaccount:kube-system:ebs-csi-controller-sa"
                    }
                },
            }
        ],
    }
    world.compose(trust_overrides={"ebs-csi": json.dumps(doc)})
    report = world.run()
    check = by_name(report)["role/ebs-csi"]
    assert check.status is Status.FAIL
    assert check.message.endswith(
        f"trust policy has no aud condition, expected {t.issuer_host_path}:aud = {STS_AUDIENCE}"
    )
    assert by_name(report)["role/efs-csi"].status is Status.PASS


def test_a_wrong_policy_attached_is_named(world: InMemoryCrossplane) -> None:
    admin = "arn:aws:iam::aws:policy/AdministratorAccess"
    world.compose(extra_attachments={"efs-csi": [admin]})
    check = by_name(world.run())["role/efs-csi/policies"]
    assert check.status is Status.FAIL
    assert f"unexpected attached policy {admin}" in check.message
    assert (
        f"detach-role-policy --role-name {world.target.names.role('efs-csi')} --policy-arn {admin}"
        in check.fix
    )


def test_a_policy_missing_and_another_attached_instead(world: InMemoryCrossplane) -> None:
    world.compose()
    iam, t = world.clients.iam, world.target
    role = t.names.role("vpc-cni")
    cni = managed_policy_arn("policy/AmazonEKS_CNI_Policy", partition_of(t.region))
    iam.detach_role_policy(RoleName=role, PolicyArn=cni)
    iam.attach_role_policy(
        RoleName=role, PolicyArn=managed_policy_arn(
            "policy/service-role/AmazonEFSCSIDriverPolicy", partition_of(t.region)
        )
    )
    extra = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*"}],
    }
    iam.put_role_policy(RoleName=role, PolicyName="extra", PolicyDocument=json.dumps(extra))
    check = by_name(world.run())["role/vpc-cni/policies"]
    assert check.status is Status.FAIL
    assert f"{cni} is not attached" in check.message
    assert "AmazonEFSCSIDriverPolicy" in check.message
    assert "unexpected inline policy extra" in check.message


def test_a_jwks_built_from_another_key_is_detected(world: InMemoryCrossplane) -> None:
    world.compose(public_pem=h.other_public_key())
    report = world.run()
    check = by_name(report)["issuer/jwks"]
    expected_kid = json.loads(jwks_document(h.example_public_key()))["keys"][0]["kid"]
    assert check.status is Status.FAIL
    assert f"expected kid {expected_kid} (from Secret team-a/demo-sa)" in check.message
    assert "built from a different key" in check.message
    assert by_name(report)["issuer/discovery"].status is Status.PASS


def test_jwks_with_an_extra_key_and_a_private_object_are_reported(world: InMemoryCrossplane) -> None:
    world.compose()
    t, s3 = world.target, world.clients.s3
    doc = json.loads(jwks_document(h.example_public_key()))
    extra = json.loads(jwks_document(h.other_public_key()))
    s3.put_object(
        Bucket=t.names.bucket,
        Key=JWKS_KEY,
        Body=json.dumps({"keys": doc["keys"] + extra["keys"]}).encode(),
    )
    assert "also trusts kid" in by_name(world.run())["issuer/jwks"].message
    s3.delete_bucket_policy(Bucket=t.names.bucket)
    report = world.run()
    for name in ("issuer/discovery", "issuer/jwks"):
        assert by_name(report)[name].status is Status.FAIL
        assert "not publicly readable" in by_name(report)[name].message


def test_an_oidc_provider_that_is_not_ours_fails(world: InMemoryCrossplane) -> None:
    world.clients.iam.create_open_id_connect_provider(
        Url=world.target.issuer_url, ClientIDList=[STS_AUDIENCE]
    )
    check = by_name(world.run())["oidc-provider"]
    assert check.status is Status.FAIL
    assert "EntityAlreadyExists" in check.message
    assert "delete-open-id-connect-provider" in check.fix


def test_oidc_provider_quota(world: InMemoryCrossplane) -> None:
    for i in range(90):
        world.clients.iam.create_open_id_connect_provider(
            Url=f"https://issuer-{i}.example.com", ClientIDList=[STS_AUDIENCE]
        )
    check = by_name(world.run())["oidc-provider/quota"]
    assert check.status is Status.WARN
    assert "90 of 100" in check.message
    for i in range(90, 100):
        world.clients.iam.create_open_id_connect_provider(
            Url=f"https://issuer-{i}.example.com", ClientIDList=[STS_AUDIENCE]
        )
    check = by_name(world.run())["oidc-provider/quota"]
    assert check.status is Status.FAIL
    assert "LimitExceeded" in check.message


def test_missing_ports_on_capa_groups_name_the_awscluster_entries(world: InMemoryCrossplane) -> None:
    # CAPA's default rules only (the example AWSCluster's): neither need is met. (An all-traffic
    # rule between the groups, which the VPC CNI needs, would also cover the webhook port.)
    checks = by_name(world.run())
    node, cp = world.network.groups["node"], world.network.groups["controlplane"]
    cni = checks["security-groups/vpc-cni-all"]
    assert cni.status is Status.FAIL
    assert "all traffic (vpc-cni) (protocol -1) is not open on" in cni.message
    assert "AWSCluster team-a/demo spec.network.cni.cniIngressRules" in cni.fix
    assert '"protocol": "-1"' in cni.fix
    lbc = checks["security-groups/lbc-webhook"]
    assert lbc.status is Status.FAIL
    assert f"(tcp 9443-9443) is not open on {node} (node) from {cp} (controlplane)" in lbc.message
    assert "spec.network.additionalNodeIngressRules" in lbc.fix
    assert '"sourceSecurityGroupRoles": ["controlplane"]' in lbc.fix
    h.open_ports(world.clients.ec2, world.target, world.network.groups, skip={"vpc-cni-all"})
    checks = by_name(world.run())
    assert checks["security-groups/lbc-webhook"].status is Status.PASS
    assert checks["security-groups/vpc-cni-all"].status is Status.FAIL


def test_ports_on_override_groups_are_composed_by_the_function(world: InMemoryCrossplane) -> None:
    docs = h.example_required(world.network.groups)
    infra = next(d for d in docs if d["kind"] == "AWSCluster")
    infra["spec"]["network"]["securityGroupOverrides"] = dict(world.network.groups)
    target = build_target(h.example_xr(), required=docs)
    before = by_name(world.run(target=target))
    assert before["security-groups/lbc-webhook"].status is Status.PASS
    assert "the function composes" in before["security-groups/lbc-webhook"].message
    after = by_name(world.run(Phase.AFTER, target=target))
    assert after["security-groups/lbc-webhook"].status is Status.FAIL
    assert "sg-lbc-webhook-*" in after["security-groups/lbc-webhook"].fix


def test_external_irsa_checks_the_given_provider(world: InMemoryCrossplane) -> None:
    xr = h.example_xr()
    issuer = "oidc.eks.us-east-1.amazonaws.com/id/ABCDEF0123456789"
    arn = f"arn:aws:iam::{h.ACCOUNT}:oidc-provider/{issuer}"
    xr["spec"]["irsa"] = {
        "mode": "External",
        "issuerURL": f"https://{issuer}",
        "oidcProviderARN": arn,
    }
    target = build_target(xr, required=h.example_required(world.network.groups))
    check = by_name(world.run(target=target))["oidc-provider"]
    assert check.status is Status.FAIL
    assert "does not exist" in check.message
    world.clients.iam.create_open_id_connect_provider(
        Url=f"https://{issuer}", ClientIDList=[STS_AUDIENCE]
    )
    report = world.run(target=target)
    assert by_name(report)["oidc-provider"].status is Status.PASS
    assert "bucket" not in by_name(report)


# --- pure checks ---------------------------------------------------------------------------


HOST = "irsa-x.s3.us-east-1.amazonaws.com"
PROVIDER = f"arn:aws:iam::{h.ACCOUNT}:oidc-provider/{HOST}"


def _trust(**condition: Any) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": PROVIDER},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": condition,
            }
        ],
    }


def _problems(doc: Any) -> list[str]:
    return role_checks.trust_policy_problems(
        doc,
        provider_arn=PROVIDER,
        issuer_host_path=HOST,
        namespace="kube-system",
        service_account="aws-node",
    )


def test_trust_policy_comparison_is_semantic() -> None:
    good = {
        f"{HOST}:aud": STS_AUDIENCE,
        f"{HOST}:sub": "system:serviceaccount:kube-system:aws-node",
    }
    assert _problems(_trust(StringEquals=good)) == []
    assert _problems(json.dumps(_trust(StringEquals=[good][0]), indent=4)) == []  # any formatting
    assert (
        _problems(
            _trust(
                StringEquals={**good, f"{HOST}:sub": ["system:serviceaccount:kube-system:aws-node"]}
            )
        )
        == []
    )
    wildcard = _problems(
        _trust(
            StringEquals={f"{HOST}:aud": STS_AUDIENCE},
            StringLike={f"{HOST}:sub": "system:serviceaccount:*"},
        )
    )
    assert wildcard == [
        "trust policy sub is matched with StringLike, expected StringEquals",
        "trust policy sub is system:serviceaccount:*, expected system:serviceaccount:kube-system:aws-node",
    ]
    other_issuer = _problems(_trust(StringEquals={**good, "other.example.com:sub": "x"}))
    assert (
        "trust policy sub is keyed on other.example.com, expected irsa-x.s3.us-east-1.amazonaws.com"
        in other_issuer
    )
    doc = _trust(StringEquals=good)
    doc["Statement"][0]["Principal"] = {
        "Federated": "arn:aws:iam::123456789012:oidc-provider/elsewhere"
    }
    doc["Statement"].append(
        {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}
    )
    assert _problems(doc) == [
        "trust policy has 2 statements, expected exactly 1",
        f"trust policy Federated principal is arn:aws:iam::123456789012:oidc-provider/elsewhere, expected {PROVIDER}",
    ]
    assert _problems({"Version": "2012-10-17", "Statement": []}) == [
        "trust policy has no Allow statement for sts:AssumeRoleWithWebIdentity"
    ]


# --- the CLI -------------------------------------------------------------------------------


@pytest.fixture
def aws_env(fake_aws_credentials: None, world: InMemoryCrossplane) -> InMemoryCrossplane:
    return world


def _cli(world: InMemoryCrossplane, tmp_path: Path, *args: str) -> Any:
    required = h.write_required(tmp_path / "required", h.example_required(world.network.groups))
    return CliRunner().invoke(
        aws,
        [
            "preflight",
            str(h.EXAMPLE / "xr.yaml"),
            "--endpoint-url",
            world.server.endpoint,
            "--required",
            str(required),
            *args,
        ],
    )


def test_cli_reports_json_and_exits_zero_on_a_good_account(aws_env: InMemoryCrossplane, tmp_path: Path) -> None:
    aws_env.compose()
    result = _cli(aws_env, tmp_path, "-o", "json", "--phase", "after")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["summary"] == {"pass": len(ALL_CHECKS), "warn": 0, "fail": 0}
    assert out["bucket"] == aws_env.target.names.bucket
    assert out["account"] == h.ACCOUNT
    assert out["issuerURL"] == aws_env.target.issuer_url


def test_cli_exits_non_zero_with_the_fix_in_text(aws_env: InMemoryCrossplane, tmp_path: Path) -> None:
    aws_env.compose(public_pem=h.other_public_key())
    result = _cli(aws_env, tmp_path)
    assert result.exit_code == 1, result.output
    assert "FAIL  issuer/jwks" in result.output
    assert "fix: the function rebuilds keys.json" in result.output
    assert result.output.rstrip().endswith("1 failed")


def test_cli_takes_the_key_from_a_file_and_the_name_prefix_from_the_input(
    aws_env: InMemoryCrossplane, tmp_path: Path
) -> None:
    key = tmp_path / "sa.pub"
    key.write_bytes(h.other_public_key())
    step = tmp_path / "input.yaml"
    step.write_text(
        yaml.safe_dump(
            {"apiVersion": "fn.clusterplugin.dev/v1alpha1", "kind": "Input", "namePrefix": "acme-"}
        )
    )
    result = _cli(
        aws_env, tmp_path, "--sa-public-key", str(key), "--input", str(step), "-o", "json"
    )
    out = json.loads(result.output)
    assert out["bucket"].startswith("acme-irsa-team-a-demo-")
    assert out["phase"] == "before"


def test_cli_rejects_unusable_input(aws_env: InMemoryCrossplane, tmp_path: Path) -> None:
    bad = tmp_path / "xr.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "clusterplugin.dev/v1alpha1",
                "kind": "XClusterPlugin",
                "metadata": {"name": "x"},
                "spec": {"clusterName": "demo", "region": "us-east-1"},
            }
        )
    )
    result = CliRunner().invoke(
        aws, ["preflight", str(bad), "--endpoint-url", aws_env.server.endpoint]
    )
    assert result.exit_code == 2
    assert "spec.clusterNamespace: is required" in result.output


def test_namespace_and_region_sources() -> None:
    xr = {
        "apiVersion": "clusterplugin.dev/v1alpha1",
        "kind": "XClusterPlugin",
        "metadata": {"name": "x", "labels": {"crossplane.io/claim-namespace": "team-c"}},
        "spec": {"clusterName": "demo"},
    }
    required = h.example_required()
    for d in required:
        d["metadata"]["namespace"] = "team-c"
    target = build_target(xr, required=required)
    assert (target.namespace, target.region) == ("team-c", "us-east-1")
    with pytest.raises(RegionError, match="region is unknown"):
        build_target(xr)
    assert build_target(xr, region_flag="eu-west-1").region == "eu-west-1"
    # The function's region wins; a flag that disagrees with it is refused.
    with pytest.raises(RegionError, match=r"disagrees with AWSCluster spec\.region us-east-1"):
        build_target(xr, required=required, region_flag="eu-west-1")
    xr["spec"]["region"] = "us-west-2"
    assert build_target(xr, required=required).region == "us-west-2"
    with pytest.raises(RegionError, match=r"disagrees with spec\.region us-west-2"):
        build_target(xr, required=required, region_flag="eu-west-1")


# --- the cluster's deletion: CAPA's external resource GC --------------------------------------


def _with_gc_annotation(world: InMemoryCrossplane, value: str | None) -> Target:
    docs = h.example_required(world.network.groups)
    for d in docs:
        if d.get("kind") == "AWSCluster" and value is not None:
            d["metadata"].setdefault("annotations", {})[
                "aws.cluster.x-k8s.io/external-resource-gc"
            ] = value
    return build_target(h.example_xr(), required=docs)


def test_external_resource_gc_turned_off_is_a_warning_with_the_fix(world: InMemoryCrossplane) -> None:
    report = world.run(target=_with_gc_annotation(world, "false"))
    check = by_name(report)["deletion/external-resource-gc"]
    assert check.status is Status.WARN
    assert "AWSCluster team-a/demo turns CAPA's external resource GC off" in check.message
    assert "the cloud controller manager and the AWS Load Balancer Controller" in check.message
    assert "remove the aws.cluster.x-k8s.io/external-resource-gc annotation" in check.fix
    # A warning, not a failure: the same checks fail with and without it.
    baseline = world.run(target=_with_gc_annotation(world, None))
    failing = {c.name for c in report.checks if c.status is Status.FAIL}
    assert failing == {c.name for c in baseline.checks if c.status is Status.FAIL}


def test_external_resource_gc_on_by_default_passes(world: InMemoryCrossplane) -> None:
    for value in (None, "true"):
        check = by_name(world.run(target=_with_gc_annotation(world, value)))[
            "deletion/external-resource-gc"
        ]
        assert check.status is Status.PASS, value


def test_external_resource_gc_is_not_checked_without_a_load_balancer_maker(world: InMemoryCrossplane) -> None:
    xr = h.example_xr()
    del xr["spec"]["ingress"]
    del xr["spec"]["cloudProvider"]
    target = build_target(xr, required=h.example_required(world.network.groups))
    assert "deletion/external-resource-gc" not in by_name(world.run(target=target))


def test_external_resource_gc_unknown_without_the_awscluster(world: InMemoryCrossplane) -> None:
    xr = h.example_xr()
    target = build_target(xr, region_flag="us-east-1")
    check = by_name(world.run(target=target))["deletion/external-resource-gc"]
    assert check.status is Status.WARN
    assert check.message == "no AWSCluster given: cannot tell whether CAPA's external resource GC is on"


def test_the_api_server_must_sign_with_the_issuer_the_roles_trust() -> None:
    """Before anything is composed: the KubeadmControlPlane given names the issuer the function
    composes; another one, or none, fails naming both and the fix."""
    from tests.scenarios import example, find

    xr, required = example("selfhosted-full")
    issuer = "https://irsa-team-a-demo-1960e3.s3.us-east-1.amazonaws.com"
    check = issuer_checks.check_api_server_issuer(build_target(xr, required=required))
    assert check is not None
    assert (check.status, check.message) == (
        Status.PASS,
        f"KubeadmControlPlane team-a/demo-control-plane signs with {issuer}, the issuer the roles trust",
    )
    kcp = find(required, "KubeadmControlPlane")
    args = kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"]
    next(a for a in args if a["name"] == "service-account-issuer")["value"] = "https://oidc.example.com"
    check = issuer_checks.check_api_server_issuer(build_target(xr, required=required))
    assert check is not None
    assert check.status is Status.FAIL
    assert check.message == (
        "KubeadmControlPlane team-a/demo-control-plane starts the API server with "
        f"--service-account-issuer=https://oidc.example.com, but the add-on roles trust {issuer}: STS "
        "refuses the tokens of every add-on"
    )
    assert check.fix.startswith(f"set service-account-issuer to {issuer}, first, in its spec.kubeadmConfigSpec")
    # Without the control plane it cannot be checked, and says so; EKS signs with its own.
    without = [o for o in required if o["kind"] != "KubeadmControlPlane"]
    check = issuer_checks.check_api_server_issuer(build_target(xr, required=without))
    assert check is not None
    assert (check.status, check.message) == (Status.WARN, "not checked: the KubeadmControlPlane was not given")
    eks, eks_required = example("external-eks")
    assert issuer_checks.check_api_server_issuer(build_target(eks, required=eks_required)) is None
