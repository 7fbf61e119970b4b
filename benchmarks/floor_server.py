"""Serve a floor function (no-op or echo) exactly as ``function-cluster-plugin serve`` serves.

    python benchmarks/floor_server.py --kind noop|echo [serve's options]

Same serve loop (``function.server``: drain, health, the SDK's flags) and the same
flags, so loopback figures compare like with like. Imports only the SDK, that loop
and this directory, not the function, so its cold start is the loop's own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from floors import FloorRunner

from function.serve import serve_options
from function.server import ServeOptions, serve


@click.command()
@click.option("--kind", type=click.Choice(["noop", "echo"]), required=True)
@serve_options
def main(kind: str, *, debug: bool, **kwargs: Any) -> None:
    """Serve the floor function ``kind``."""
    serve(ServeOptions(**kwargs), lambda _metrics: FloorRunner(kind), debug=debug)


if __name__ == "__main__":
    main()
