"""The ``function-cluster-plugin`` command: ``serve`` (what the container runs) and local tools.

Subcommands other than ``serve`` import their modules lazily, so the server's
cold start pays only for what serving needs.

    function-cluster-plugin serve [SDK options] [--drain-grace D] [--health-address A]
        [--metrics-address A] [--metrics-window D] [--max-connection-age D]
        [--max-connection-age-grace D] [--keepalive-min-ping-interval D]
        [--[no-]keepalive-permit-without-calls]
    function-cluster-plugin render XR.yaml [--observed PATH]... [--required PATH]...
        [--input FILE] [--composition FILE] [-o yaml|json] [--crossplane-v1]
    function-cluster-plugin simulate XR.yaml [--required PATH]... [--input FILE]
        [--composition FILE] [--steps N] [--initialized-at N] [--available-at N]
        [--ready-delay N] [--slow KIND=N]... [--fail NODE@STEP[+DURATION]]...
        [--all-steps] [--delay S]
        [--delete-cluster-at N [--cluster-gone-after K]] [--crossplane-v1] [-o text|json]
    function-cluster-plugin issuer XR.yaml [--input FILE] [--composition FILE]
        [--required PATH]... [--region R] [-o text|yaml|json]
"""

from __future__ import annotations

import sys
from typing import Any

import click

from function.__version__ import __version__
from function.serve import serve
from function_tools import options
from function_tools.template_values import template_values_cmd


