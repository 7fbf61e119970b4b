"""``function-cluster-plugin aws``: account preflight and the provider's IAM policy.

``preflight`` needs boto3 (the ``aws`` extra) and is imported lazily, so the
rest of the CLI starts without it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from function.names import PARTITIONS
from function_tools import options

if TYPE_CHECKING:
    from function_tools.aws.preflight import Report

# boto3 is the [aws] extra; make demo and make test install it into .venv/.
AWS_EXTRA_HINT = "install the aws extra from the checkout: pip install -e '.[aws]'"


@click.group("aws")
def aws() -> None:
    """Check an AWS account before installing a ClusterPlugin; print the provider's IAM policy."""


_MARK = {"pass": "PASS", "warn": "WARN", "fail": "FAIL"}


def render_text(report: Report) -> str:
    """A person-readable report: one line per check, the fix under each problem."""
    d = report.to_dict()
    account = d["account"] or "?"
    head = [
        f"ClusterPlugin {d['cluster']}  region {d['region']}  account {account}  phase {d['phase']}"
    ]
    if d["bucket"]:
        head.append(f"bucket {d['bucket']}  issuer {d['issuerURL']}")
    elif d["issuerURL"]:
        head.append(f"issuer {d['issuerURL']}")
    width = max((len(c.name) for c in report.checks), default=0)
    lines = [*head, ""]
    for c in report.checks:
        lines.append(f"{_MARK[c.status.value]}  {c.name.ljust(width)}  {c.message}")
        if c.fix and c.status.value != "pass":
            lines.append(f"{' ' * (6 + width)}  fix: {c.fix}")
    s = d["summary"]
    lines += ["", f"{s['pass']} passed, {s['warn']} warning(s), {s['fail']} failed"]
    return "\n".join(lines)


@aws.command()
@options.xr_argument
@click.option("--profile", help="AWS profile (default: the standard credential chain).")
@options.region_option
@click.option(
    "--endpoint-url",
    envvar="AWS_ENDPOINT_URL",
    help="Send every AWS call here (an emulator such as moto); S3 then uses path-style URLs.",
)
@options.required_option
@click.option(
    "--sa-public-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The service-account public key (PEM), instead of the <cluster>-sa Secret.",
)
@options.input_option
@options.composition_option
@click.option(
    "--phase",
    type=click.Choice(["before", "after", "auto"]),
    default="auto",
    show_default=True,
    help="before: what blocks creation; after: all must exist; auto: after once the bucket exists.",
)
@click.option(
    "--live",
    is_flag=True,
    help="Also fetch the issuer's discovery document and JWKS over HTTPS, as STS does.",
)
@click.option(
    "--live-endpoint",
    metavar="URL",
    help="With --live: send those requests to URL (keeping the issuer's Host and path), e.g. a "
    "proxy or a test server.",
)
@click.option(
    "--node-role",
    "node_roles",
    multiple=True,
    metavar="NAME",
    help="spec.irsa.mode PodIdentity: a role of the cluster's nodes, which must allow "
    "eks-auth:AssumeRoleForPodIdentity. Repeatable. [default: CAPA's "
    "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io]",
)
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def preflight(
    *,
    xr_file: str,
    profile: str | None,
    region: str | None,
    endpoint_url: str | None,
    required: tuple[str, ...],
    sa_public_key: Path | None,
    input_file: str | None,
    composition: str | None,
    phase: str,
    live: bool,
    live_endpoint: str | None,
    node_roles: tuple[str, ...],
    output: str,
) -> None:
    """Check the AWS account for XR: pass, warn or fail per check, each with its fix.

    Exits 1 when any check fails, 2 when the function would refuse the XR or the input
    files cannot be used.
    """
    try:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

        from function_tools.aws import preflight as pf  # noqa: PLC0415
        from function_tools.aws.clients import make_clients  # noqa: PLC0415
        from function_tools.aws.cloudfront_checks import https_fetch  # noqa: PLC0415
    except ImportError as err:
        msg = f"aws preflight needs boto3 ({err}): {AWS_EXTRA_HINT}"
        raise click.ClickException(msg) from err
    from function.accept import RegionError  # noqa: PLC0415
    from function.spec_base import InvalidInputError  # noqa: PLC0415
    from function_tools.aws.target import build_target  # noqa: PLC0415
    from function_tools.files import InputFileError, load_one, load_required, step_input  # noqa: PLC0415

    try:
        xr_doc = load_one(xr_file, "composite resource")
        _, step = step_input(input_file, composition, xr_doc)
        target = build_target(
            xr_doc,
            required=load_required(required, xr_doc, step),
            step_input=step,
            region_flag=region,
            public_key=sa_public_key.read_bytes() if sa_public_key else None,
            public_key_source=str(sa_public_key) if sa_public_key else "",
        )
    except (InputFileError, InvalidInputError, RegionError) as err:
        raise options.InputError(str(err)) from err

    try:
        clients = make_clients(profile=profile, region=target.region, endpoint_url=endpoint_url)
        fetch = https_fetch(live_endpoint) if live or live_endpoint else None
        roles = node_roles or (pf.DEFAULT_NODE_ROLE,)
        report = pf.run(target, clients, pf.Phase(phase), fetch, roles)
    except (BotoCoreError, ClientError) as err:
        # A check that cannot run at all (no endpoint, unknown profile, an unexpected denial).
        msg = f"an AWS call failed: {err}"
        raise click.ClickException(msg) from err
    if output == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(render_text(report))
    if report.failed:
        raise SystemExit(1)


