"""``aws provider-role``: the IAM role the Crossplane AWS providers assume through IRSA.

The management cluster's providers reach AWS with a role trusted by the management cluster's
own IAM OIDC provider (EKS: the cluster's) for exactly one service account, and allowed what
``aws provider-policy`` prints, as the role's inline policy. This module makes, from the OIDC
provider's ARN alone (the partition and account are in it):

- the role's trust policy, its create-role and put-role-policy inputs, and the ``aws`` CLI
  commands that create it (``-o aws``, to review and run with ``sh``);
- the Kubernetes objects that make the providers use it: a DeploymentRuntimeConfig giving
  every AWS provider the one service account with the role's annotation, and the AWS
  providers the Configurations depend on (``function_tools/packaging.py``), at their pinned
  versions and under the names Crossplane gives a dependency it installs, so the
  Configuration finds them installed and uses them;
- with ``--create``, the role itself (boto3: created, or its trust and policy updated when it
  carries our tag; a role of that name without it is refused, never taken over).

The role lives outside the ``/clusterplugin/`` path the provider policy grants role changes
on, so the providers cannot change their own role.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from function.names import PARTITIONS
from function_tools.packaging import PROVIDER_REGISTRY, PROVIDERS, object_name

ROLE_NAME = "crossplane-clusterplugin"
ROLE_PATH = "/"
POLICY_NAME = "clusterplugin-provider"
RUNTIME_CONFIG = "clusterplugin-provider-aws"
CROSSPLANE_NAMESPACE = "crossplane-system"
SERVICE_ACCOUNT = "provider-aws"
ROLE_ARN_ANNOTATION = "eks.amazonaws.com/role-arn"
AUDIENCE = "sts.amazonaws.com"
TAG_KEY = "clusterplugin.dev/provider-role"
TAG_VALUE = "true"
DESCRIPTION = "The Crossplane AWS providers of function-cluster-plugin (IRSA)"
# IAM: a role name, and the aggregate size of a role's inline policies (whitespace excluded).
_ROLE_NAME = re.compile(r"^[\w+=,.@-]{1,64}$")
INLINE_POLICY_LIMIT = 10240
_OIDC_ARN = re.compile(
    r"^arn:(?P<partition>[a-z-]+):iam::(?P<account>\d{12}):oidc-provider/(?P<issuer>\S+)$"
)
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# IAM is global; boto3 still wants a region, the partition's.
IAM_REGION = {"aws": "us-east-1", "aws-cn": "cn-north-1", "aws-us-gov": "us-gov-west-1"}


class ProviderRoleError(ValueError):
    """An option the role cannot be made with, or a role that is not ours; says which."""


def aws_providers() -> list[tuple[str, str]]:
    """(name, version) of the providers that call AWS: every pinned one but provider-helm."""
    return [(name, version) for name, version in PROVIDERS if name.startswith("provider-aws-")]


@dataclass(frozen=True)
class ProviderRole:
    """The providers' role for one management cluster's OIDC provider."""

    oidc_provider_arn: str
    policy: dict[str, Any]
    role_name: str = ROLE_NAME
    namespace: str = CROSSPLANE_NAMESPACE
    service_account: str = SERVICE_ACCOUNT

    def __post_init__(self) -> None:
        _ = self.partition  # refuses an ARN that is no OIDC provider's
        if not _ROLE_NAME.match(self.role_name):
            msg = f"--role-name {self.role_name!r}: 1 to 64 of letters, digits and +=,.@_-"
            raise ProviderRoleError(msg)
        for option, value in (
            ("--crossplane-namespace", self.namespace),
            ("--service-account", self.service_account),
        ):
            if not _DNS_LABEL.match(value):
                msg = f"{option} {value!r} is not a Kubernetes name (a DNS label)"
                raise ProviderRoleError(msg)
        size = len(json.dumps(self.policy, separators=(",", ":")))
        if size > INLINE_POLICY_LIMIT:
            msg = (
                f"the provider policy is {size} characters, more than a role's inline policies "
                f"may hold ({INLINE_POLICY_LIMIT})"
            )
            raise ProviderRoleError(msg)

    @property
    def _arn_parts(self) -> re.Match[str]:
        m = _OIDC_ARN.match(self.oidc_provider_arn)
        if m is None or m.group("partition") not in PARTITIONS:
            msg = (
                f"--oidc-provider-arn {self.oidc_provider_arn!r} is not an IAM OIDC provider ARN "
                "(arn:aws:iam::<12-digit account>:oidc-provider/<issuer host and path>; on EKS: "
                "aws iam list-open-id-connect-providers)"
            )
            raise ProviderRoleError(msg)
        return m

    @property
    def partition(self) -> str:
        """The OIDC provider's partition: the role's."""
        return self._arn_parts.group("partition")

    @property
    def account(self) -> str:
        """The OIDC provider's account: the role's."""
        return self._arn_parts.group("account")

    @property
    def issuer(self) -> str:
        """The management cluster's issuer without ``https://``: the condition keys' prefix."""
        return self._arn_parts.group("issuer")

    @property
    def arn(self) -> str:
        """The role's ARN, known before it exists."""
        return f"arn:{self.partition}:iam::{self.account}:role{ROLE_PATH}{self.role_name}"

    @property
    def subject(self) -> str:
        """The one service account the role trusts."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def trust_policy(self) -> dict[str, Any]:
        """Only the one service account, with STS's audience, through that OIDC provider."""
        return {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": self.oidc_provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{self.issuer}:sub": self.subject,
                            f"{self.issuer}:aud": AUDIENCE,
                        }
                    },
                }
            ],
        }

    def create_role_input(self) -> dict[str, Any]:
        """``aws iam create-role --cli-input-json`` (and boto3's ``create_role``)."""
        return {
            "RoleName": self.role_name,
            "Path": ROLE_PATH,
            "Description": DESCRIPTION,
            "AssumeRolePolicyDocument": json.dumps(self.trust_policy(), separators=(",", ":")),
            "Tags": [{"Key": TAG_KEY, "Value": TAG_VALUE}],
        }

    def put_role_policy_input(self) -> dict[str, Any]:
        """``aws iam put-role-policy --cli-input-json`` (and boto3's ``put_role_policy``)."""
        return {
            "RoleName": self.role_name,
            "PolicyName": POLICY_NAME,
            "PolicyDocument": json.dumps(self.policy, separators=(",", ":")),
        }

    def as_json(self) -> dict[str, Any]:
        """``-o json``: the role's ARN and the two calls that make it."""
        return {
            "roleArn": self.arn,
            "createRole": self.create_role_input(),
            "putRolePolicy": self.put_role_policy_input(),
        }

    def aws_commands(self) -> str:
        """``-o aws``: the ``aws`` CLI commands that create the role, for ``sh``."""
        create = json.dumps(self.create_role_input(), separators=(",", ":"))
        put = json.dumps(self.put_role_policy_input(), separators=(",", ":"))
        return (
            f"# The role {self.arn}, assumed by {self.subject} through {self.issuer}.\n"
            f"aws iam create-role --cli-input-json {shlex.quote(create)}\n"
            f"aws iam put-role-policy --cli-input-json {shlex.quote(put)}\n"
        )

    def manifests(self) -> list[dict[str, Any]]:
        """The DeploymentRuntimeConfig and the AWS providers that use it."""
        runtime = {
            "apiVersion": "pkg.crossplane.io/v1beta1",
            "kind": "DeploymentRuntimeConfig",
            "metadata": {"name": RUNTIME_CONFIG},
            "spec": {
                "serviceAccountTemplate": {
                    "metadata": {
                        "name": self.service_account,
                        "annotations": {ROLE_ARN_ANNOTATION: self.arn},
                    }
                }
            },
        }
        providers = [
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Provider",
                "metadata": {"name": object_name(f"{PROVIDER_REGISTRY}/{name}")},
                "spec": {
                    "package": f"{PROVIDER_REGISTRY}/{name}:{version}",
                    "runtimeConfigRef": {"name": RUNTIME_CONFIG},
                },
            }
            for name, version in aws_providers()
        ]
        return [runtime, *providers]


