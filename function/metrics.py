"""Prometheus metrics of the served function (``serve --metrics-address``).

Imported only when metrics are on (prometheus_client costs ~25 ms of start-up). On the
hot path a call costs two histogram observations, one more for each message size, and
a dict write of the XR's plugin statuses; the plugin gauge is computed at scrape time
from that bounded, expiring memory (a custom collector). Labels are bounded: result,
plugin, phase, wait reason and a FATAL's field cut to its known part, never an XR's
name, namespace or uid.
"""

from __future__ import annotations

import platform
import re
import time
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from function import structs
from function.__version__ import __version__

if TYPE_CHECKING:
    from crossplane.function.proto.v1 import run_function_pb2 as fnv1

    from function.fn import Answer
    from function.plan import PluginStatus

PREFIX = "function_cluster_plugin"
RESULTS = ("ok", "fatal", "error")
# A call takes ~1-5 ms of CPU; queueing under load stretches it to tens of ms.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Up to the default 4 MiB receive limit and beyond (--max-recv-message-size).
SIZE_BUCKETS = tuple(float(1024 * 4**i) for i in range(8))  # 1 KiB .. 16 MiB
MAX_XRS = 50_000
MAX_FIELDS = 64
MAX_REASONS = 64
OTHER = "other"
FIELD_DEPTH = 3
_INDEX = re.compile(r"\[\d+\]")


def field_label(field: str) -> str:
    """A FATAL's field as a label of bounded cardinality.

    List indexes go, and the path is cut after ``values`` (what follows names keys of the
    user's Helm values) and after three segments (``spec.storage.ebs``): an unknown key
    the user made up (``spec.strage``) still shows, and ``bounded`` caps how many do.
    """
    parts = _INDEX.sub("", field).split(".")
    if "values" in parts:
        parts = parts[: parts.index("values") + 1]
    return ".".join(parts[:FIELD_DEPTH])


class Bounded:
    """Label values as they come, up to ``limit`` distinct ones; then ``other``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, value: str) -> str:
        """``value`` itself while there is room for it, else ``other``."""
        if value in self.seen:
            return value
        if len(self.seen) >= self.limit:
            return OTHER
        self.seen.add(value)
        return value


class PluginStates:
    """The plugin statuses of the last answer to each XR seen within ``ttl`` seconds.

    Keyed by the XR's uid (else namespace/name); ordered by last call, so expiry and the
    size cap drop the least recently reconciled XRs first. Written by the serving
    thread, read by the scrape thread (a snapshot under the GIL).
    """

    def __init__(
        self, ttl: float, limit: int = MAX_XRS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.limit = limit
        self.clock = clock
        self.xrs: OrderedDict[str, tuple[float, list[PluginStatus]]] = OrderedDict()

    def put(self, key: str, plugins: list[PluginStatus]) -> None:
        """Remember ``plugins`` as the XR's statuses now."""
        now = self.clock()
        xrs = self.xrs
        xrs[key] = (now, plugins)
        xrs.move_to_end(key)
        oldest = now - self.ttl
        while xrs and (len(xrs) > self.limit or next(iter(xrs.values()))[0] < oldest):
            xrs.popitem(last=False)

    def forget(self, key: str) -> None:
        """Drop the XR (its input was refused: no plugin statuses)."""
        self.xrs.pop(key, None)

    def snapshot(self) -> list[list[PluginStatus]]:
        """The statuses of every XR seen within the TTL."""
        oldest = self.clock() - self.ttl
        return [plugins for seen, plugins in list(self.xrs.values()) if seen >= oldest]


def xr_key(req: fnv1.RunFunctionRequest) -> str:
    """The XR's identity for ``PluginStates`` (never a label)."""
    xr = req.observed.composite.resource
    uid = structs.str_at(xr, "metadata", "uid")
    if uid:
        return uid
    ns = structs.str_at(xr, "metadata", "namespace")
    return f"{ns}/{structs.str_at(xr, 'metadata', 'name')}"


