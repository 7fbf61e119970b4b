"""``serve``: what the container runs, the function over gRPC, with its options.

The runtime's only command. The tools' CLI (``function_tools.cli``) adds it to its
group, so ``function-cluster-plugin serve`` is this; nothing here imports the tools.
The runner and server are imported when ``serve`` runs, so ``--help`` stays cheap.
"""

from __future__ import annotations

import os
import re
from typing import Any, ClassVar

import click
from crossplane.function import cli as sdkcli

DURATION_FORMAT = "seconds (90, 1.5) or a Go-style duration: 90s, 5m, 1m30s, 250ms, 1h"


class Duration(click.ParamType):
    """Seconds, or a Go-style duration: 90s, 5m, 1m30s, 250ms, 1h."""

    name = "duration"
    _PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
    _UNIT: ClassVar[dict[str, float]] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """The duration in seconds."""
        if isinstance(value, int | float):
            return float(value)
        text = str(value).strip()
        try:
            return float(text)
        except ValueError:
            pass
        parts = self._PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            self.fail(f"{value!r} is not a duration (e.g. 30s, 5m, 1m30s)", param, ctx)
        return sum(float(n) * self._UNIT[u] for n, u in parts)


DURATION = Duration()


def serve_options(func: Any) -> Any:
    """The SDK's standard options plus drain, health, metrics, connection age and keepalive."""
    for option in reversed(
        [
            click.option(
                "--drain-grace",
                type=DURATION,
                default="25s",
                show_default=True,
                envvar="DRAIN_GRACE",
                help="On SIGTERM: health turns NOT_SERVING, every call already received is "
                "answered, later ones are refused with UNAVAILABLE, and the process exits "
                "within this time (keep it under the pod's terminationGracePeriodSeconds, "
                "30s by default).",
            ),
            click.option(
                "--health-address",
                default="",
                envvar="HEALTH_ADDRESS",
                help="Also serve grpc.health.v1.Health in plaintext on this address (e.g. "
                ":8081) for kubelet gRPC probes, which cannot speak mTLS. The health service "
                "is always served on --address too.",
            ),
            click.option(
                "--metrics-address",
                default="",
                envvar="METRICS_ADDRESS",
                help="Serve Prometheus metrics at http://ADDRESS/metrics (e.g. :8080, the "
                "port Crossplane declares as 'metrics' on every package runtime). Off by "
                "default.",
            ),
            click.option(
                "--metrics-window",
                "metrics_xr_ttl",
                type=DURATION,
                default="30m",
                show_default=True,
                envvar="METRICS_WINDOW",
                help="An XR's plugin phases count in the plugins metric until this long "
                "after its last call (longer than the XRs' reconcile interval).",
            ),
            click.option(
                "--max-connection-age",
                type=DURATION,
                default="5m",
                show_default=True,
                envvar="MAX_CONNECTION_AGE",
                help="Send each client connection a GOAWAY after this long (+-10% jitter), so "
                "clients such as Crossplane re-resolve the Service and reach new replicas. 0 "
                "turns it off.",
            ),
            click.option(
                "--max-connection-age-grace",
                type=DURATION,
                default="1m",
                show_default=True,
                envvar="MAX_CONNECTION_AGE_GRACE",
                help="After that GOAWAY, calls in flight on the connection get this long to "
                "finish before it closes.",
            ),
            click.option(
                "--keepalive-min-ping-interval",
                type=DURATION,
                default="30s",
                show_default=True,
                envvar="KEEPALIVE_MIN_PING_INTERVAL",
                help="Accept client keepalive pings this far apart or further (grpc's default "
                "is 5m; a client pinging faster is sent away with GOAWAY too_many_pings).",
            ),
            click.option(
                "--keepalive-permit-without-calls/--no-keepalive-permit-without-calls",
                default=True,
                show_default=True,
                envvar="KEEPALIVE_PERMIT_WITHOUT_CALLS",
                help="Accept those pings on connections with no call in flight too (grpc's "
                "default holds them to one per 2 hours).",
            ),
        ]
    ):
        func = option(func)
    return sdkcli.standard_options(func)


class ServeUsageError(click.ClickException):
    """What to pass to ``serve``, in one line (exit code 2, like other usage errors)."""

    exit_code = 2


# What Crossplane mounts into a function's pod (runtime.load_credentials reads them).
TLS_FILES = ("tls.crt", "tls.key", "ca.crt")


def _check_credentials(insecure: bool, tls_certs_dir: str | None) -> None:  # noqa: FBT001
    if insecure:
        return
    if not tls_certs_dir:
        msg = (
            "serve needs --tls-server-certs-dir DIR (env TLS_SERVER_CERTS_DIR, a directory "
            f"holding {', '.join(TLS_FILES)}: what Crossplane mounts), or --insecure "
            "(plaintext, for local runs such as crossplane render)"
        )
        raise ServeUsageError(msg)
    missing = [f for f in TLS_FILES if not os.path.isfile(os.path.join(tls_certs_dir, f))]
    if missing:
        msg = (
            f"--tls-server-certs-dir {tls_certs_dir} lacks {', '.join(missing)}: it must hold "
            f"{', '.join(TLS_FILES)} (the server's certificate and key, and the CA that signs "
            "Crossplane's client certificate), or pass --insecure"
        )
        raise ServeUsageError(msg)


@click.command(epilog=f"DURATION: {DURATION_FORMAT}.")
@serve_options
def serve(*, debug: bool, **kwargs: Any) -> None:
    """Serve the composition function over gRPC (mTLS unless --insecure).

    SIGTERM drains (see --drain-grace); grpc.health.v1.Health reports SERVING while the
    function answers; --metrics-address serves Prometheus metrics. Every flag can also
    be given by the environment variable shown with it.
    """
    _check_credentials(kwargs["insecure"], kwargs["tls_certs_dir"])
    # Kept out of `--help` and the other commands: they need none of it.
    from function import fn  # noqa: PLC0415
    from function.server import ListenError, ServeOptions, serve  # noqa: PLC0415

    try:
        serve(ServeOptions(**kwargs), fn.FunctionRunner, debug=debug)
    except ListenError as err:
        if err.usage:
            raise ServeUsageError(str(err)) from None
        raise click.ClickException(str(err)) from None