def create(iam: Any, role: ProviderRole) -> str:
    """Create the role, or bring one of ours up to date; returns what was done.

    ``iam`` is a boto3 IAM client. A role of that name without our tag is refused.
    """
    from botocore.exceptions import ClientError  # noqa: PLC0415

    try:
        found = iam.get_role(RoleName=role.role_name)["Role"]
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "NoSuchEntity":
            raise
        found = None
    if found is None:
        iam.create_role(**role.create_role_input())
        done = "created"
    else:
        tags = iam.list_role_tags(RoleName=role.role_name).get("Tags", [])
        if {"Key": TAG_KEY, "Value": TAG_VALUE} not in tags:
            msg = (
                f"the role {found['Arn']} exists and is not one this command made (no tag "
                f"{TAG_KEY}={TAG_VALUE}): not changing it; choose another --role-name"
            )
            raise ProviderRoleError(msg)
        if found.get("Path") != ROLE_PATH:
            msg = f"the role {found['Arn']} is not under the path {ROLE_PATH}: not changing it"
            raise ProviderRoleError(msg)
        iam.update_assume_role_policy(
            RoleName=role.role_name,
            PolicyDocument=role.create_role_input()["AssumeRolePolicyDocument"],
        )
        done = "updated"
    iam.put_role_policy(**role.put_role_policy_input())
    return f"{done} the role {role.arn} (trust: {role.subject}; inline policy {POLICY_NAME})"
