"""The ``function-cluster-plugin`` command: ``serve`` (what the container runs) and local tools.

Subcommands other than ``serve`` import their modules lazily, so the server's
cold start pays only for what serving needs.
"""

from __future__ import annotations

from typing import Any

import click
from crossplane.function import cli as sdkcli

from function.__version__ import __version__


@click.group()
@click.version_option(__version__, prog_name="function-cluster-plugin")
def cli() -> None:
    """Compose Cluster API add-ons on AWS (CNI, CSI, load balancer, IRSA) with Crossplane."""


@cli.command()
@sdkcli.standard_options
def serve(**kwargs: Any) -> None:
    """Serve the composition function over gRPC (mTLS unless --insecure)."""
    from function import fn  # noqa: PLC0415  # keep `--help` and other commands light

    sdkcli.run(fn.FunctionRunner(), **kwargs)


if __name__ == "__main__":
    cli()
