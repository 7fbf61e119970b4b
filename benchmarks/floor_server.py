"""Serve a floor function (no-op or echo) exactly as ``function-cluster-plugin serve`` serves.

    python benchmarks/floor_server.py --kind noop|echo [SDK standard options]

Same SDK entry point (``crossplane.function.cli.run`` -> ``runtime.serve``), same
flags, so loopback figures compare like with like. Imports only the SDK and
this directory, so its cold start is the SDK's own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from crossplane.function import cli as sdkcli

sys.path.insert(0, str(Path(__file__).resolve().parent))

from floors import FloorRunner


@click.command()
@click.option("--kind", type=click.Choice(["noop", "echo"]), required=True)
@sdkcli.standard_options
def main(kind: str, **kwargs: Any) -> None:
    """Serve the floor function ``kind``."""
    sdkcli.run(FloorRunner(kind), **kwargs)


if __name__ == "__main__":
    main()
