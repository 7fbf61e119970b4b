"""``function-cluster-plugin render``: one reconcile, printed as ``crossplane render`` prints it."""

from __future__ import annotations

import sys

import click

from function_tools import options


@click.command("render")
@options.xr_argument
@click.option(
    "--observed",
    "observed",
    multiple=True,
    type=options.PATH,
    help="Observed composed resources, each with the crossplane.io/composition-resource-name "
    "annotation: a YAML file or a directory of them. Repeatable.",
)
@options.required_option
@options.input_option
@options.composition_option
@options.output_option(
    ["yaml", "json"],
    "yaml",
    "A YAML stream like crossplane render prints, or a JSON array of the same documents.",
)
@options.crossplane_v1_option
def render_cmd(
    *,
    xr_file: str,
    observed: tuple[str, ...],
    required: tuple[str, ...],
    input_file: str | None,
    composition: str | None,
    output: str,
    crossplane_v1: bool,
) -> None:
    """Print what Crossplane would apply for one reconcile of XR.yaml, like `crossplane render`.

    The stream holds the XR (name and new status, Ready condition included), every
    desired composed resource sorted by composition-resource-name, and the function's
    results as render.crossplane.io/v1beta1 Result objects. No Docker, no cluster.
    Exits 1 with the message on stderr when the function returns a FATAL result.
    """
    from function_tools import input_files, render  # noqa: PLC0415

    try:
        xr = input_files.load_one(xr_file, "composite resource")
        step, step_input = input_files.step_input(input_file, composition, xr)
        out = render.render(
            xr,
            required=input_files.load_required(required, xr, step_input),
            observed=input_files.load_documents(observed),
            step_input=step_input,
            step=step,
            crossplane_v1=crossplane_v1,
        )
    except input_files.InputFileError as err:
        raise options.InputError(str(err)) from None
    if out.fatal is not None:
        click.echo(f"pipeline step {step!r} returned a fatal result: {out.fatal}", err=True)
        sys.exit(1)
    for name in out.deleted:
        click.echo(
            f"warning: observed {name} is not desired any more: Crossplane would delete it",
            err=True,
        )
    text = render.to_json(out.documents) if output == "json" else render.to_yaml(out.documents)
    click.echo(text, nl=False)
