"""Replicas that share the load: bounded connection age and a keepalive policy.

Through the real console script. Times are scaled down (the mechanism is grpc core's
own, unchanged by the scale): connection age 1-2 s instead of 5 min, its grace 5 s
instead of 1 min; a server minimum ping interval of 1 s against client pings every 2 s
instead of 30 s against 60 s (same ratio); the test client's DNS re-resolution floor
0.5 s instead of grpc-go's 30 s. ``tests/soak/test_soak.py`` runs the keepalive case at
the real 60 s and the production defaults.

- A channel calling through several connection ages sees the server end the connection
  (READY -> IDLE, grpc's state after a GOAWAY; a broken connection goes to
  TRANSIENT_FAILURE) and reconnect about once per age, and no call fails.
- A client pinging every 2 s with no call in flight for ~10 s is never sent away (the
  server's trace shows every ping, with no strike); pinging 5x faster than allowed, or
  idle pings with ``--no-keepalive-permit-without-calls``, is sent away: the policy bites.
- Two replicas behind a DNS name the test serves (dnslib) and a round_robin client; a
  third replica starts mid-run and is added to DNS. With a connection age, calls reach
  it once connections have aged; without one it gets none (crossplane#7585).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from dnslib import QTYPE, RR, A
from dnslib.server import BaseResolver, DNSServer

from tests import strategies as gen
from tests.test_metrics import samples, value
from tests.test_serve import TLS, Server, serve

P = "function_cluster_plugin"
AGE = ["--max-connection-age", "1s", "--max-connection-age-grace", "5s"]
KEEPALIVE_TRACE = {"GRPC_TRACE": "http_keepalive", "GRPC_VERBOSITY": "debug"}


@dataclass
class States:
    """Connectivity states of a channel, as they change."""

    seen: list[tuple[float, str]] = field(default_factory=list)

    async def watch(self, ch: grpc.aio.Channel) -> None:
        state = ch.get_state()
        while True:
            await ch.wait_for_state_change(state)
            state = ch.get_state()
            self.seen.append((time.monotonic(), state.name))

    def reconnects(self) -> int:
        """READY again (the watcher starts on a READY channel, so every READY it sees)."""
        return sum(s == "READY" for _, s in self.seen)

    def left_ready(self) -> list[str]:
        """The state after each time a connection ended."""
        names = [s for _, s in self.seen]
        return [b for a, b in itertools.pairwise(names) if a == "READY"]


async def call_for(
    srv: Server | str, seconds: float, *, concurrency: int = 4, options: list[tuple[str, object]] | None = None
) -> tuple[Counter[str], States]:
    """Call RunFunction for ``seconds`` on one channel; (outcomes, its connectivity states)."""
    req = gen.converged_request("external-eks", 3).SerializeToString()
    states = States()
    ch = srv.aio_channel(options) if isinstance(srv, Server) else grpc.aio.insecure_channel(srv, options=options or [])
    codes: Counter[str] = Counter()
    async with ch:
        await asyncio.wait_for(ch.channel_ready(), 20)
        watcher = asyncio.ensure_future(states.watch(ch))
        rpc = ch.unary_unary(gen.RUN_FUNCTION)
        end = time.monotonic() + seconds

        async def worker() -> None:
            while time.monotonic() < end:
                try:
                    await rpc(req, timeout=20)
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as err:
                    codes[err.code().name] += 1
                await asyncio.sleep(0.005)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        watcher.cancel()
    return codes, states


@pytest.mark.parametrize("mtls", [False, True], ids=["insecure", "mtls"])
def test_a_busy_channel_reconnects_once_per_age_and_no_call_fails(mtls: bool, tls: TLS) -> None:
    seconds = 4.5
    with serve(*AGE, tls=tls if mtls else None, health=False) as srv:
        codes, states = asyncio.run(call_for(srv, seconds))
    gen.figure("connection age", "calls", sum(codes.values()))
    gen.figure("connection age", "reconnects", states.reconnects())
    ready = [t for t, s in states.seen if s == "READY"]
    lifetimes = [round(b - a, 2) for a, b in itertools.pairwise(ready)]
    print({"mtls": mtls, "calls": dict(codes), "reconnects": states.reconnects(), "lifetimes": lifetimes, "seen": [s for _, s in states.seen]})
    assert set(codes) == {"OK"}, codes
    # Age 1 s with grpc's +-10% jitter: every connection ends within ~1.1 s (+ reconnect).
    assert states.reconnects() >= int(seconds / 1.5), states.seen
    assert lifetimes and max(lifetimes) < 1.5, lifetimes
    # A GOAWAY leaves the channel IDLE (then CONNECTING and READY at once: the watcher may see
    # either, or READY again when both passed between two of its reads, as CI saw once on a busy
    # machine); a broken connection would show TRANSIENT_FAILURE, which lasts grpc's reconnect
    # backoff (1 s at first), far longer than the watcher can miss.
    assert set(states.left_ready()) <= {"IDLE", "CONNECTING", "READY"}, states.seen
    assert "TRANSIENT_FAILURE" not in {s for _, s in states.seen}, states.seen


def test_without_an_age_the_connection_lives_on() -> None:
    """The control: same load, no age, no reconnect (what Crossplane sees today)."""
    with serve("--max-connection-age", "0", health=False) as srv:
        codes, states = asyncio.run(call_for(srv, 2.5))
    assert set(codes) == {"OK"} and states.reconnects() == 0, states.seen


# --- keepalive -------------------------------------------------------------------------


def pinging(ping_ms: int) -> list[tuple[str, object]]:
    """Client options: keepalive pings every ``ping_ms`` (1 s at least), with or without calls."""
    return [
        ("grpc.keepalive_time_ms", ping_ms),
        ("grpc.keepalive_timeout_ms", 5000),
        ("grpc.keepalive_permit_without_calls", 1),
        # grpc core clients stop after 2 pings without data unless told otherwise (grpc-go
        # has no such cap).
        ("grpc.http2.max_pings_without_data", 0),
    ]


async def idle_for(srv: Server, seconds: float, options: list[tuple[str, object]]) -> States:
    """One call, then nothing but keepalive pings for ``seconds``."""
    states = States()
    req = gen.converged_request("external-eks", 3).SerializeToString()
    async with srv.aio_channel(options) as ch:
        await ch.unary_unary(gen.RUN_FUNCTION)(req, timeout=20)
        watcher = asyncio.ensure_future(states.watch(ch))
        await asyncio.sleep(seconds)
        watcher.cancel()
    return states


def pings(log: str) -> list[int]:
    """Strike count the server noted at each ping it received (GRPC_TRACE=http_keepalive)."""
    return [int(m.group(1)) for m in re.finditer(r"received ping \d+: .*? ping_strikes=(\d+)", log)]


def keepalive(seconds: float, options: list[tuple[str, object]], *args: str) -> tuple[States, list[int]]:
    args = args or ("--keepalive-min-ping-interval", "1s")
    with serve("--max-connection-age", "0", *args, health=False, env=KEEPALIVE_TRACE) as srv:
        states = asyncio.run(idle_for(srv, seconds, options))
        time.sleep(0.2)
        return states, pings(srv.log())


def test_idle_pings_at_twice_the_minimum_are_never_sent_away() -> None:
    states, strikes = keepalive(7.0, pinging(2000))
    gen.figure("keepalive", "idle pings accepted", len(strikes))
    print({"pings": len(strikes), "strikes": strikes, "states": states.seen})
    assert len(strikes) >= 3, strikes  # the client did ping, with no call in flight
    assert set(strikes) == {0}, strikes
    assert states.seen == [], states.seen  # never left READY


def test_pings_with_calls_in_flight_are_never_sent_away() -> None:
    with serve("--max-connection-age", "0", "--keepalive-min-ping-interval", "1s", health=False, env=KEEPALIVE_TRACE) as srv:
        codes, states = asyncio.run(call_for(srv, 5.0, concurrency=2, options=pinging(2000)))
        time.sleep(0.2)
        strikes = pings(srv.log())
    assert set(codes) == {"OK"} and states.seen == [], (codes, states.seen)
    assert len(strikes) >= 2 and set(strikes) == {0}, strikes


def test_pinging_faster_than_allowed_is_sent_away() -> None:
    """The policy bites: pings every 1 s against a 5 s minimum end the connection."""
    states, strikes = keepalive(4.5, pinging(1000), "--keepalive-min-ping-interval", "5s")
    assert max(strikes) >= 1, strikes
    assert states.seen and states.seen[0][1] != "READY", "the server never sent the client away"


def test_idle_pings_need_permit_without_calls() -> None:
    """grpc's default (no pings without calls) would send Crossplane's idle pings away."""
    states, strikes = keepalive(
        7.0, pinging(2000), "--keepalive-min-ping-interval", "1s", "--no-keepalive-permit-without-calls"
    )
    assert max(strikes) >= 1, strikes
    assert states.seen and states.seen[0][1] != "READY", "idle pings were accepted without permit"


# --- replicas ---------------------------------------------------------------------------


class Zone(BaseResolver):
    """A DNS zone the test edits: one name, the replicas' A records (TTL 0)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ips: list[str] = []
        self.lock = threading.Lock()
        self.queries = 0

    def resolve(self, request, handler):  # type: ignore[no-untyped-def]
        reply = request.reply()
        q = request.q
        if str(q.qname).rstrip(".") == self.name and QTYPE[q.qtype] == "A":
            with self.lock:
                self.queries += 1
                for ip in self.ips:
                    reply.add_answer(RR(q.qname, QTYPE.A, rdata=A(ip), ttl=0))
        return reply


