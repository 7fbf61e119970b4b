"""``function-cluster-plugin issuer``: the SelfHosted issuer URL before the cluster exists."""

from __future__ import annotations

import sys

import click

from function_tools import options


@click.command("issuer")
@options.xr_argument
@options.input_option
@options.composition_option
@options.required_option
@options.region_option
@options.output_option(["text", "yaml", "json"], "text")
def issuer_cmd(
    *,
    xr_file: str,
    input_file: str | None,
    composition: str | None,
    required: tuple[str, ...],
    region: str | None,
    output: str,
) -> None:
    """Print the SelfHosted IRSA issuer URL of XR.yaml and the KubeadmControlPlane change it needs.

    The URL must be the API server's --service-account-issuer from the cluster's
    first boot, so this runs before the cluster exists. For irsa.mode External it
    prints the given issuer; for Disabled it exits 2.
    """
    from function.accept import accept_step_input  # noqa: PLC0415
    from function_tools import input_files, issuer  # noqa: PLC0415

    try:
        xr = input_files.load_one(xr_file, "composite resource")
        _, step_input = input_files.step_input(input_file, composition, xr)
        objs = input_files.load_required(required, xr, step_input)
    except input_files.InputFileError as err:
        raise options.InputError(str(err)) from None
    try:
        result = issuer.compute(xr, step_input=step_input, required=objs, region=region)
    except issuer.IssuerError as err:
        click.echo(f"Error: {err}", err=True)
        sys.exit(2)
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    if not input_file and not composition:
        # The prefix starts the bucket's name, so the issuer URL baked in at first boot.
        prefix = accept_step_input(step_input).name_prefix
        click.echo(
            f"note: no --composition or --input, so the default name prefix {prefix!r} "
            "(input.namePrefix): if the Composition that will compose this XR sets one, pass "
            "it with --composition",
            err=True,
        )
    if output == "json":
        import json  # noqa: PLC0415

        click.echo(json.dumps(result.as_dict(), indent=2))
    elif output == "yaml":
        import yaml  # noqa: PLC0415

        click.echo(yaml.safe_dump(result.as_dict(), sort_keys=False, width=1 << 30), nl=False)
    else:
        click.echo(issuer.text(result), nl=False)
