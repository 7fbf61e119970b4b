"""``function-cluster-plugin aws preflight``: will what the function composes work in this account?

The checks are ``function_tools/aws/preflight.py``'s; they need boto3 (the ``aws`` extra),
imported when the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from function_tools import options


@click.command("preflight")
@options.xr_argument
@options.profile_option("AWS profile (default: the standard credential chain).")
@options.region_option
@options.endpoint_url_option(
    "Send every AWS call here (an emulator such as moto); S3 then uses path-style URLs."
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
    "eks-auth:AssumeRoleForPodIdentity. Repeatable. [default: the roles the node groups given "
    "with --required name (AWSManagedMachinePool spec.roleName, the instance profiles of "
    "AWSMachinePools and of MachineDeployments' AWSMachineTemplates), else CAPA's "
    "eks-nodegroup.cluster-api-provider-aws.sigs.k8s.io]",
)
@click.option(
    "--workload-kubeconfig",
    "workload_kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="spec.irsa.mode PodIdentity: the workload cluster's kubeconfig, to find the add-ons' "
    "ServiceAccounts still annotated eks.amazonaws.com/role-arn (which keeps IRSA in use). "
    "Read only.",
)
@options.output_option(["text", "json"], "text")
def preflight_cmd(
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
    workload_kubeconfig: Path | None,
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
        from function_tools.aws.pod_identity_checks import flags_outside_pod_identity  # noqa: PLC0415
        from function_tools.aws.workload_cluster import (  # noqa: PLC0415
            KubeconfigError,
            WorkloadCluster,
        )
    except ImportError as err:
        msg = f"aws preflight needs boto3 and lightkube ({err}): {options.AWS_EXTRA_HINT}"
        raise click.ClickException(msg) from err
    from function.accept import RegionError  # noqa: PLC0415
    from function.spec_base import InvalidInputError  # noqa: PLC0415
    from function_tools.aws.target import build_target  # noqa: PLC0415
    from function_tools.input_files import InputFileError, load_one, load_required, step_input  # noqa: PLC0415

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
        outside = flags_outside_pod_identity(
            target.spec.irsa.mode,
            {"--node-role": bool(node_roles), "--workload-kubeconfig": bool(workload_kubeconfig)},
        )
        if outside is not None:
            raise options.InputError(outside)
        workload = WorkloadCluster(workload_kubeconfig) if workload_kubeconfig else None
    except (InputFileError, InvalidInputError, RegionError, KubeconfigError) as err:
        raise options.InputError(str(err)) from err

    try:
        clients = make_clients(profile=profile, region=target.region, endpoint_url=endpoint_url)
        fetch = https_fetch(live_endpoint) if live or live_endpoint else None
        read = workload.annotations if workload else None
        report = pf.run(target, clients, pf.Phase(phase), fetch, node_roles, service_accounts=read)
    except (BotoCoreError, ClientError) as err:
        # A check that cannot run at all (no endpoint, unknown profile, an unexpected denial).
        msg = f"an AWS call failed: {err}"
        raise click.ClickException(msg) from err
    if output == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
    else:
        click.echo(report.text())
    if report.failed:
        raise SystemExit(1)
