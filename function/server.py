"""The gRPC serve loop of ``function-cluster-plugin serve``: drain, health, metrics, connection age.

The SDK's ``runtime.serve`` does not drain: on SIGTERM it calls ``server.stop(5)``, and
grpc core then cancels every call it had received but not yet handed to the function
(grpc/grpc#41785; measured: 198 of 400 calls CANCELLED at concurrency 256). This loop
keeps the SDK's behaviour otherwise (v1 and v1beta1 services, reflection, mTLS from
``--tls-server-certs-dir``, message-size limits) and adds, on SIGTERM or SIGINT:

1. health NOT_SERVING on every listener, at once;
2. every call the server had received is answered: grpc core's channelz counters say
   how many calls it holds, and that many more calls are let through to the function
   (calls reach the function in the order they arrived);
3. any call after those is refused with UNAVAILABLE before the function starts it
   (nothing computed: safe to retry, e.g. on another replica);
4. once the server holds no call and has refused none for a moment, ``server.stop``
   sends GOAWAY and closes the listeners (so core has nothing left to cancel), then the
   process exits 0.

A call still running when ``--drain-grace`` runs out is cancelled (a call takes
milliseconds; the grace is seconds). For replicas, connections end after
``--max-connection-age`` (GOAWAY, then ``--max-connection-age-grace`` for calls in
flight) so clients re-resolve and reach new replicas, and the keepalive policy accepts
client pings every ``--keepalive-min-ping-interval`` or slower, with or without calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from crossplane.function import logging, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from grpc._cython import cygrpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

if TYPE_CHECKING:
    from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

    from function.metrics import Metrics

V1_SERVICE = fnv1.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name
V1BETA1_SERVICE = fnv1beta1.DESCRIPTOR.services_by_name["FunctionRunnerService"].full_name
SERVICES = (V1_SERVICE, V1BETA1_SERVICE)
MIB = 1024 * 1024
# How often the drain asks grpc core whether it still holds a call.
DRAIN_POLL_S = 0.005
# grpc core cancels (CANCELLED) a call that arrives while the server stops, and channelz
# counts a call only some time after it arrived: the drain stops the server once no call
# is held and none has been refused for this long (clients told UNAVAILABLE back off), or
# after DRAIN_QUIET_CAP_S of refusing, whichever comes first.
DRAIN_QUIET_S = 0.05
DRAIN_QUIET_CAP_S = 5.0
REFUSED = "function-cluster-plugin is shutting down; the call was not started: retry it"
# mallopt's parameter number for the most arenas glibc's malloc makes (malloc.h).
M_ARENA_MAX = -8


@dataclass(frozen=True)
class ServeOptions:
    """Everything ``serve`` is told (durations in seconds; 0 turns an age off)."""

    address: str = "0.0.0.0:9443"
    tls_certs_dir: str | None = None
    insecure: bool = False
    max_recv_message_size: int = 4  # MB
    max_send_message_size: int | None = None  # MB; defaults to the receive limit
    drain_grace: float = 25.0
    health_address: str = ""
    metrics_address: str = ""
    max_connection_age: float = 300.0
    max_connection_age_grace: float = 60.0
    keepalive_min_ping_interval: float = 30.0
    keepalive_permit_without_calls: bool = True
    # How long a reconciled XR's plugin phases count in the metrics without a new call.
    metrics_xr_ttl: float = 1800.0


def grpc_options(opts: ServeOptions) -> list[tuple[str, Any]]:
    """The grpc core server arguments for ``opts``."""
    send = opts.max_send_message_size or opts.max_recv_message_size
    out: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", opts.max_recv_message_size * MIB),
        ("grpc.max_send_message_length", send * MIB),
        # Keepalive enforcement (grpc core's ping abuse policy): a ping sooner than this
        # after the previous one is a strike, and more than max_ping_strikes strikes
        # without the server sending data end the connection (GOAWAY too_many_pings).
        # The default minimum is 5 minutes, and without calls in flight any ping is
        # held to 2 hours unless keepalive_permit_without_calls is set.
        (
            "grpc.http2.min_ping_interval_without_data_ms",
            round(opts.keepalive_min_ping_interval * 1000),
        ),
        ("grpc.keepalive_permit_without_calls", int(opts.keepalive_permit_without_calls)),
        ("grpc.http2.max_ping_strikes", 2),
    ]
    if opts.max_connection_age > 0:
        # grpc core adds +-10% jitter to the age, so a fleet's connections do not all
        # end at once; after the GOAWAY, calls in flight get the grace to finish.
        out += [
            ("grpc.max_connection_age_ms", round(opts.max_connection_age * 1000)),
            ("grpc.max_connection_age_grace_ms", round(opts.max_connection_age_grace * 1000)),
        ]
    return out


def split_address(address: str, default_host: str = "0.0.0.0") -> tuple[str, int]:  # noqa: S104
    """(host, port) of ``host:port``, ``:port`` or ``[v6]:port``."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        msg = f"{address!r} is not host:port"
        raise ValueError(msg)
    return host.strip("[]") or default_host, int(port)


