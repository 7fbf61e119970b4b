"""The longer runs of `make soak` (SOAK=1; see tests/soak/conftest.py). Every loop is bounded.

Sizes (environment variables, defaults in brackets):
- SOAK_SCHEDULES [1500]: random lifecycle fault schedules (tests/test_faults.py);
- SOAK_SECRET_SCHEDULES [150]: fault schedules on the serve path at DEBUG, checked for leaks;
- SOAK_CALLS [20000]: concurrent gRPC calls with short deadlines (64 in flight);
- SOAK_MALFORMED [600]: each of random, truncated and bit-flipped payloads;
- SOAK_SIGTERMS [8]: servers SIGTERMed while busy;
- SOAK_DRAINS [5]: rounds of SIGTERM mid-burst at concurrency 1, 64 and 256 (tests/test_drain.py);
- SOAK_AGE_SECONDS [40]: a channel calling through connection ages of 2 s (tests/test_connection_age.py);
- SOAK_PINGS [3]: keepalive pings every 60 s on an idle connection, against serve's defaults.
The property tests run beside these with HYPOTHESIS_PROFILE=soak (2000 examples where cheap).
"""

from __future__ import annotations

import logging as stdlogging
import os
import random
import time
from collections import Counter

import pytest
from crossplane.function import logging

from tests import strategies as gen
from tests import test_connection_age, test_drain, test_faults, test_grpc_robustness, test_secrets
from tests.scenarios import SCENARIOS


def _size(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def test_fault_schedules_soak() -> None:
    n = _size("SOAK_SCHEDULES", 1500)
    t = time.monotonic()
    scenarios: Counter[str] = Counter()
    flapped: set[str] = set()
    seen: set[str] = set()
    for seed in range(100_000, 100_000 + n):
        o = test_faults.play(seed)
        test_faults.record(o)
        scenarios[o.scenario] += 1
        flapped |= o.flapped
        seen |= o.nodes
    gen.figure("soak", "fault schedules", n)
    gen.figure("soak", "fault seconds", round(time.monotonic() - t))
    gen.figure("soak", "nodes never flapped", len(seen - flapped))
    assert set(scenarios) == {s.name for s in SCENARIOS}, scenarios
    assert seen - flapped == set()


def test_secret_schedules_soak(capsys: pytest.CaptureFixture[str]) -> None:
    """Random fault schedules through FunctionRunner at DEBUG, every secret injected: no leak."""
    n = _size("SOAK_SECRET_SCHEDULES", 150)
    logging.configure(logging.Level.DEBUG)
    try:
        for seed in range(200_000, 200_000 + n):
            hostile = random.Random(seed).random() < 0.5
            serving = test_secrets.Serving([], hostile=hostile)
            required: list = []

            def prepare(world, serving=serving, required=required) -> None:
                cp = world.control_plane()
                labels = cp["metadata"]["labels"]
                extra = test_secrets.cluster_secrets(labels["cluster.x-k8s.io/cluster-name"], cp["metadata"]["namespace"])
                world.required += extra
                serving.extra = [o for o in world.required if o["kind"] == "Secret"]
                required.extend(world.required)

            o = test_faults.play(seed, inner=serving, prepare=prepare)
            out = capsys.readouterr()
            texts = [*serving.texts, out.out, out.err]
            assert test_secrets.leaks(texts, required) == [], (seed, o.scenario)
            # Not vacuous: credentials always reach the function; a hostile caller sends every
            # Secret (in label mode only what Crossplane 1.x would select does).
            assert any(test_secrets.AWS_SECRET in r for r in serving.requests), seed
            if hostile:
                assert test_secrets.carried(serving.requests, required), seed
            gen.figure("soak", "secret schedules", 1)
            gen.figure("soak", "secret responses checked", len(serving.requests))
    finally:
        logging.configure(logging.Level.DISABLED)
        stdlogging.getLogger().handlers.clear()


@pytest.fixture(scope="module")
def server():
    with gen.serve("--insecure", "--max-recv-message-size", "1") as served:
        yield served


def test_grpc_storm_soak(server: gen.Served) -> None:
    n = _size("SOAK_CALLS", 20000)
    codes = test_grpc_robustness.storm(server, n, 64, seed=11)
    assert codes["OK"] > n // 20, codes
    assert server.alive()


def test_grpc_malformed_soak(server: gen.Served) -> None:
    good = gen.converged_request("selfhosted-full", 8)
    n = _size("SOAK_MALFORMED", 600)
    outcomes = test_grpc_robustness.call_each(
        server, test_grpc_robustness.malformed_payloads(good.SerializeToString(), random.Random(5), n)
    )
    for k, v in outcomes.items():
        gen.figure("soak", f"malformed {k}", v)
    assert server.alive()


def test_sigterm_soak() -> None:
    totals: Counter[str] = Counter()
    for _ in range(_size("SOAK_SIGTERMS", 8)):
        totals.update(test_grpc_robustness.sigterm_while_busy())
    gen.figure("soak", "sigterm runs", _size("SOAK_SIGTERMS", 8))
    for k, v in totals.items():
        gen.figure("soak", f"sigterm {k}", v)


def test_drain_soak() -> None:
    """SIGTERM mid-burst, many times: never a CANCELLED call, every received call answered."""
    totals: Counter[str] = Counter()
    for _ in range(_size("SOAK_DRAINS", 5)):
        for concurrency, calls in test_drain.BURSTS:
            burst = test_drain.drain_burst(concurrency, calls)
            totals.update(o.code for o in burst.outcomes.values())
    for k, v in totals.items():
        gen.figure("soak", f"drain {k}", v)
    assert totals["CANCELLED"] == 0


def test_connection_age_soak() -> None:
    """Many connection ages in a row: a reconnect per age, no failed call."""
    import asyncio

    seconds = float(_size("SOAK_AGE_SECONDS", 40))
    with test_connection_age.serve("--max-connection-age", "2s", "--max-connection-age-grace", "5s", health=False) as srv:
        codes, states = asyncio.run(test_connection_age.call_for(srv, seconds))
    gen.figure("soak", "aged connections", states.reconnects())
    assert set(codes) == {"OK"}, codes
    assert states.reconnects() >= int(seconds / 2.5), states.seen


def test_keepalive_every_60s_soak() -> None:
    """A client pinging every 60 s with no call in flight, against serve's default policy."""
    import asyncio

    pings = _size("SOAK_PINGS", 3)
    with test_connection_age.serve(health=False, env=test_connection_age.KEEPALIVE_TRACE) as srv:
        states = asyncio.run(test_connection_age.idle_for(srv, 60.0 * pings + 10, test_connection_age.pinging(60_000)))
        time.sleep(0.5)
        strikes = test_connection_age.pings(srv.log())
    gen.figure("soak", "60 s pings accepted", len(strikes))
    assert len(strikes) >= pings and set(strikes) == {0}, strikes
    assert states.seen == [], states.seen
