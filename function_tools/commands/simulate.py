"""``function-cluster-plugin simulate``: an XR's whole lifecycle against an in-memory Crossplane."""

from __future__ import annotations

import sys

import click

from function_tools import options


@click.command("simulate")
@options.xr_argument
@options.required_option
@options.input_option
@options.composition_option
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=60,  # simulate.Settings.steps (imported lazily, with the planner)
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
@click.option(
    "--set",
    "changes",
    multiple=True,
    metavar="STEP:PATH=VALUE",
    help="Before reconcile STEP, set the XR's PATH to VALUE (YAML; null removes it), e.g. "
    "16:spec.networking.amazonVPC.version=1.21.1: a day-two upgrade. Repeatable.",
)
@click.option(
    "--kubernetes-at",
    "kubernetes",
    default=None,
    metavar="STEP=VERSION[+ROLL]",
    help="Upgrade the control plane: its spec asks for Kubernetes VERSION before reconcile "
    "STEP, and it runs it ROLL reconciles later (default 3), e.g. 20=v1.34.1. The charts that "
    "follow the minor move after it, one at a time.",
)
@click.option(
    "--missing-chart",
    "missing_charts",
    multiple=True,
    metavar="CHART@VERSION",
    help="The chart repository does not have this chart version: provider-helm fails to "
    "install or upgrade it (e.g. aws-vpc-cni@1.99.0). Repeatable.",
)
@click.option(
    "--seconds-per-reconcile",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="The world's clock: seconds between two reconciles (an upgrade's soak and "
    "progress deadline are counted in it).",
)
@options.crossplane_v1_option
@options.output_option(
    ["text", "json"], "text", "A live view and timeline table, or one JSON document."
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
    changes: tuple[str, ...],
    kubernetes: str | None,
    missing_charts: tuple[str, ...],
    seconds_per_reconcile: int,
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
    (or its user) was still there, a Release was uninstalled, or anything was left once
    it was gone.
    """
    from function.spec_base import InvalidInputError  # noqa: PLC0415
    from function_tools import input_files, resolve, simulate  # noqa: PLC0415

    try:
        xr = input_files.load_one(xr_file, "composite resource")
        _, step_input = input_files.step_input(input_file, composition, xr)
        objs = input_files.load_required(required, xr, step_input)
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
            changes=tuple(simulate.parse_change(c) for c in changes),
            kubernetes=simulate.parse_kubernetes(kubernetes) if kubernetes else None,
            missing_charts=tuple(simulate.parse_missing_chart(m) for m in missing_charts),
            seconds_per_reconcile=seconds_per_reconcile,
        )
    except (input_files.InputFileError, simulate.SimulateError) as err:
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
