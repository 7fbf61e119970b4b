"""`serve`'s own loop: flags, health, and helpers the drain, metrics and connection-age tests share.

Every server here is the real console script (`function-cluster-plugin serve`) in a
subprocess on loopback ports picked by binding port 0, stopped when its test ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import click
import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from function import serve as serve_command
from function import server
from function_tools import cli
from tests import test_mtls

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class TLS:
    """A server certificate directory and what a client connects with."""

    server_dir: Path
    ca: bytes
    client_cert: bytes
    client_key: bytes

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca, self.client_key, self.client_cert)


def make_tls(root: Path) -> TLS:
    """A CA, a server certificate for localhost and 127.0.0.1, and a client certificate."""
    ca, ca_cert, ca_key = test_mtls.make_ca("serve test CA")
    leaf = test_mtls.make_leaf(ca_cert, ca_key, "function-cluster-plugin", server=True)
    client = test_mtls.make_leaf(ca_cert, ca_key, "crossplane", server=False)
    root.mkdir(parents=True, exist_ok=True)
    (root / "tls.crt").write_bytes(leaf.cert)
    (root / "tls.key").write_bytes(leaf.key)
    (root / "ca.crt").write_bytes(ca.cert)
    return TLS(root, ca.cert, client.cert, client.key)


@dataclass
class Server:
    """One `function-cluster-plugin serve` subprocess and its addresses."""

    proc: subprocess.Popen[bytes]
    address: str
    log_path: Path
    tls: TLS | None = None
    health_address: str = ""
    metrics_address: str = ""
    extra: list[str] = field(default_factory=list)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def channel(self, options: list[tuple[str, object]] | None = None) -> grpc.Channel:
        if self.tls is None:
            return grpc.insecure_channel(self.address, options=options or [])
        return grpc.secure_channel(self.address, self.tls.channel_credentials(), options=options or [])

    def aio_channel(self, options: list[tuple[str, object]] | None = None) -> grpc.aio.Channel:
        if self.tls is None:
            return grpc.aio.insecure_channel(self.address, options=options or [])
        return grpc.aio.secure_channel(self.address, self.tls.channel_credentials(), options=options or [])

    def health(self, address: str | None = None, *, timeout: float = 3) -> int:
        """The overall status from grpc.health.v1.Health.Check (plaintext probe listener by default)."""
        with grpc.insecure_channel(address or self.health_address) as ch:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout).status

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=5) as r:
            return r.read().decode()

    def terminate(self) -> float:
        """SIGTERM; the time it was sent (time.monotonic)."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return t


def _command() -> list[str]:
    script = Path(sys.executable).with_name("function-cluster-plugin")
    return [str(script)] if script.exists() else [sys.executable, "-m", "function_tools.cli"]