class OneLineUsageErrors(click.Group):
    """A group whose usage errors (a missing file, an unknown option) take one line.

    click prints a usage error as three lines (usage, hint, error); every other refusal of
    these commands is one line naming what is wrong, so these are too, with the hint kept.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """The standalone main of click, with a usage error said in one line on stderr."""
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as err:
            hint = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None else ""
            click.echo(f"Error: {err.format_message().rstrip('.')}{hint}", err=True)
            sys.exit(err.exit_code)
        except click.ClickException as err:
            err.show()
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        # Without standalone mode click returns the command's value, or ctx.exit's code.
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=OneLineUsageErrors)
@click.version_option(__version__, prog_name="function-cluster-plugin")
def cli() -> None:
    """Compose Cluster API add-ons on AWS with Crossplane.

    The cloud controller manager, a CNI (Amazon VPC CNI or Calico), the EBS and EFS CSI
    drivers, the AWS Load Balancer Controller and external-dns, each with its own IAM role
    through IRSA, installed in readiness order.
    """


# --- local tools: render, simulate, issuer ------------------------------------

_v1_option = click.option(
    "--crossplane-v1",
    is_flag=True,
    help="Behave like Crossplane 1.x: the Cluster API objects arrive only as label-selected "
    "extra resources.",
)


def _step_input(
    input_file: str | None, composition: str | None, xr: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """(step name, step input) from --input, else from --composition, else defaults."""
    from function_tools import files  # noqa: PLC0415

    return files.step_input(input_file, composition, xr)


@cli.command("render")
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
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="A YAML stream like crossplane render prints, or a JSON array of the same documents.",
)
@_v1_option
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
    from function_tools import files, render  # noqa: PLC0415

    try:
        xr = files.load_one(xr_file, "composite resource")
        step, step_input = _step_input(input_file, composition, xr)
        out = render.render(
            xr,
            required=files.load_required(required, xr, step_input),
            observed=files.load_documents(observed),
            step_input=step_input,
            step=step,
            crossplane_v1=crossplane_v1,
        )
    except files.InputFileError as err:
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


@cli.command("simulate")
@options.xr_argument
@options.required_option
@options.input_option
@options.composition_option
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Reconciles to play at most.",
)
@click.option(
    "--initialized-at",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Reconcile at which the workload control plane becomes initialized.",
)
@click.option(
    "--available-at",
    type=click.IntRange(min=0),
    default=8,
    show_default=True,
    help="Reconcile at which the workload control plane becomes available.",
)
@click.option(
    "--ready-delay",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Reconciles after its creation at which a composed resource is observed Ready.",
)
@click.option(
    "--slow",
    multiple=True,
    metavar="KIND=N",
    help="Composed resources of KIND turn Ready N reconciles after creation instead, e.g. "
    "Distribution=15 (CloudFront takes about 15 minutes). Repeatable.",
)
@click.option(
    "--fail",
    "faults",
    multiple=True,
    metavar="NODE@STEP[+DURATION]",
    help="Hold composed resource NODE not Ready during reconciles STEP..STEP+DURATION-1 "
    "(DURATION defaults to 1); NODE control-plane makes the control plane unavailable "
    "instead. Repeatable.",
)
@click.option(
    "--all-steps",
    is_flag=True,
    help="Play every reconcile. By default the run stops after 3 quiet reconciles with the XR "
    "Ready, once every scheduled event is over.",
)
@click.option(
    "--delay",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds to pause between reconciles in the live view (default 0.05 on a terminal).",
)
@click.option(
    "--delete-cluster-at",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Delete the CAPI cluster at reconcile N (the Cluster first, its control plane and "
    "infrastructure from N+1) and play what follows: Releases orphaned, AWS resources kept "
    "while the cluster exists, everything deleted in Usage order once it is gone.",
)
@click.option(
    "--cluster-gone-after",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    metavar="K",
    help="With --delete-cluster-at: reconciles until the deleted cluster is no longer found.",
)
@_v1_option
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="A live view and timeline table, or one JSON document.",
)
def simulate_cmd(
    *,
    xr_file: str,
    required: tuple[str, ...],
    input_file: str | None,
    composition: str | None,
    steps: int,
    initialized_at: int,
    available_at: int,
    ready_delay: int,
    slow: tuple[str, ...],
    faults: tuple[str, ...],
    all_steps: bool,
    delay: float | None,
    delete_cluster_at: int | None,
    cluster_gone_after: int,
    crossplane_v1: bool,
    output: str,
) -> None:
    """Play XR.yaml's whole lifecycle against an in-memory Crossplane: what appears when.

    The control plane starts not initialized; composed resources turn Ready
    --ready-delay reconciles after creation. At the end a timeline shows, for every
    composed resource, the reconcile it appeared at, what it waited for before, and
    when it became Ready; then when the XR became Ready and every deletion. Exits 1
    if the XR is not Ready at the end (or never was), anything was deleted, or the
    function returned FATAL. With --delete-cluster-at it plays the cluster's deletion
    and exits 1 if anything was deleted while the cluster existed or while a Usage of it
    was still there, a Release was uninstalled, or anything was left once it was gone.
    """
    from function.spec_base import InvalidInputError  # noqa: PLC0415
    from function_tools import (  # noqa: PLC0415
        files,
        resolve,
        simulate,
    )

    try:
        xr = files.load_one(xr_file, "composite resource")
        _, step_input = _step_input(input_file, composition, xr)
        objs = files.load_required(required, xr, step_input)
        settings = simulate.Settings(
            steps=steps,
            initialized_at=initialized_at,
            available_at=available_at,
            ready_delay=ready_delay,
            slow=tuple(simulate.parse_slow(s) for s in slow),
            faults=tuple(simulate.parse_fault(f) for f in faults),
            crossplane_v1=crossplane_v1,
            all_steps=all_steps,
            delete_cluster_at=delete_cluster_at,
            cluster_gone_after=cluster_gone_after,
        )
    except (files.InputFileError, simulate.SimulateError) as err:
        raise options.InputError(str(err)) from None
    try:
        # What the function refuses at the first reconcile, said in one line before any is
        # played (the JSON document says it as the first reconcile's FATAL).
        if output != "json":
            resolve.accept_with_objects(xr, step_input, objs)
    except InvalidInputError as err:
        click.echo(f"the function returned a fatal result: {err}", err=True)
        sys.exit(1)
    sim = simulate.Simulator(xr, objs, step_input=step_input, settings=settings)
    if output == "json":
        import json  # noqa: PLC0415

        result = sim.run()
        click.echo(json.dumps(result.as_dict(), indent=2))
    elif sys.stdout.isatty() and _has_rich():
        result = simulate.run_live(sim, delay=0.05 if delay is None else delay)
    else:
        result = simulate.run_plain(sim, click.echo)
    sys.exit(0 if result.ok else 1)


def _has_rich() -> bool:
    """Whether the optional live view can be shown (rich is a CLI extra, not a runtime need)."""
    try:
        import rich  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


@cli.command("issuer")
@options.xr_argument
@options.input_option
@options.composition_option
@options.required_option
@options.region_option
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Choice(["text", "yaml", "json"]),
    default="text",
    show_default=True,
)
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
    from function_tools import files, issuer  # noqa: PLC0415

    try:
        xr = files.load_one(xr_file, "composite resource")
        _, step_input = _step_input(input_file, composition, xr)
        objs = files.load_required(required, xr, step_input)
    except files.InputFileError as err:
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


def _add_aws_group() -> None:
    # Imports no boto3: `aws preflight` loads it when it runs.
    from function_tools.aws.cli import aws  # noqa: PLC0415

    cli.add_command(aws)


def _show_environment_variables(group: click.Group) -> None:
    """Every flag's --help names the environment variable it also reads."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _show_environment_variables(command)
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                param.show_envvar = True


cli.add_command(serve)
_add_aws_group()
cli.add_command(template_values_cmd)
_show_environment_variables(cli)

if __name__ == "__main__":
    cli()
