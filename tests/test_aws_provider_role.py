"""``aws provider-role``: the providers' IRSA role, its runtime config and Providers, made for them.

The role trusts only the one service account through the management cluster's OIDC provider,
holds exactly the policy ``aws provider-policy`` prints for that account, lies outside what that
policy lets the providers change, and is created (or updated, never taken over) in moto. The
Kubernetes objects it prints validate against Crossplane's CRD and name the providers the
Configurations depend on as Crossplane names them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import yaml
from click.testing import CliRunner

from function_tools.aws.provider_policy import provider_policy
from function_tools.aws.provider_role import (
    POLICY_NAME,
    ROLE_ARN_ANNOTATION,
    RUNTIME_CONFIG,
    TAG_KEY,
    ProviderRole,
    ProviderRoleError,
    aws_providers,
)
from function_tools.cli import cli
from function_tools.commands.aws import aws
from function_tools.packaging import PROVIDER_REGISTRY, PROVIDERS, object_name
from tests import aws_helpers as h
from tests.kube_schema import validate

ISSUER = "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLED539D4633E53DE1B71EXAMPLE"
OIDC_ARN = f"arn:aws:iam::123456789012:oidc-provider/{ISSUER}"
ROLE_ARN = "arn:aws:iam::123456789012:role/crossplane-clusterplugin"


def _run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(
        aws, ["provider-role", "--oidc-provider-arn", OIDC_ARN, *args], env=env
    )


def _role(**kw: Any) -> ProviderRole:
    return ProviderRole(OIDC_ARN, provider_policy(account_id="123456789012"), **kw)


def test_the_role_trusts_only_the_providers_service_account_through_the_oidc_provider() -> None:
    role = _role()
    assert role.arn == ROLE_ARN
    assert role.trust_policy() == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Federated": OIDC_ARN},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{ISSUER}:sub": "system:serviceaccount:crossplane-system:provider-aws",
                        f"{ISSUER}:aud": "sts.amazonaws.com",
                    }
                },
            }
        ],
    }
    other = _role(namespace="crossplane", service_account="aws")
    subject = other.trust_policy()["Statement"][0]["Condition"]["StringEquals"][f"{ISSUER}:sub"]
    assert subject == "system:serviceaccount:crossplane:aws"


def test_partition_and_account_come_from_the_oidc_providers_arn() -> None:
    gov = f"arn:aws-us-gov:iam::210987654321:oidc-provider/{ISSUER}"
    result = CliRunner().invoke(aws, ["provider-role", "--oidc-provider-arn", gov, "-o", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["roleArn"] == "arn:aws-us-gov:iam::210987654321:role/crossplane-clusterplugin"
    policy = json.loads(out["putRolePolicy"]["PolicyDocument"])
    assert policy == provider_policy(partition="aws-us-gov", account_id="210987654321")


def test_the_inline_policy_is_what_provider_policy_prints_with_the_same_options() -> None:
    options = [
        "--name-prefix",
        "acme-",
        "--issuer-domain",
        "oidc.example.com",
        "--shared-bucket",
        "acme-oidc",
    ]
    printed = CliRunner().invoke(aws, ["provider-policy", *options, "--account-id", "123456789012"])
    assert printed.exit_code == 0, printed.output
    result = _run(*options, "-o", "json")
    assert result.exit_code == 0, result.output
    put = json.loads(result.output)["putRolePolicy"]
    assert (put["RoleName"], put["PolicyName"]) == ("crossplane-clusterplugin", POLICY_NAME)
    assert json.loads(put["PolicyDocument"]) == json.loads(printed.output)


def _grants(policy: dict[str, Any], action: str, arn: str) -> bool:
    for statement in policy["Statement"]:
        actions = (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        resources = (
            statement["Resource"]
            if isinstance(statement["Resource"], list)
            else [statement["Resource"]]
        )
        if any(fnmatch.fnmatchcase(action, a) for a in actions) and any(
            fnmatch.fnmatchcase(arn, r) for r in resources
        ):
            return True
    return False


@pytest.mark.parametrize("prefix", ["", "crossplane-", "acme-"])
def test_the_providers_cannot_change_their_own_role(prefix: str) -> None:
    """The policy lets them manage roles under /clusterplugin/ only; theirs is not there."""
    policy = provider_policy(
        account_id="123456789012", role_prefix=prefix, bucket_prefix=f"{prefix}irsa-"
    )
    role = ProviderRole(OIDC_ARN, policy, role_name=f"{prefix}crossplane-clusterplugin")
    for action in (
        "iam:UpdateAssumeRolePolicy",
        "iam:PutRolePolicy",
        "iam:AttachRolePolicy",
        "iam:DeleteRole",
    ):
        assert not _grants(policy, action, role.arn), action
    # ...which the check would see: an add-on role of the same name under /clusterplugin/ is granted.
    assert _grants(policy, "iam:DeleteRole", role.arn.replace(":role/", ":role/clusterplugin/"))


def test_the_manifests_use_the_role_for_every_aws_provider_the_configurations_depend_on() -> None:
    result = _run()
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.output))
    runtime, *providers = docs
    assert runtime["kind"] == "DeploymentRuntimeConfig"
    assert validate(runtime) == []
    template = runtime["spec"]["serviceAccountTemplate"]["metadata"]
    assert template == {"name": "provider-aws", "annotations": {ROLE_ARN_ANNOTATION: ROLE_ARN}}
    depended = set()
    for flavour in ("v1", "v2"):
        meta = yaml.safe_load((h.REPO / "apis" / flavour / "crossplane.yaml").read_text())
        depended |= {
            (d["provider"], d["version"])
            for d in meta["spec"]["dependsOn"]
            if "provider" in d and d["provider"].startswith(f"{PROVIDER_REGISTRY}/provider-aws-")
        }
    assert depended
    assert {
        (p["spec"]["package"].rsplit(":", 1)[0], p["spec"]["package"].rsplit(":", 1)[1])
        for p in providers
    } == depended
    for provider in providers:
        assert provider["apiVersion"] == "pkg.crossplane.io/v1"
        assert provider["kind"] == "Provider"
        # The name Crossplane gives the dependency: the Configuration finds it installed.
        assert provider["metadata"]["name"] == object_name(
            provider["spec"]["package"].rsplit(":", 1)[0]
        )
        assert provider["spec"]["runtimeConfigRef"] == {"name": RUNTIME_CONFIG}
    assert len(providers) == len(aws_providers()) == len(PROVIDERS) - 1  # all but provider-helm


def test_the_aws_commands_are_the_two_calls() -> None:
    role = _role()
    lines = [line for line in role.aws_commands().splitlines() if not line.startswith("#")]
    calls = [shlex.split(line) for line in lines]
    assert [c[:3] for c in calls] == [
        ["aws", "iam", "create-role"],
        ["aws", "iam", "put-role-policy"],
    ]
    assert [c[3] for c in calls] == ["--cli-input-json"] * 2
    assert json.loads(calls[0][4]) == role.create_role_input()
    assert json.loads(calls[1][4]) == role.put_role_policy_input()
    assert json.loads(role.create_role_input()["AssumeRolePolicyDocument"]) == role.trust_policy()


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        (
            ["--oidc-provider-arn", "arn:aws:iam::123:oidc-provider/x"],
            "Error: --oidc-provider-arn 'arn:aws:iam::123:oidc-provider/x' is not an IAM OIDC provider ARN",
        ),
        (
            ["--oidc-provider-arn", "arn:aws:iam::123456789012:role/x"],
            "Error: --oidc-provider-arn 'arn:aws:iam::123456789012:role/x' is not",
        ),
        (
            ["--oidc-provider-arn", OIDC_ARN, "--role-name", "a b"],
            "Error: --role-name 'a b': 1 to 64 of letters",
        ),
        (
            ["--oidc-provider-arn", OIDC_ARN, "--service-account", "Provider_AWS"],
            "Error: --service-account 'Provider_AWS' is not a Kubernetes name",
        ),
        (["--oidc-provider-arn", OIDC_ARN, "--name-prefix", "Acme"], "Error: "),
    ],
    ids=["short-account", "not-oidc", "role-name", "service-account", "name-prefix"],
)
def test_bad_options_are_refused_in_one_line(args: list[str], first_line: str) -> None:
    result = CliRunner().invoke(cli, ["aws", "provider-role", *args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(first_line), result.output
    assert result.output.count("\n") == 1, result.output
    assert "Traceback" not in result.output


def test_a_policy_too_big_for_a_roles_inline_policies_is_refused() -> None:
    huge = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "x" * 10300}],
    }
    with pytest.raises(ProviderRoleError, match="more than a role's inline policies may hold"):
        ProviderRole(OIDC_ARN, huge)


# --- --create against moto ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


@pytest.fixture
def moto(server: h.MotoServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    server.reset()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_ENDPOINT_URL": server.endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return boto3.client("iam", region_name="us-east-1", endpoint_url=server.endpoint)


def test_create_makes_the_role_and_prints_the_manifests(moto: Any) -> None:
    result = CliRunner().invoke(
        aws, ["provider-role", "--oidc-provider-arn", OIDC_ARN, "--create"], env=dict(os.environ)
    )
    assert result.exit_code == 0, result.output
    role = moto.get_role(RoleName="crossplane-clusterplugin")["Role"]
    assert role["Arn"] == ROLE_ARN
    assert role["Path"] == "/"
    document = role["AssumeRolePolicyDocument"]
    assert (
        json.loads(document) if isinstance(document, str) else document
    ) == _role().trust_policy()
    assert {"Key": TAG_KEY, "Value": "true"} in moto.list_role_tags(
        RoleName="crossplane-clusterplugin"
    )["Tags"]
    inline = moto.get_role_policy(RoleName="crossplane-clusterplugin", PolicyName=POLICY_NAME)[
        "PolicyDocument"
    ]
    assert (json.loads(inline) if isinstance(inline, str) else inline) == _role().policy
    assert (
        moto.list_attached_role_policies(RoleName="crossplane-clusterplugin")["AttachedPolicies"]
        == []
    )
    # stdout: the objects only (the progress line went to stderr).
    docs = list(yaml.safe_load_all(result.stdout))
    assert (
        docs[0]["spec"]["serviceAccountTemplate"]["metadata"]["annotations"][ROLE_ARN_ANNOTATION]
        == role["Arn"]
    )


def test_create_again_updates_the_trust_and_policy_of_its_own_role(moto: Any) -> None:
    env = dict(os.environ)
    assert (
        CliRunner()
        .invoke(aws, ["provider-role", "--oidc-provider-arn", OIDC_ARN, "--create"], env=env)
        .exit_code
        == 0
    )
    result = CliRunner().invoke(
        aws,
        [
            "provider-role",
            "--oidc-provider-arn",
            OIDC_ARN,
            "--create",
            "--service-account",
            "aws",
            "--name-prefix",
            "acme-",
        ],
        env=env,
    )
    assert result.exit_code == 0, result.output
    role = moto.get_role(RoleName="crossplane-clusterplugin")["Role"]
    document = role["AssumeRolePolicyDocument"]
    trust = json.loads(document) if isinstance(document, str) else document
    assert (
        trust["Statement"][0]["Condition"]["StringEquals"][f"{ISSUER}:sub"]
        == "system:serviceaccount:crossplane-system:aws"
    )
    inline = moto.get_role_policy(RoleName="crossplane-clusterplugin", PolicyName=POLICY_NAME)[
        "PolicyDocument"
    ]
    policy = json.loads(inline) if isinstance(inline, str) else inline
    assert policy == provider_policy(
        account_id="123456789012", bucket_prefix="acme-irsa-", role_prefix="acme-"
    )


def test_create_never_takes_over_a_role_it_did_not_make(moto: Any) -> None:
    moto.create_role(
        RoleName="crossplane-clusterplugin",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )
    result = CliRunner().invoke(
        aws, ["provider-role", "--oidc-provider-arn", OIDC_ARN, "--create"], env=dict(os.environ)
    )
    assert result.exit_code == 1
    assert result.output.startswith(
        f"Error: the role {ROLE_ARN} exists and is not one this command made"
    )
    assert result.output.count("\n") == 1
    assert moto.list_role_policies(RoleName="crossplane-clusterplugin")["PolicyNames"] == []