def wait_port(host: str, port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            msg = f"serve exited with {proc.returncode}: {log.read_text(errors='replace')}"
            raise RuntimeError(msg)
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@contextmanager
def serve(
    *args: str,
    tls: TLS | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    health: bool = True,
    metrics: bool = False,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """Run `function-cluster-plugin serve` with ``args`` (plus address, TLS, probe, metrics)."""
    port = port or free_port(host)
    address = f"{host}:{port}"
    argv = [*_command(), "serve", "--address", address, *args]
    argv += ["--tls-server-certs-dir", str(tls.server_dir)] if tls else ["--insecure"]
    health_address = f"127.0.0.1:{free_port()}" if health else ""
    metrics_address = f"127.0.0.1:{free_port()}" if metrics else ""
    if health_address:
        argv += ["--health-address", health_address]
    if metrics_address:
        argv += ["--metrics-address", metrics_address]
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "serve.log"
        with log_path.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            )
        srv = Server(proc, address, log_path, tls, health_address, metrics_address, list(args))
        try:
            wait_port(host, port, proc, log_path)
            # The function's port is bound before the other listeners start: wait for each.
            for listener in (health_address, metrics_address):
                if listener:
                    h, p = listener.rsplit(":", 1)
                    wait_port(h, int(p), proc, log_path)
            yield srv
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLS:
    return make_tls(tmp_path_factory.mktemp("tls"))


# --- flags -----------------------------------------------------------------------------


def _parse(*args: str) -> dict[str, object]:
    ctx = serve_command.serve.make_context("serve", list(args))
    return dict(ctx.params)


def test_serve_keeps_the_sdk_flags_and_env_vars() -> None:
    p = _parse("--insecure", "--address", ":1", "--max-recv-message-size", "8", "--tls-certs-dir", "/x", "-d")
    assert p["insecure"] is True and p["address"] == ":1" and p["debug"] is True
    assert p["max_recv_message_size"] == 8 and p["tls_certs_dir"] == "/x" and p["max_send_message_size"] is None
    ctx = serve_command.serve.make_context("serve", [], default_map=None)
    assert ctx.params["address"] == "0.0.0.0:9443"
    env = {"TLS_SERVER_CERTS_DIR": "/tls/server", "DRAIN_GRACE": "10s", "MAX_CONNECTION_AGE": "2m"}
    got = {}

    @click.command()
    @serve_command.serve_options
    def probe(**kw: object) -> None:
        got.update(kw)

    CliRunner().invoke(probe, [], env=env, catch_exceptions=False)
    assert got["tls_certs_dir"] == "/tls/server"
    assert got["drain_grace"] == 10.0 and got["max_connection_age"] == 120.0


def test_serve_defaults_suit_kubernetes_and_crossplane() -> None:
    p = _parse()
    opts = server.ServeOptions(**{k: v for k, v in p.items() if k != "debug"})  # type: ignore[arg-type]
    assert 0 < opts.drain_grace < 30  # under the pod's default terminationGracePeriodSeconds
    assert opts.metrics_address == "" and opts.health_address == ""  # off unless asked for
    assert 60 <= opts.max_connection_age <= 30 * 60  # minutes, not hours
    assert opts.max_connection_age_grace >= 10
    assert opts.keepalive_min_ping_interval < 60 and opts.keepalive_permit_without_calls
    args = dict(server.grpc_options(opts))
    assert args["grpc.max_connection_age_ms"] == 300_000
    assert args["grpc.http2.min_ping_interval_without_data_ms"] == 30_000
    assert args["grpc.keepalive_permit_without_calls"] == 1
    assert args["grpc.max_receive_message_length"] == 4 * 1024 * 1024
    off = dict(server.grpc_options(server.ServeOptions(max_connection_age=0)))
    assert "grpc.max_connection_age_ms" not in off


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("1.5", 1.5), ("250ms", 0.25), ("90s", 90.0), ("5m", 300.0), ("1m30s", 90.0), ("1h", 3600.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert serve_command.DURATION.convert(text, None, None) == seconds


@pytest.mark.parametrize("text", ["", "5 m", "m", "5x", "-1s", "1m-3s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter):
        serve_command.DURATION.convert(text, None, None)


def test_serve_help_lists_every_flag() -> None:
    out = CliRunner().invoke(cli.cli, ["serve", "--help"]).output
    for flag in (
        "--address", "--insecure", "--tls-server-certs-dir", "--max-recv-message-size", "--drain-grace",
        "--health-address", "--metrics-address", "--metrics-window", "--max-connection-age",
        "--max-connection-age-grace", "--keepalive-min-ping-interval", "--keepalive-permit-without-calls",
    ):
        assert flag in out, flag


def test_serve_help_names_each_flags_environment_variable_and_the_duration_format() -> None:
    out = " ".join(CliRunner().invoke(cli.cli, ["serve", "--help"]).output.split())
    for envvar in (
        "ADDRESS", "INSECURE", "TLS_SERVER_CERTS_DIR", "MAX_RECV_MESSAGE_SIZE", "MAX_SEND_MESSAGE_SIZE",
        "DEBUG", "DRAIN_GRACE", "HEALTH_ADDRESS", "METRICS_ADDRESS", "METRICS_WINDOW",
        "MAX_CONNECTION_AGE", "MAX_CONNECTION_AGE_GRACE", "KEEPALIVE_MIN_PING_INTERVAL",
        "KEEPALIVE_PERMIT_WITHOUT_CALLS",
    ):
        assert f"env var: {envvar}" in out, envvar
    assert "DURATION: seconds (90, 1.5) or a Go-style duration: 90s, 5m, 1m30s, 250ms, 1h" in out


def test_serve_without_credentials_says_what_to_pass_in_one_line(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli.cli, ["serve"], env={"TLS_SERVER_CERTS_DIR": "", "INSECURE": ""})
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "Traceback" not in r.output
    assert "--tls-server-certs-dir DIR" in r.output and "--insecure" in r.output
    (tmp_path / "tls.key").write_text("key")
    r = CliRunner().invoke(cli.cli, ["serve", "--tls-server-certs-dir", str(tmp_path)])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1
    assert f"--tls-server-certs-dir {tmp_path} lacks tls.crt, ca.crt" in r.output


def test_serve_imports_no_metrics_library_unless_asked() -> None:
    """Cold start: prometheus_client (~25 ms to import) only with --metrics-address."""
    code = (
        "import sys; from function_tools import cli; from function import server, fn; "
        "print('prometheus_client' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --- health -----------------------------------------------------------------------------


async def _watch(address: str, seen: list[tuple[float, int]], done: asyncio.Event) -> None:
    async with grpc.aio.insecure_channel(address) as ch:
        stream = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest())
        try:
            async for r in stream:
                seen.append((time.monotonic(), r.status))
                if r.status == NOT_SERVING:
                    done.set()
        except grpc.aio.AioRpcError:
            done.set()


@pytest.mark.parametrize("mtls", [False, True], ids=["insecure", "mtls"])
def test_health_serving_then_not_serving_from_the_moment_the_drain_starts(mtls: bool, tls: TLS) -> None:
    from tests.test_drain import Burst

    with serve("--drain-grace", "20s", tls=tls if mtls else None) as srv:
        # The probe listener is plaintext even when the function is mTLS; the main listener
        # serves health with the function's own credentials.
        assert srv.health() == SERVING
        with srv.channel() as ch:
            got = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        assert got == SERVING
        for service in server.SERVICES:
            with grpc.insecure_channel(srv.health_address) as ch:
                r = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
            assert r.status == SERVING, service

        async def run() -> tuple[list[tuple[float, int]], float, list[float]]:
            seen: list[tuple[float, int]] = []
            done = asyncio.Event()
            watcher = asyncio.ensure_future(_watch(srv.health_address, seen, done))
            burst = Burst(srv, calls=300, concurrency=64, junk=1500)
            t_sig, answers = await burst.run_with_sigterm_after(20)
            await asyncio.wait_for(done.wait(), 10)
            watcher.cancel()
            return seen, t_sig, answers

        seen, t_sig, answered_at = asyncio.run(run())
        srv.proc.wait(30)
    statuses = [s for _, s in seen]
    assert statuses[0] == SERVING and NOT_SERVING in statuses, statuses
    not_serving_at = next(t for t, s in seen if s == NOT_SERVING)
    # NOT_SERVING from the start of the drain: before the calls the drain answers are done.
    assert t_sig <= not_serving_at < max(answered_at), (t_sig, not_serving_at, max(answered_at))
    assert srv.proc.returncode == 0


def test_health_is_not_on_the_probe_listener_before_asked(tmp_path: Path) -> None:
    with serve(health=False) as srv:
        assert srv.health(srv.address) == SERVING  # the main listener always serves it
    # The probe listener serves nothing but health: not the function.
    with serve() as srv, grpc.insecure_channel(srv.health_address) as ch:
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary(server_method())(b"", timeout=3)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]


def server_method() -> str:
    return f"/{server.V1_SERVICE}/RunFunction"