class _PluginCollector(Collector):
    def __init__(self, states: PluginStates) -> None:
        self.states = states
        self.reason = Bounded(MAX_REASONS)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self.states.snapshot()
        counts: Tally[tuple[str, str, str]] = Tally()
        for plugins in snapshot:
            for p in plugins:
                counts[(p.name, p.phase, self.reason(p.reason))] += 1
        family = GaugeMetricFamily(
            f"{PREFIX}_plugins",
            "Plugins of the XRs this replica answered within the metrics window, by phase "
            "(Pending, Installing, Ready, Blocked) and what they wait for (reason)",
            labels=["plugin", "phase", "reason"],
        )
        for (name, phase, reason), n in sorted(counts.items()):
            family.add_metric([name, phase, reason], n)
        yield family
        yield GaugeMetricFamily(
            f"{PREFIX}_xrs",
            "XRs this replica answered within the metrics window (their plugins are counted)",
            value=len(snapshot),
        )


class Metrics:
    """Every metric of one server, in a registry of its own."""

    def __init__(self, *, xr_ttl: float = 1800.0, clock: Callable[[], float] = time.monotonic):
        # No *_created series (the process start time says as much; half the lines otherwise).
        disable_created_metrics()
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.seconds = Histogram(
            f"{PREFIX}_run_function_seconds",
            "RunFunction calls by result (ok; fatal: the input was refused with a FATAL "
            "result naming the field; error: an internal error) and the time the function "
            "took (from the request parsed to the response built)",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._by_result = {r: self.seconds.labels(r) for r in RESULTS}
        self.request_bytes = Histogram(
            f"{PREFIX}_run_function_request_bytes",
            "Size of RunFunction requests (serialized)",
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )
        self.response_bytes = Histogram(
            f"{PREFIX}_run_function_response_bytes",
            "Size of RunFunction responses (serialized)",
            buckets=SIZE_BUCKETS,
            registry=self.registry,
        )
        self.fatals = Counter(
            f"{PREFIX}_fatal_results",
            "FATAL results by the input field they name (cut to its known part; at most "
            f"{MAX_FIELDS} distinct, then 'other')",
            ["field"],
            registry=self.registry,
        )
        self._field = Bounded(MAX_FIELDS)
        self.draining = Gauge(
            f"{PREFIX}_draining",
            "1 from SIGTERM until the server stops (health NOT_SERVING)",
            registry=self.registry,
        )
        build = Info(
            f"{PREFIX}_build", "Version of the function and what it runs on", registry=self.registry
        )
        build.info(
            {
                "version": __version__,
                "sdk": _version("crossplane-function-sdk-python"),
                "grpcio": _version("grpcio"),
                "python": platform.python_version(),
            }
        )
        self.plugins = PluginStates(xr_ttl, clock=clock)
        self.registry.register(_PluginCollector(self.plugins))

    def observe(self, req: fnv1.RunFunctionRequest, answer: Answer | None, seconds: float) -> None:
        """Record one call: ``answer`` None is an internal error."""
        if answer is None:
            self._by_result["error"].observe(seconds)
            return
        if answer.invalid_field is not None:
            self._by_result["fatal"].observe(seconds)
            self.fatals.labels(self._field(field_label(answer.invalid_field))).inc()
            self.plugins.forget(xr_key(req))
            return
        self._by_result["ok"].observe(seconds)
        if answer.plan is not None:
            self.plugins.put(xr_key(req), answer.plan.plugins)

    def measure_request(self, deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        """``deserialize``, recording each request's size."""
        observe = self.request_bytes.observe

        def measured(data: bytes) -> Any:
            observe(len(data))
            return deserialize(data)

        return measured

    def measure_response(self, serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
        """``serialize``, recording each response's size."""
        observe = self.response_bytes.observe

        def measured(message: Any) -> bytes:
            data = serialize(message)
            observe(len(data))
            return data

        return measured

    def serve_http(self, host: str, port: int) -> Callable[[], None]:
        """Serve ``/metrics`` on host:port in a thread; return what stops it."""
        from prometheus_client import start_http_server  # noqa: PLC0415

        httpd, thread = start_http_server(port, addr=host, registry=self.registry)

        def stop() -> None:
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=5)

        return stop

    def text(self) -> str:
        """The exposition a scrape gets (tests)."""
        from prometheus_client import generate_latest  # noqa: PLC0415

        return generate_latest(self.registry).decode()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"