class ListenError(Exception):
    """An address ``serve`` cannot listen on, said in one line.

    ``usage``: the address is not one at all (a usage error), rather than taken.
    """

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


# Addresses grpc takes that are no host:port, left to grpc to judge.
_SOCKET_SCHEMES = ("unix:", "unix-abstract:", "vsock:")


def check_listen(option: str, address: str) -> None:
    """ListenError unless ``address`` (given as ``option``) can be listened on now.

    grpc logs a line of its own and says only "Failed to bind": a plain socket bound
    to the address (and let go at once) says why, before grpc tries.
    """
    if address.startswith(_SOCKET_SCHEMES):
        return
    try:
        host, port = split_address(address)
    except ValueError:
        msg = f"{option} {address!r} is not host:port (e.g. 0.0.0.0:9443, :9443 or [::]:9443)"
        raise ListenError(msg, usage=True) from None
    import socket  # noqa: PLC0415  # asyncio has loaded it already

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, port))
    except OSError as err:
        msg = f"{option} {address}: cannot listen there: {err.strerror or err}"
        raise ListenError(msg) from None


def _add_port(server: Any, option: str, address: str, creds: Any = None) -> int:
    try:
        if creds is not None:
            return int(server.add_secure_port(address, creds))
        return int(server.add_insecure_port(address))
    except RuntimeError:
        msg = f"{option} {address}: cannot listen there (grpc could not bind it)"
        raise ListenError(msg) from None


class Gate:
    """Which calls the function runs: all of them, until a drain sets a quota."""

    def __init__(self) -> None:
        self.entered = 0  # calls that reached the function (v1 and v1beta1)
        self.quota: int | None = None  # while draining: run calls up to this count
        self.refused = 0
        self.last_refused = 0.0  # time.monotonic() of the last refusal

    def admit(self) -> bool:
        """Count a call reaching the function; whether to run it."""
        self.entered += 1
        quota = self.quota
        if quota is None or self.entered <= quota:
            return True
        self.refused += 1
        self.last_refused = time.monotonic()
        return False


class CountingHealth(health.aio.HealthServicer):
    """The standard health service, counting its open Watch streams (the drain waits on calls)."""

    def __init__(self) -> None:
        super().__init__()
        self.watching = 0

    async def Watch(self, request: Any, context: Any) -> None:  # noqa: N802
        """Stream the status of a service until the client leaves."""
        self.watching += 1
        try:
            await super().Watch(request, context)
        finally:
            self.watching -= 1


