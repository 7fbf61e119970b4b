"""``function-cluster-plugin fleet status``: a fleet's ClusterPlugins and rollouts, summarised.

The summary itself is ``function_tools/fleet_status.py``.
"""

from __future__ import annotations

import click

from function_tools import options


@click.group("fleet")
def fleet() -> None:
    """A fleet of ClusterPlugins and the ClusterPluginRollouts that move it."""


@fleet.command("status")
@click.argument("files", nargs=-1, metavar="[FILE]...")
@click.option(
    "--kubeconfig",
    metavar="FILE",
    help="Read the ClusterPlugins (or XClusterPlugins) and ClusterPluginRollouts from this "
    "cluster (needs the aws extra: lightkube) instead of FILEs.",
)
@click.option("--all", "every", is_flag=True, help="Also one line per cluster.")
def status_cmd(*, files: tuple[str, ...], kubeconfig: str | None, every: bool) -> None:
    """Print the fleet summarised: by add-on, by wave, failed and skipped clusters.

    By add-on (chart version and state), by wave, and the failed and skipped clusters grouped
    by reason, from FILEs (`kubectl get clusterplugins,clusterpluginrollouts -A -o yaml`) or
    --kubeconfig.
    """
    from function_tools import fleet_status, input_files  # noqa: PLC0415

    if bool(files) == bool(kubeconfig):
        msg = "give FILEs or --kubeconfig (one of the two)"
        raise options.InputError(msg)
    if kubeconfig:
        objects = fleet_status.read_cluster(kubeconfig)
    else:
        try:
            objects = input_files.load_documents(files)
        except input_files.InputFileError as err:
            raise options.InputError(str(err)) from None
    rollouts, plugins = fleet_status.split(objects)
    click.echo(fleet_status.summary(rollouts, plugins, every=every))
