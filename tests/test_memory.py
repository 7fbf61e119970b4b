"""`serve`'s memory under concurrent calls: what grpc holds per call, and peak RSS.

The served process is the real console script, started as ``make bench`` starts it
(``benchmarks.loopback.Server``: the packages the image leaves out hidden), loaded by
the benchmark's own load generator at concurrency 8, as Crossplane multiplexes its calls
over one connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from benchmarks import loopback, workload
from function import fn, server

MIB = 1024


class _Registry:
    """Stands in for a grpc server: keeps the method handlers ``add_function`` registers."""

    def __init__(self) -> None:
        self.handlers: dict[str, dict[str, Any]] = {}

    def add_generic_rpc_handlers(self, _handlers: Any) -> None:
        pass

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.handlers[service] = handlers


def test_grpc_is_handed_bytes_never_a_decoded_message() -> None:
    """grpc's aio server keeps what its deserializer returned until the answer is sent.

    So the function decodes and encodes inside the call, for v1 and v1beta1 alike, and
    answers the same as ``fn.run``.
    """
    registry = _Registry()
    server.add_function(registry, fn.FunctionRunner(), server.Gate())  # type: ignore[arg-type]
    assert set(registry.handlers) == set(server.SERVICES)
    req = workload.build(resource_counts=()).full.final
    want = fn.run(req)
    for service, handlers in registry.handlers.items():
        handler = handlers["RunFunction"]
        assert handler.request_deserializer is None, service
        assert handler.response_serializer is None, service
        got = asyncio.run(handler.unary_unary(req.SerializeToString(), None))
        assert isinstance(got, bytes), service
        assert fnv1.RunFunctionResponse.FromString(got) == want, service


@dataclass(frozen=True)
class Load:
    """A fresh server's memory (KiB) at start and after the load, and its mappings."""

    start: int
    end: int
    peak: int
    maps: str


def _load(req: fnv1.RunFunctionRequest, calls: int, tmp: Path) -> Load:
    srv = loopback.Server("serve", loopback.function_command(), tmp / "serve.log")
    srv.start()
    try:
        result = loopback.load(
            srv,
            req.SerializeToString(),
            expected_len=len(fn.run(req).SerializeToString()),
            concurrency=8,
            calls=calls,
            warmup=0,
        )
        assert result["errors"] == {}, result["errors"]  # every answer as long as in process
        mem = loopback.proc_memory_kib(srv.pid)
        maps = Path(f"/proc/{srv.pid}/maps").read_text()
    finally:
        assert srv.stop() == 0, (tmp / "serve.log").read_text()
    return Load(srv.memory_at_start["VmRSS"], mem["VmRSS"], mem["VmHWM"], maps)


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Load]:
    """1,000 calls of a 300-resource request (0.9 MB; ~5 MB once decoded)."""
    req = workload.build(resource_counts=(300,)).by_resources["5-plugins"][300]
    yield _load(req, 1000, tmp_path_factory.mktemp("large"))


def test_peak_rss_with_eight_large_requests_in_flight(large: Load) -> None:
    """Eight requests in flight cost their bytes, not eight decoded copies.

    Measured growth from start to peak: 21-25 MiB now; 45-56 MiB while grpc held each
    call's decoded request until its answer was sent.
    """
    growth = (large.peak - large.start) / MIB
    assert growth < 32, f"peak {large.peak / MIB:.1f} MiB, {growth:.1f} MiB over the start"