def _handler(
    gate: Gate,
    run: Callable[..., Any],
    deserialize: Callable[[bytes], Any],
    serialize: Callable[[Any], bytes],
    metrics: Metrics | None,
) -> grpc.RpcMethodHandler:
    """A unary handler that takes and returns bytes, decoding and encoding inside the call.

    grpc's aio server keeps the message its deserializer returned, and the one the
    handler returned, until the response has been sent; a decoded request is several
    times its wire size (about 600 KiB for a 120 KiB request), so with eight calls in
    flight that was megabytes of peak RSS. Decoded here, a request lives only while the
    function runs (one call at a time: it never awaits) and grpc holds only bytes.
    """
    if metrics is not None:
        deserialize = metrics.measure_request(deserialize)
        serialize = metrics.measure_response(serialize)

    async def behaviour(data: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if not gate.admit():
            await context.abort(grpc.StatusCode.UNAVAILABLE, REFUSED)
        return serialize(await run(deserialize(data), context))

    return grpc.unary_unary_rpc_method_handler(behaviour)


def add_function(
    server: grpc.aio.Server,
    runner: grpcv1.FunctionRunnerServiceServicer,
    gate: Gate,
    metrics: Metrics | None = None,
) -> None:
    """Register the v1 and v1beta1 FunctionRunnerService behind ``gate``."""
    beta = runtime.BetaFunctionRunner(wrapped=runner)
    for service, run, req, rsp in (
        (V1_SERVICE, runner.RunFunction, fnv1.RunFunctionRequest, fnv1.RunFunctionResponse),
        (
            V1BETA1_SERVICE,
            beta.RunFunction,
            fnv1beta1.RunFunctionRequest,
            fnv1beta1.RunFunctionResponse,
        ),
    ):
        handlers = {
            "RunFunction": _handler(gate, run, req.FromString, rsp.SerializeToString, metrics)
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
        server.add_registered_method_handlers(service, handlers)


def _channelz_ids() -> set[int]:
    out: set[int] = set()
    start = 0
    while True:
        page = json.loads(cygrpc.channelz_get_servers(start))
        servers = page.get("server", [])
        out |= {int(s["ref"]["serverId"]) for s in servers}
        if page.get("end", True) or not servers:
            return out
        start = max(out) + 1


def calls_held(server_id: int) -> int:
    """Calls grpc core has received on the server and not finished (channelz counters)."""
    data = json.loads(cygrpc.channelz_get_server(server_id))["server"]["data"]
    started = int(data.get("callsStarted", 0))
    return started - int(data.get("callsSucceeded", 0)) - int(data.get("callsFailed", 0))


@dataclass
class Served:
    """What ``start`` set up; ``drain`` takes it down."""

    server: grpc.aio.Server
    server_id: int
    port: int
    gate: Gate
    health: CountingHealth
    probe: grpc.aio.Server | None
    metrics: Metrics | None
    metrics_stop: Callable[[], None] | None


async def start(
    opts: ServeOptions,
    runner: grpcv1.FunctionRunnerServiceServicer,
    *,
    metrics: Metrics | None = None,
) -> Served:
    """Start the function server (and the probe and metrics listeners); health SERVING."""
    creds = None if opts.insecure else runtime.load_credentials(opts.tls_certs_dir)  # type: ignore[arg-type]
    if creds is None and not opts.insecure:
        msg = "no credentials were provided - did you provide credentials or use the insecure flag?"
        raise ValueError(msg)
    for option, address in (("--address", opts.address), ("--health-address", opts.health_address)):
        if address:
            check_listen(option, address)
    before = _channelz_ids()
    server = grpc.aio.server(options=grpc_options(opts))
    (server_id,) = _channelz_ids() - before
    gate = Gate()
    add_function(server, runner, gate, metrics)
    health_servicer = CountingHealth()
    for service in SERVICES:
        await health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
    await health_servicer.set(health.OVERALL_HEALTH, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*runtime.SERVICE_NAMES, health.SERVICE_NAME), server)
    port = _add_port(server, "--address", opts.address, creds)

    probe = None
    if opts.health_address:
        # Kubelet's gRPC probes speak plaintext only (KEP-2727; TLS is alpha in 1.37 and
        # without client certificates), so probes get a listener of their own that
        # serves nothing but the health service.
        probe = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, probe)
        _add_port(probe, "--health-address", opts.health_address)

    metrics_stop = None
    if metrics is not None and opts.metrics_address:
        check_listen("--metrics-address", opts.metrics_address)
        host, metrics_port = split_address(opts.metrics_address)
        metrics_stop = metrics.serve_http(host, metrics_port)

    await server.start()
    if probe is not None:
        await probe.start()
    for service in (*SERVICES, health.OVERALL_HEALTH):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return Served(server, server_id, port, gate, health_servicer, probe, metrics, metrics_stop)


