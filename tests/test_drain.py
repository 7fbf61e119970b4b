"""SIGTERM mid-burst: every call received is answered, later ones are refused before they start.

Through the real console script, at concurrency 1, 64 and 256 on one connection (as
Crossplane keeps), insecure and mTLS. Each call carries a tag the function logs when it
runs (the XR's status is cleared, so every call reports plugin transitions), so the log
says exactly which calls the function started. Required of every burst:

- no call ends CANCELLED, and every call ends OK or UNAVAILABLE;
- the function started exactly the calls answered OK (UNAVAILABLE = refused before it
  started: safe to retry);
- every call sent well before the drain counted what grpc core held (``received_margin``
  before ``counted_at``, which the server logs on the monotonic clock both processes read)
  is answered OK, and the client saw at least as many OK answers as the server counted;
- once a call has been refused, every call sent after it is refused too;
- the process exits 0 within the drain grace.

The client's clock says little of when the server received a call: a call's bytes leave once
the client's event loop gets to it, later the more calls it runs at once, and under load the
server reads the signal late. So "received" is judged against the server's moment, with a
margin that grows with the concurrency. The drain may run a few calls that came after it
counted (the count is channelz's and seems to include calls still finishing: one sent 1.1 s
after it was answered once), never one sent after a refusal.

``tests/soak/test_soak.py`` repeats the bursts many times (``SOAK_DRAINS``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
import pytest

from tests import strategies as gen
from tests.test_serve import TLS, Server, serve

GRACE_S = 15.0
# The most calls a burst sends past its own while it waits for the first refusal.
MORE_BEFORE_REFUSAL = 2000


def received_margin(concurrency: int) -> float:
    """How long before the drain's count a call was sent for it to have reached the server:
    50 ms on loopback, plus a millisecond per concurrent call for the client's event loop."""
    return 0.05 + concurrency / 1000


@dataclass
class Outcome:
    sent: float
    done: float
    code: str


@dataclass
class Burst:
    """``calls`` calls at ``concurrency`` on one connection, SIGTERM once some are answered."""

    srv: Server
    calls: int
    concurrency: int
    junk: int = 1500
    # Calls to go on sending once the first refusal came back (at most MORE_BEFORE_REFUSAL
    # more until it does): how many calls are sent after the drain refuses must not depend on
    # how fast this machine is (on a busy one, the ``calls`` had all gone out before it).
    after_refusal: int = 0
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    t_sig: float = 0.0
    exited_at: float = 0.0
    log: str = ""

    async def run_with_sigterm_after(self, answered: int) -> tuple[float, list[float]]:
        """Run the burst; SIGTERM after ``answered`` OK answers (and 0.1 s). (SIGTERM time, OK times)."""
        total = self.calls + (MORE_BEFORE_REFUSAL if self.after_refusal else 0)
        payload = gen.tagged_request(self.junk)
        next_call = 0
        ok_times: list[float] = []
        enough = asyncio.Event()
        refused_at: int | None = None  # next_call when the first refusal came back

        def more() -> bool:
            if next_call < self.calls:
                return True
            if next_call >= total:
                return False
            return refused_at is None or next_call < refused_at + self.after_refusal
        async with self.srv.aio_channel() as ch:
            await asyncio.wait_for(ch.channel_ready(), 20)
            rpc = ch.unary_unary(gen.RUN_FUNCTION)

            async def worker() -> None:
                nonlocal next_call, refused_at
                while more():
                    i = next_call
                    next_call += 1
                    sent = time.monotonic()
                    try:
                        await rpc(payload(i), timeout=60)
                        code = "OK"
                        ok_times.append(time.monotonic())
                        if len(ok_times) >= answered:
                            enough.set()
                    except grpc.aio.AioRpcError as err:
                        code = err.code().name
                        if code == "UNAVAILABLE" and refused_at is None:
                            refused_at = next_call
                    self.outcomes[i] = Outcome(sent, time.monotonic(), code)

            started = time.monotonic()
            workers = [asyncio.ensure_future(worker()) for _ in range(self.concurrency)]
            await asyncio.wait_for(enough.wait(), 60)
            # Some calls sent well before the signal, so the check of "received, hence
            # answered" is never vacuous.
            await asyncio.sleep(max(0.0, started + 2 * received_margin(self.concurrency) - time.monotonic()))
            self.t_sig = self.srv.terminate()
            await asyncio.gather(*workers)
        await asyncio.to_thread(self.srv.proc.wait, GRACE_S + 15)
        self.exited_at = time.monotonic()
        self.log = self.srv.log()
        return self.t_sig, ok_times

    def started(self) -> set[int]:
        """Calls the function ran (their tag is in the server's log)."""
        out = set()
        for line in self.log.splitlines():
            try:
                tag = json.loads(line).get("tag", "")
            except (ValueError, AttributeError):
                continue
            if tag.startswith("call-"):
                out.add(int(tag.removeprefix("call-")))
        return out

    def drained(self) -> dict[str, object]:
        """The server's own figures from its 'drained' log line."""
        for line in self.log.splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("msg") == "drained":
                return d
        return {}

    def check(self) -> Counter[str]:
        """Assert what a drain must guarantee; return the outcome counts."""
        codes = Counter(o.code for o in self.outcomes.values())
        assert len(self.outcomes) >= self.calls
        assert set(self.outcomes) == set(range(len(self.outcomes))), "a call sent got no outcome"
        assert codes["CANCELLED"] == 0, codes
        assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
        ok = {i for i, o in self.outcomes.items() if o.code == "OK"}
        started = self.started()
        assert started == ok, {"started, not OK": sorted(started - ok), "OK, not started": sorted(ok - started)}
        assert any(o.sent < self.t_sig for o in self.outcomes.values()), "no call was sent before the SIGTERM"
        drained = self.drained()
        held, counted_at = drained["calls_held"], drained["counted_at"]
        assert isinstance(held, int) and isinstance(counted_at, float), drained
        assert len(ok) >= held, (len(ok), drained)
        early = {i for i, o in self.outcomes.items() if o.sent < counted_at - received_margin(self.concurrency)}
        assert early, "no call was sent well before the drain counted"
        assert early <= ok, {i: (self.outcomes[i].code, counted_at - self.outcomes[i].sent) for i in sorted(early - ok)}
        refusals = [o.done for o in self.outcomes.values() if o.code == "UNAVAILABLE"]
        if refusals:
            after = {i for i, o in self.outcomes.items() if o.sent > min(refusals)}
            assert not after & ok, sorted(after & ok)
        assert self.srv.proc.returncode == 0, self.log[-2000:]
        assert self.exited_at - self.t_sig < GRACE_S, self.exited_at - self.t_sig
        return codes

    def figures(self) -> dict[str, object]:
        codes = Counter(o.code for o in self.outcomes.values())
        return {
            "calls": self.calls,
            "concurrency": self.concurrency,
            "sent before SIGTERM": sum(o.sent < self.t_sig for o in self.outcomes.values()),
            "answered": codes["OK"],
            "refused": codes["UNAVAILABLE"],
            "cancelled": codes["CANCELLED"],
            "exit s": round(self.exited_at - self.t_sig, 3),
            "server": {k: self.drained().get(k) for k in ("calls_held", "answered", "refused", "seconds")},
            "counted s after SIGTERM": round(float(self.drained().get("counted_at", 0.0)) - self.t_sig, 3),
        }


