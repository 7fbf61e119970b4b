"""``function-cluster-plugin aws provider-role``: the IAM role the AWS providers assume.

The role is ``function_tools/aws/provider_role.py``'s, holding the policy of
``aws provider-policy``; ``--create`` needs boto3 (the ``aws`` extra), imported only then.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from function.names import PARTITIONS
from function_tools import options
from function_tools.commands.aws_provider_policy import policy_document


@click.command("provider-role")
@click.option(
    "--oidc-provider-arn",
    required=True,
    metavar="ARN",
    help="The management cluster's IAM OIDC provider (EKS: its cluster's), "
    "arn:aws:iam::<account>:oidc-provider/<issuer>: the role trusts it, in its account.",
)
@click.option("--role-name", default="crossplane-clusterplugin", show_default=True)
@click.option(
    "--crossplane-namespace",
    default="crossplane-system",
    show_default=True,
    help="The namespace Crossplane runs the providers in.",
)
@click.option(
    "--service-account",
    default="provider-aws",
    show_default=True,
    help="The one service account every AWS provider runs as; the role trusts only it.",
)
@options.policy_options
@click.option(
    "--create",
    is_flag=True,
    help="Create the role in AWS (or update one this command made) before printing; needs "
    "boto3 and IAM rights (iam:GetRole, ListRoleTags, CreateRole, TagRole, "
    "UpdateAssumeRolePolicy, PutRolePolicy).",
)
@options.profile_option("With --create: the AWS profile.")
@options.endpoint_url_option("With --create: send the IAM calls here (an emulator such as moto).")
@options.output_option(
    ["yaml", "json", "aws"],
    "yaml",
    "yaml: the DeploymentRuntimeConfig and the AWS Providers that use the role, for "
    "kubectl apply -f -; json: the role's ARN and its create-role and put-role-policy inputs; "
    "aws: the aws CLI commands that create the role.",
)
def provider_role_cmd(
    *,
    oidc_provider_arn: str,
    role_name: str,
    crossplane_namespace: str,
    service_account: str,
    create: bool,
    profile: str | None,
    endpoint_url: str | None,
    output: str,
    **policy_options: Any,
) -> None:
    """The IAM role the Crossplane AWS providers assume through IRSA, and what makes them use it.

    The role (outside /clusterplugin/, so the providers cannot change it) trusts only
    --service-account in --crossplane-namespace through --oidc-provider-arn, and holds the
    policy `aws provider-policy` prints (for the ARN's account and partition) inline.
    Prints the Kubernetes objects for `kubectl apply -f -`: a DeploymentRuntimeConfig with the
    role's annotation and the AWS Providers the Configurations depend on, using it. With
    --create, makes the role first (progress on stderr).
    """
    from function_tools.aws import provider_role  # noqa: PLC0415
    from function_tools.aws.provider_role import ProviderRole, ProviderRoleError  # noqa: PLC0415

    match = re.match(r"^arn:([a-z-]+):iam::(\d{12}):", oidc_provider_arn)
    partition, account = match.groups() if match else ("aws", "*")
    try:
        role = ProviderRole(
            oidc_provider_arn,
            policy_document(
                partition=partition if partition in PARTITIONS else "aws",
                account_id=account,
                **policy_options,
            ),
            role_name=role_name,
            namespace=crossplane_namespace,
            service_account=service_account,
        )
    except ProviderRoleError as err:
        raise click.UsageError(str(err)) from None
    if create:
        try:
            import boto3  # noqa: PLC0415
            from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415
        except ImportError as err:
            msg = f"aws provider-role --create needs boto3 ({err}): {options.AWS_EXTRA_HINT}"
            raise click.ClickException(msg) from err
        try:
            iam = boto3.Session(profile_name=profile).client(
                "iam",
                region_name=provider_role.IAM_REGION[role.partition],
                endpoint_url=endpoint_url,
            )
            click.echo(provider_role.create(iam, role), err=True)
        except ProviderRoleError as err:
            raise click.ClickException(str(err)) from None
        except (BotoCoreError, ClientError) as err:
            msg = f"an AWS call failed: {err}"
            raise click.ClickException(msg) from None
    if output == "json":
        click.echo(json.dumps(role.as_json(), indent=2))
    elif output == "aws":
        click.echo(role.aws_commands(), nl=False)
    else:
        import yaml  # noqa: PLC0415

        click.echo(yaml.safe_dump_all(role.manifests(), sort_keys=False), nl=False)