async def drain(served: Served, grace: float, log: Any) -> dict[str, Any]:
    """Answer what the server holds, refuse the rest, stop within ``grace`` seconds."""
    t0 = time.monotonic()
    deadline = t0 + grace
    await served.health.enter_graceful_shutdown()
    if served.metrics is not None:
        served.metrics.draining.set(1)
    held = calls_held(served.server_id) - served.health.watching
    counted_at = time.monotonic()  # when the count was read (figures; the drain tests judge by it)
    gate = served.gate
    # The function's handlers never await, so no call is inside one now: every call
    # core holds is still to reach the function, in the order they arrived.
    gate.quota = gate.entered + held
    answered_from = gate.entered
    log.info("draining", calls_held=held, grace_seconds=grace)
    quiet_since: float | None = None  # when the server last held nothing
    refusing_since: float | None = None  # when the held calls were all done
    while (now := time.monotonic()) < deadline:
        if calls_held(served.server_id) > served.health.watching:
            quiet_since = None
        else:
            quiet_since = quiet_since or now
            refusing_since = refusing_since or now
            quiet = now - max(quiet_since, gate.last_refused) >= DRAIN_QUIET_S
            if quiet or now - refusing_since >= DRAIN_QUIET_CAP_S:
                break
        await asyncio.sleep(DRAIN_POLL_S)
    # Nothing held now (or the grace is over): GOAWAY, close the listener; core has no
    # queued call left to cancel. Calls already in the function get what grace is left.
    stop_at = time.monotonic()
    await served.server.stop(max(0.0, deadline - time.monotonic()))
    if served.probe is not None:
        await served.probe.stop(0)
    if served.metrics_stop is not None:
        served.metrics_stop()
    figures = {
        "calls_held": held,
        "answered": min(gate.entered, gate.quota) - answered_from,
        "refused": gate.refused,
        "seconds": round(time.monotonic() - t0, 3),
        "counted_at": counted_at,
        "stop_at": stop_at,
    }
    log.info("drained", **figures)
    return figures


async def serve_until_signalled(
    opts: ServeOptions,
    runner: grpcv1.FunctionRunnerServiceServicer,
    *,
    metrics: Metrics | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT, then drain."""
    log = logging.get_logger()
    loop = asyncio.get_running_loop()
    served = await start(opts, runner, metrics=metrics)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "serving",
        address=opts.address,
        port=served.port,
        mtls=not opts.insecure,
        health_address=opts.health_address or None,
        metrics_address=opts.metrics_address or None,
        max_connection_age_seconds=opts.max_connection_age or None,
        pid=os.getpid(),
    )
    stopped = asyncio.ensure_future(stop.wait())
    terminated = asyncio.ensure_future(served.server.wait_for_termination())
    await asyncio.wait((stopped, terminated), return_when=asyncio.FIRST_COMPLETED)
    # (Not cancelled: it waits on the server's own shutdown future, which would go too.)
    await drain(served, opts.drain_grace, log)
    await terminated


def limit_malloc_arenas() -> bool:
    """One malloc arena for every thread of the process (glibc); whether it was set.

    glibc gives each thread that allocates an arena of its own, up to eight per core,
    and an arena keeps what its thread freed for that thread. grpc's threads read and
    write every call's bytes, so each kept a few hundred KiB to megabytes of buffers
    that the event loop, which does all the rest, could not reuse: 1-2 MiB of RSS at
    concurrency 8 (``make bench``'s soak), more with large requests. The function runs
    on one thread, so sharing one arena costs no measurable time. Set before grpc
    starts its threads; MALLOC_ARENA_MAX or GLIBC_TUNABLES in the environment win.
    """
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "MALLOC_ARENA_MAX" in os.environ or "glibc.malloc.arena_max" in tunables:
        return False
    # 180 KiB of RSS, that serve alone needs.
    import ctypes  # noqa: PLC0415

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # None: not glibc
    return mallopt is not None and mallopt(M_ARENA_MAX, 1) == 1


def serve(
    opts: ServeOptions,
    runner_factory: Callable[[Metrics | None], grpcv1.FunctionRunnerServiceServicer],
    *,
    debug: bool = False,
) -> None:
    """Configure malloc and logging (as the SDK does), build the runner, serve until signalled."""
    limit_malloc_arenas()
    logging.configure(level=logging.Level.DEBUG if debug else logging.Level.INFO)
    metrics = None
    if opts.metrics_address:
        # prometheus_client costs ~25 ms of start-up: only when asked for.
        from function.metrics import Metrics  # noqa: PLC0415

        metrics = Metrics(xr_ttl=opts.metrics_xr_ttl)
    runner = runner_factory(metrics)
    asyncio.run(serve_until_signalled(opts, runner, metrics=metrics))