def drain_burst(concurrency: int, calls: int, *, tls: TLS | None = None, answered: int = 10) -> Burst:
    """One server, one burst, SIGTERM after ``answered`` answers; checked."""
    with serve("--drain-grace", f"{GRACE_S}s", tls=tls, health=False) as srv:
        burst = Burst(srv, calls=calls, concurrency=concurrency)
        asyncio.run(burst.run_with_sigterm_after(answered))
        codes = burst.check()
    gen.figure("drain", f"c={concurrency} calls", calls)
    for k, v in codes.items():
        gen.figure("drain", f"c={concurrency} {k}", v)
    print(json.dumps(burst.figures()))
    return burst


# Enough calls that some are still to come when SIGTERM does (2 x received_margin in).
BURSTS = [(1, 40), (64, 300), (256, 800)]


@pytest.mark.parametrize(("concurrency", "calls"), BURSTS)
def test_sigterm_mid_burst_answers_what_was_received(concurrency: int, calls: int) -> None:
    burst = drain_burst(concurrency, calls)
    if concurrency > 1:
        # Not vacuous: the server held calls when SIGTERM came, and answered them.
        held = burst.drained()["calls_held"]
        assert isinstance(held, int) and held > 1
        sent_before = sum(o.sent < burst.t_sig for o in burst.outcomes.values())
        assert sum(o.code == "OK" for o in burst.outcomes.values()) >= sent_before - concurrency // 8


def test_sigterm_mid_burst_with_mtls(tls: TLS) -> None:
    drain_burst(64, 300, tls=tls)


def test_calls_after_the_drain_are_refused_not_run() -> None:
    """A call made once the drain has answered what it held is UNAVAILABLE, and never runs."""
    with serve("--drain-grace", f"{GRACE_S}s", health=False) as srv:
        burst = Burst(srv, calls=200, concurrency=64, after_refusal=20)
        asyncio.run(burst.run_with_sigterm_after(10))
        burst.check()
        refused = [i for i, o in burst.outcomes.items() if o.code == "UNAVAILABLE"]
        first = min(burst.outcomes[i].done for i in refused) if refused else burst.t_sig
        late = [i for i, o in burst.outcomes.items() if o.sent > first]
    assert refused, burst.figures()
    assert late, burst.figures()
    assert all(burst.outcomes[i].code == "UNAVAILABLE" for i in late)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLS:
    from tests.test_serve import make_tls

    return make_tls(tmp_path_factory.mktemp("tls"))