@contextlib.contextmanager
def dns(zone: Zone) -> Iterator[int]:
    """Serve ``zone`` on a UDP port of 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = DNSServer(zone, port=port, address="127.0.0.1", logger=_Quiet())
    server.start_thread()
    try:
        yield port
    finally:
        server.stop()
        server.server.server_close()


class _Quiet:
    def __getattr__(self, _: str):  # type: ignore[no-untyped-def]
        return lambda *a, **k: None


def common_port(ips: list[str]) -> int:
    """A port free on every one of ``ips``."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ips[0], 0))
            port = s.getsockname()[1]
        try:
            for ip in ips[1:]:
                with socket.socket() as s:
                    s.bind((ip, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no common free port")


def served_calls(srv: Server) -> float:
    return value(samples(srv.scrape()), f"{P}_run_function_seconds_count", result="ok")


def replicas(age: list[str], before_s: float, after_s: float) -> tuple[dict[str, float], dict[str, float], Counter[str], int]:
    """Replicas .1 and .2, then .3 mid-run; calls per replica before and after it joined."""
    ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    port = common_port(ips)
    zone = Zone("replicas.test")
    with contextlib.ExitStack() as stack:
        dns_port = stack.enter_context(dns(zone))
        srvs = {ip: stack.enter_context(serve(*age, host=ip, port=port, metrics=True, health=False)) for ip in ips[:2]}
        zone.ips = ips[:2]
        target = f"dns://127.0.0.1:{dns_port}/replicas.test:{port}"
        options = [
            ("grpc.service_config", '{"loadBalancingConfig": [{"round_robin": {}}]}'),
            ("grpc.dns_min_time_between_resolutions_ms", 500),
        ]

        async def run() -> tuple[dict[str, float], dict[str, float], Counter[str]]:
            codes: Counter[str] = Counter()

            async def phase(seconds: float) -> None:
                got, _ = await call_for(target, seconds, options=options)
                codes.update(got)

            task = asyncio.ensure_future(phase(before_s + after_s))
            await asyncio.sleep(before_s)
            # A third replica starts (a scale-up, a rollout) and the Service's DNS lists it.
            third = await asyncio.to_thread(stack.enter_context, serve(*age, host=ips[2], port=port, metrics=True, health=False))
            srvs[ips[2]] = third
            zone.ips = ips[:]
            at_join = {ip: served_calls(s) for ip, s in srvs.items()}
            await task
            end = {ip: served_calls(s) for ip, s in srvs.items()}
            return at_join, {ip: end[ip] - at_join[ip] for ip in ips}, codes

        at_join, after, codes = asyncio.run(run())
        return at_join, after, codes, zone.queries


def test_a_replica_started_mid_run_gets_calls_once_connections_age() -> None:
    at_join, after, codes, queries = replicas(["--max-connection-age", "2s", "--max-connection-age-grace", "5s"], 2.0, 6.0)
    share = after["127.0.0.3"] / sum(after.values())
    gen.figure("replicas", "calls to the new replica", int(after["127.0.0.3"]))
    print({"before the join": at_join, "after the join": after, "new replica's share": round(share, 3), "codes": dict(codes), "DNS queries": queries})
    assert set(codes) == {"OK"}, codes
    assert at_join["127.0.0.1"] > 0 and at_join["127.0.0.2"] > 0  # round robin over both
    assert share > 0.15, after  # a third of the calls once every connection has aged


def test_without_an_age_a_new_replica_gets_nothing() -> None:
    """The control (crossplane#7585): the client never re-resolves, the new replica idles."""
    _, after, codes, _ = replicas(["--max-connection-age", "0"], 2.0, 4.0)
    assert set(codes) == {"OK"}, codes
    assert after["127.0.0.3"] == 0, after
    assert after["127.0.0.1"] > 0 and after["127.0.0.2"] > 0


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLS:
    from tests.test_serve import make_tls

    return make_tls(tmp_path_factory.mktemp("tls"))