def _policy_options(command: Any) -> Any:
    """The options of the provider's policy, shared by provider-policy and provider-role."""
    for option in reversed(
        [
            options.input_option,
            options.composition_option,
            click.option(
                "--name-prefix",
                help="The step input's namePrefix (sets both prefixes' defaults). "
                "[default: the Input's]",
            ),
            click.option(
                "--bucket-prefix",
                help="Issuer buckets start with this. [default: <name-prefix>irsa-]",
            ),
            click.option(
                "--role-prefix",
                help="Roles and policies (under /clusterplugin/) start with this. "
                "[default: <name-prefix>]",
            ),
            click.option(
                "--issuer-domain",
                "issuer_domains",
                multiple=True,
                metavar="DOMAIN",
                help="An issuer behind CloudFront (spec.irsa.hosting.cloudFront.domain): its "
                "OIDC providers, and its alias record with --hosted-zone-id. Repeatable.",
            ),
            click.option(
                "--shared-bucket",
                "shared_buckets",
                multiple=True,
                metavar="BUCKET",
                help="A Shared distribution's bucket: the two documents under any "
                "<namespace>/<cluster>. Repeatable.",
            ),
            click.option(
                "--managed-distributions",
                is_flag=True,
                help="Managed distributions: CloudFront distributions and origin access controls.",
            ),
            click.option(
                "--hosted-zone-id",
                "hosted_zone_ids",
                multiple=True,
                metavar="ZONE",
                help="Managed with hostedZoneId: A records of the --issuer-domain names in this "
                "zone only. Repeatable.",
            ),
            click.option(
                "--eks-cluster",
                "eks_clusters",
                multiple=True,
                metavar="NAME",
                help="spec.irsa.mode PodIdentity: the Pod Identity associations of this EKS "
                "cluster (AWSManagedControlPlane spec.eksClusterName), and passing the add-on "
                "roles to EKS Pod Identity only. Repeatable.",
            ),
        ]
    ):
        command = option(command)
    return command


