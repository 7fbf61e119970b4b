"""The real server under hostile and heavy traffic (`function-cluster-plugin serve` subprocess).

- malformed, truncated and bit-flipped protobuf: a clean gRPC status (or an answer, when
  the bytes still parse), never a dead or hung server;
- messages over --max-recv-message-size: RESOURCE_EXHAUSTED, the server carries on;
- thousands of concurrent calls with short deadlines: OK or DEADLINE_EXCEEDED only, every
  OK answer byte-identical to the in-process one;
- SIGTERM while busy: every call the server had received is answered, none is cancelled,
  a call made after the drain is refused, the process exits 0 (tests/test_drain.py has the
  bursts at concurrency 1, 64 and 256).

Sizes are bounded by constants; ``tests/soak/test_soak.py`` runs the same with more.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from tests import strategies as gen

CLEAN_ERRORS = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT}
MAX_RECV_MB = 1
CONCURRENT_CALLS = 2000
CONCURRENCY = 64


@pytest.fixture(scope="module")
def server() -> Iterator[gen.Served]:
    with gen.serve("--insecure", "--max-recv-message-size", str(MAX_RECV_MB)) as served:
        yield served


@pytest.fixture(scope="module")
def good() -> fnv1.RunFunctionRequest:
    return gen.converged_request("selfhosted-full", 30)  # settled: its answer does not depend on the clock


def _raw(channel: grpc.Channel, method: str = gen.RUN_FUNCTION) -> grpc.UnaryUnaryMultiCallable:
    # No (de)serializers: bytes in, bytes out.
    return channel.unary_unary(method, request_serializer=None, response_deserializer=None)


def _answer_matches(raw: bytes, req_bytes: bytes) -> bool:
    got = fnv1.RunFunctionResponse.FromString(raw)
    want = fn.run(fnv1.RunFunctionRequest.FromString(req_bytes))
    return got.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


def _assert_serving(served: gen.Served, good: fnv1.RunFunctionRequest) -> None:
    assert served.alive(), served.log()[-3000:]
    with grpc.insecure_channel(served.address) as ch:
        raw = _raw(ch)(good.SerializeToString(), timeout=10)
    assert _answer_matches(raw, good.SerializeToString())


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def nested_input(depth: int) -> bytes:
    """A request whose step input nests Structs ``depth`` deep: a recursion bomb for parsers."""
    s = b""
    for _ in range(depth):
        value = b"\x2a" + _varint(len(s)) + s  # Value.struct_value (5)
        entry = b"\x0a\x01a\x12" + _varint(len(value)) + value  # map entry {"a": value}
        s = b"\x0a" + _varint(len(entry)) + entry  # Struct.fields (1)
    return b"\x22" + _varint(len(s)) + s  # RunFunctionRequest.input (4)


def malformed_payloads(good: bytes, rng: random.Random, n_random: int) -> Iterator[tuple[str, bytes]]:
    """Random bytes, truncations, bit flips and hand-made wire-format traps."""
    for i in range(n_random):
        yield f"random-{i}", rng.randbytes(rng.choice([1, 2, 7, 64, 500, 4000]))
    for cut in sorted({rng.randrange(1, len(good)) for _ in range(n_random)} | {1, 2, 3, len(good) - 1}):
        yield f"truncated-{cut}", good[:cut]
    for i in range(n_random):
        flipped = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            pos = rng.randrange(len(flipped))
            flipped[pos] ^= 1 << rng.randrange(8)
        yield f"bitflip-{i}", bytes(flipped)
    yield "bad-wire-type", b"\x0f\x01"
    yield "huge-length", b"\x12\xff\xff\xff\xff\x0f"
    yield "length-past-end", b"\x12\x10abc"
    yield "unterminated-varint", b"\x08" + b"\xff" * 11
    yield "invalid-utf8-tag", b"\x0a\x04\x0a\x02\xff\xfe"  # meta.tag = b"\xff\xfe"
    yield "group-start", b"\x0b"
    yield "nested-200", nested_input(200)
    yield "unknown-field-only", b"\xf8\x07\x01"
    yield "empty", b""


def call_each(served: gen.Served, payloads: Iterator[tuple[str, bytes]]) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    with grpc.insecure_channel(served.address) as ch:
        call = _raw(ch)
        for label, payload in payloads:
            t = time.monotonic()
            try:
                raw = call(payload, timeout=10)
            except grpc.RpcError as err:
                code = err.code()  # type: ignore[attr-defined]
                assert code in CLEAN_ERRORS, (label, code, err.details())  # type: ignore[attr-defined]
                outcomes[code.name] += 1
            else:
                # The bytes happened to parse: the function answered them like any request.
                rsp = fnv1.RunFunctionResponse.FromString(raw)
                kind = "fatal" if gen.fatal_results(rsp) else "answered"
                outcomes[kind] += 1
                internal = [r for r in rsp.results if r.reason == "InternalError"]
                outcomes["internal-error"] += len(internal)
            assert time.monotonic() - t < 10, label
    return outcomes


def test_malformed_protobuf_gets_a_clean_error(server: gen.Served, good: fnv1.RunFunctionRequest) -> None:
    rng = random.Random(1)
    outcomes = call_each(server, malformed_payloads(good.SerializeToString(), rng, 40))
    gen.figure("grpc", "malformed payloads", sum(v for k, v in outcomes.items() if k != "internal-error"))
    assert outcomes["UNKNOWN"] + outcomes["INTERNAL"] + outcomes["INVALID_ARGUMENT"] > 40, outcomes
    _assert_serving(server, good)


def test_parseable_garbage_never_reaches_an_internal_error(server: gen.Served, good: fnv1.RunFunctionRequest) -> None:
    """Truncations that still parse are odd but valid requests: answered, never a crash."""
    data = good.SerializeToString()
    outcomes = call_each(server, ((f"cut-{c}", data[:c]) for c in range(0, len(data), max(1, len(data) // 60))))
    assert outcomes["internal-error"] == 0, outcomes
    _assert_serving(server, good)


def test_oversized_messages_are_refused(server: gen.Served, good: fnv1.RunFunctionRequest) -> None:
    limit = MAX_RECV_MB * 1024 * 1024
    big = fnv1.RunFunctionRequest()
    big.CopyFrom(good)
    big.observed.composite.resource.fields["metadata"].struct_value.fields["annotations"].struct_value.fields[
        "padding"
    ].string_value = "x" * (limit + 1000)
    just_under = fnv1.RunFunctionRequest()
    just_under.CopyFrom(good)
    pad = limit - len(good.SerializeToString()) - 4096
    just_under.observed.composite.resource.fields["metadata"].struct_value.fields[
        "annotations"
    ].struct_value.fields["padding"].string_value = "y" * pad
    assert len(just_under.SerializeToString()) < limit < len(big.SerializeToString())
    with grpc.insecure_channel(server.address) as ch:
        call = _raw(ch)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as err:
                call(big.SerializeToString(), timeout=10)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
            raw = call(just_under.SerializeToString(), timeout=10)
            assert _answer_matches(raw, just_under.SerializeToString())
    gen.figure("grpc", "oversized refused", 3)
    _assert_serving(server, good)


async def _storm(address: str, requests: list[bytes], calls: int, concurrency: int, seed: int) -> tuple[Counter[str], int]:
    """``calls`` calls, ``concurrency`` in flight, random short deadlines; (codes, mismatches)."""
    rng = random.Random(seed)
    want = [fn.run(fnv1.RunFunctionRequest.FromString(r)).SerializeToString(deterministic=True) for r in requests]
    codes: Counter[str] = Counter()
    mismatches = 0
    sem = asyncio.Semaphore(concurrency)
    async with grpc.aio.insecure_channel(address) as ch:
        methods = [ch.unary_unary(gen.RUN_FUNCTION), ch.unary_unary(gen.RUN_FUNCTION_BETA)]

        async def one(i: int, deadline_s: float, method: int) -> None:
            nonlocal mismatches
            async with sem:
                try:
                    raw = await methods[method](requests[i % len(requests)], timeout=deadline_s)
                except grpc.aio.AioRpcError as err:
                    codes[err.code().name] += 1
                    return
                codes["OK"] += 1
                got = fnv1.RunFunctionResponse.FromString(raw).SerializeToString(deterministic=True)
                if method == 0 and got != want[i % len(requests)]:
                    mismatches += 1

        plan = [(i, rng.choice([0.005, 0.02, 0.1, 0.5, 2.0]), int(rng.random() < 0.1)) for i in range(calls)]
        await asyncio.gather(*(one(*p) for p in plan))
    return codes, mismatches


def storm(served: gen.Served, calls: int, concurrency: int, seed: int = 7) -> Counter[str]:
    """Run the storm against ``served``; assert only OK and DEADLINE_EXCEEDED, answers exact."""
    requests = [
        # Converged, the VPC CNI's IRSA restart soaked: answered alike whatever the clock says
        # (a call that starts an upgrade records when, and the answers are compared exactly).
        gen.converged_request("selfhosted-full", 30).SerializeToString(),
        gen.converged_request("external-eks", 3).SerializeToString(),
        gen.converged_request("calico-legacy-claim-v1", 5).SerializeToString(),
        fnv1.RunFunctionRequest().SerializeToString(),  # FATAL: no clusterName
    ]
    for r in requests:
        req = fnv1.RunFunctionRequest.FromString(r)
        assert fn.run(req, now=0) == fn.run(req, now=10**9), "an answer that depends on the clock"
    t = time.monotonic()
    codes, mismatches = asyncio.run(_storm(served.address, requests, calls, concurrency, seed))
    assert set(codes) <= {"OK", "DEADLINE_EXCEEDED"}, codes
    assert sum(codes.values()) == calls
    assert codes["OK"] > 0
    assert mismatches == 0
    gen.figure("grpc", "concurrent calls", calls)
    gen.figure("grpc", "concurrent OK", codes["OK"])
    gen.figure("grpc", "concurrent DEADLINE_EXCEEDED", codes["DEADLINE_EXCEEDED"])
    gen.figure("grpc", "storm seconds", round(time.monotonic() - t))
    return codes


def test_thousands_of_concurrent_calls_with_deadlines(server: gen.Served, good: fnv1.RunFunctionRequest) -> None:
    storm(server, CONCURRENT_CALLS, CONCURRENCY)
    _assert_serving(server, good)


def sigterm_while_busy(calls: int = 64, junk: int = 1500) -> dict[str, int]:
    """SIGTERM a busy server; check drain, refusal and exit. Returns the outcome counts."""
    # Each call takes a while (many unrelated observed resources) and logs its tag.
    payloads = gen.tagged_requests(calls, junk)

    with gen.serve("--insecure") as served:

        async def run() -> tuple[dict[int, str], str, float, float]:
            done: dict[int, str] = {}
            two_answered, shutting_down = asyncio.Event(), asyncio.Event()
            async with grpc.aio.insecure_channel(served.address) as ch:
                call = ch.unary_unary(gen.RUN_FUNCTION)

                async def one(i: int) -> None:
                    try:
                        await call(payloads[i], timeout=30)
                        done[i] = "OK"
                    except grpc.aio.AioRpcError as err:
                        done[i] = err.code().name
                        shutting_down.set()
                    if len(done) >= 2:
                        two_answered.set()

                tasks = [asyncio.ensure_future(one(i)) for i in range(calls)]
                await asyncio.wait_for(two_answered.wait(), 30)
                sent = time.monotonic()
                served.proc.send_signal(signal.SIGTERM)
                # The server drains what it received (all of these), then refuses new calls.
                await asyncio.wait_for(asyncio.gather(*tasks), 30)
                t = time.monotonic()
                try:
                    await call(payloads[0], timeout=3)
                    late = "OK"
                except grpc.aio.AioRpcError as err:
                    late = err.code().name
                refused_in = time.monotonic() - t
                await asyncio.gather(*tasks)
            await asyncio.to_thread(served.proc.wait, 15)
            return done, late, refused_in, time.monotonic() - sent

        done, late, refused_in, exited_in = asyncio.run(run())
        log = served.log()
        returncode = served.proc.returncode

    started = set()
    for line in log.splitlines():
        try:
            tag = json.loads(line).get("tag", "")
        except (ValueError, AttributeError):
            continue
        if tag.startswith("call-"):
            started.add(int(tag.removeprefix("call-")))
    outcomes = Counter(done.values())
    assert returncode == 0, (returncode, log[-2000:])
    assert exited_in < 5 + 3, exited_in
    # Every call the function started is answered; calls still queued end cleanly.
    assert started, "no call had started before SIGTERM"
    assert all(done[i] == "OK" for i in started), {i: done[i] for i in started if done[i] != "OK"}
    assert set(outcomes) <= {"OK", "UNAVAILABLE"}, outcomes
    # A call made after SIGTERM is refused, quickly.
    assert late == "UNAVAILABLE", late
    assert refused_in < 3.5
    gen.figure("grpc", "sigterm calls in flight", calls)
    gen.figure("grpc", "sigterm answered", outcomes["OK"])
    return dict(outcomes)


def test_sigterm_while_busy() -> None:
    sigterm_while_busy()


def test_nan_and_infinity_in_observed_numbers_are_answered(server: gen.Served, good: fnv1.RunFunctionRequest) -> None:
    """Non-JSON numbers (only a hostile client can send them) are answered, not a dead server."""
    req = fnv1.RunFunctionRequest()
    req.CopyFrom(good)
    for obj in req.required_resources["infrastructure"].items:
        sgs = obj.resource.fields["status"].struct_value.fields["networkStatus"].struct_value.fields["securityGroups"]
        for v in sgs.struct_value.fields.values():
            for rule in v.struct_value.fields["ingressRule"].list_value.values:
                rule.struct_value.fields["fromPort"].number_value = float("nan")
                rule.struct_value.fields["toPort"].number_value = float("inf")
    with grpc.insecure_channel(server.address) as ch:
        raw = _raw(ch)(req.SerializeToString(), timeout=10)
    fnv1.RunFunctionResponse.FromString(raw)
    _assert_serving(server, good)


def test_recursion_bomb_is_built_right() -> None:
    """The hand-built wire bytes above really are a request with a nested input."""
    assert fnv1.RunFunctionRequest.DESCRIPTOR.fields_by_name["input"].number == 4
    req = fnv1.RunFunctionRequest.FromString(nested_input(20))
    depth, node = 0, req.input
    while "a" in node.fields:
        node = node.fields["a"].struct_value
        depth += 1
    assert depth == 20