def _policy_document(
    *,
    input_file: str | None,
    composition: str | None,
    name_prefix: str | None,
    bucket_prefix: str | None,
    role_prefix: str | None,
    partition: str,
    account_id: str,
    issuer_domains: tuple[str, ...],
    shared_buckets: tuple[str, ...],
    managed_distributions: bool,
    hosted_zone_ids: tuple[str, ...],
    eks_clusters: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The provider's policy for the options; a usage error for what it cannot be made of."""
    from function.accept import accept_step_input  # noqa: PLC0415
    from function.spec_base import InvalidInputError  # noqa: PLC0415
    from function_tools.aws.provider_policy import (  # noqa: PLC0415
        CloudFrontHosting,
        default_bucket_prefix,
        default_role_prefix,
        provider_policy,
    )
    from function_tools.files import InputFileError, step_input  # noqa: PLC0415

    try:
        _, raw = step_input(input_file, composition)
        if name_prefix is not None:
            raw = {**raw, "namePrefix": name_prefix}
        name_prefix = accept_step_input(raw).name_prefix
    except (InputFileError, InvalidInputError) as err:
        raise options.InputError(str(err)) from err
    try:
        return provider_policy(
            bucket_prefix=default_bucket_prefix(name_prefix)
            if bucket_prefix is None
            else bucket_prefix,
            role_prefix=default_role_prefix(name_prefix) if role_prefix is None else role_prefix,
            partition=partition,
            account_id=account_id,
            cloudfront=CloudFrontHosting(
                domains=issuer_domains,
                shared_buckets=shared_buckets,
                managed=managed_distributions,
                hosted_zone_ids=hosted_zone_ids,
            ),
            eks_clusters=eks_clusters,
        )
    except ValueError as err:
        raise click.BadParameter(str(err)) from err


@aws.command("provider-policy")
@_policy_options
@click.option(
    "--partition", type=click.Choice(sorted(PARTITIONS)), default="aws", show_default=True
)
@click.option(
    "--account-id", default="*", show_default=True, help="12-digit account id, or * for any."
)
def provider_policy_cmd(**kwargs: Any) -> None:
    """Print the least-privilege IAM policy for the Crossplane AWS provider's credentials (JSON).

    Issuers behind CloudFront (spec.irsa.hosting) and EKS Pod Identity (--eks-cluster) add
    only what their options ask for. Exits 2 when the function would refuse the step input
    (or --name-prefix in it).
    """
    click.echo(json.dumps(_policy_document(**kwargs), indent=2))


@aws.command("provider-role")
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
@_policy_options
@click.option(
    "--create",
    is_flag=True,
    help="Create the role in AWS (or update one this command made) before printing; needs "
    "boto3 and IAM rights (iam:GetRole, ListRoleTags, CreateRole, TagRole, "
    "UpdateAssumeRolePolicy, PutRolePolicy).",
)
@click.option("--profile", help="With --create: the AWS profile.")
@click.option(
    "--endpoint-url",
    envvar="AWS_ENDPOINT_URL",
    help="With --create: send the IAM calls here (an emulator such as moto).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["yaml", "json", "aws"]),
    default="yaml",
    show_default=True,
    help="yaml: the DeploymentRuntimeConfig and the AWS Providers that use the role, for "
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
            _policy_document(
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
            msg = f"aws provider-role --create needs boto3 ({err}): {AWS_EXTRA_HINT}"
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


@aws.command("shared-bucket-policy")
@click.option("--bucket", required=True, help="The Shared distribution's private bucket.")
@click.option(
    "--distribution-arn",
    required=True,
    metavar="ARN",
    help="The distribution's ARN, arn:aws:cloudfront::<account>:distribution/<id>.",
)
def shared_bucket_policy_cmd(*, bucket: str, distribution_arn: str) -> None:
    """Print the bucket policy of a Shared distribution's bucket (JSON), for the platform team.

    Only that distribution may read, through CloudFront, the two discovery documents under
    any <namespace>/<cluster>/ of the bucket; plain HTTP is denied. S3 does not count it as
    public, so Block Public Access may stay on.
    """
    from function.policies import shared_bucket_policy  # noqa: PLC0415
    from function.spec_base import s3_bucket_name_problem  # noqa: PLC0415

    problem = s3_bucket_name_problem(bucket)
    if problem:
        raise click.BadParameter(problem, param_hint="--bucket")
    if not re.fullmatch(r"arn:aws:cloudfront::\d{12}:distribution/[A-Z0-9]+", distribution_arn):
        msg = (
            f"{distribution_arn!r} is not a distribution ARN "
            "(arn:aws:cloudfront::<account>:distribution/<id>)"
        )
        raise click.BadParameter(msg, param_hint="--distribution-arn")
    doc = shared_bucket_policy(bucket, distribution_arn, PARTITIONS["aws"])
    click.echo(json.dumps(doc, indent=2))
