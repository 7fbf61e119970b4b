"""What the scale run measures of the real processes, every few seconds, from outside them.

- CPU seconds (user + system, every thread) and RSS of each process, from ``/proc/<pid>/stat``
  and ``/proc/<pid>/status`` (its children too: a process group's other members, e.g. the
  driver's threads are the run's own process);
- the Prometheus metrics each serves: the function's calls
  (``function_cluster_plugin_run_function_seconds_count``, ``serve --metrics-address``),
  Crossplane's reconciles of the XR kind and its work queue (controller-runtime's
  ``controller_runtime_reconcile_total``, ``workqueue_depth``, ``controller_runtime_active_workers``),
  its XR watch circuit breaker (``circuit_breaker_opens_total``, dropped ``circuit_breaker_events_total``),
  and the API server's stored objects (``apiserver_storage_objects``), parsed with
  prometheus_client's own parser.

A ``Sample`` holds one reading of all of it; ``Meter`` samples in a thread and marks the
phases of the run, and ``rates`` turns two samples into per-second figures.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
COMPOSITE_CONTROLLER = "composite/clusterplugins.clusterplugin.dev"


def cpu_seconds(pid: int) -> float:
    """User and system CPU of the process, all its threads, in seconds (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the name: state is field 3, utime 14 and stime 15 (1-based, proc(5)).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> tuple[float, float]:
    """(RSS now, peak RSS) of the process in MiB (0 if it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0, 0.0
    values = {line.split(":", 1)[0]: line.split()[1] for line in status if line.startswith(("VmRSS", "VmHWM"))}
    return int(values.get("VmRSS", 0)) / 1024, int(values.get("VmHWM", 0)) / 1024


def scrape(url: str, context: ssl.SSLContext | None = None) -> dict[str, float]:
    """``name{label="v",...}`` -> value of every sample a Prometheus endpoint serves."""
    with urllib.request.urlopen(url, timeout=10, context=context) as rsp:  # noqa: S310 - loopback
        text = rsp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def total(metrics: dict[str, float], metric: str, **labels: str) -> float:
    """The sum of every sample of ``metric`` whose labels include ``labels``."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in metrics.items() if k.split("{", 1)[0] == metric and all(w in k for w in wanted))


@dataclass(frozen=True)
class Sample:
    """One reading."""

    at: float
    cpu: dict[str, float]  # process -> CPU seconds so far
    rss: dict[str, tuple[float, float]]  # process -> (RSS, peak) MiB
    function_calls: float
    reconciles: float  # Crossplane's reconciles of the XR kind, every result
    reconcile_errors: float
    queue_depth: float  # Crossplane's XR work queue
    active_workers: float
    stored_objects: float  # the API server's, every resource
    circuit_opens: float  # Crossplane's XR watch circuit breaker opening
    events_dropped: float  # watch events it dropped while open


@dataclass
class Endpoints:
    """Where to read what: process pids, the function's metrics URL, Crossplane's (one per
    control plane) and the API server's (the first control plane's, with its TLS)."""

    pids: dict[str, int]
    function_metrics: str
    crossplane_metrics: list[str]
    apiserver_metrics: str
    apiserver_tls: ssl.SSLContext


def _safe(url: str, context: ssl.SSLContext | None = None) -> dict[str, float]:
    """The endpoint's samples; none when it does not answer (counted 0 in this reading)."""
    try:
        return scrape(url, context)
    except OSError:
        return {}


def read(endpoints: Endpoints) -> Sample:
    """Every figure, now."""
    fn = _safe(endpoints.function_metrics)
    xps = [_safe(url) for url in endpoints.crossplane_metrics]
    api = _safe(endpoints.apiserver_metrics, endpoints.apiserver_tls)

    def crossplane(metric: str, **labels: str) -> float:
        return sum(total(xp, metric, **labels) for xp in xps)

    return Sample(
        at=time.monotonic(),
        cpu={n: cpu_seconds(p) for n, p in endpoints.pids.items()},
        rss={n: rss_mib(p) for n, p in endpoints.pids.items()},
        function_calls=total(fn, "function_cluster_plugin_run_function_seconds_count"),
        reconciles=crossplane("controller_runtime_reconcile_total", controller=COMPOSITE_CONTROLLER),
        reconcile_errors=crossplane("controller_runtime_reconcile_errors_total", controller=COMPOSITE_CONTROLLER),
        queue_depth=crossplane("workqueue_depth", name=COMPOSITE_CONTROLLER),
        active_workers=crossplane("controller_runtime_active_workers", controller=COMPOSITE_CONTROLLER),
        circuit_opens=crossplane("circuit_breaker_opens_total"),
        events_dropped=crossplane("circuit_breaker_events_total", result="Dropped"),
        # Renamed apiserver_resource_objects in Kubernetes 1.31 (the old name deprecated).
        stored_objects=total(api, "apiserver_resource_objects") or total(api, "apiserver_storage_objects"),
    )


@dataclass
class Meter:
    """Samples ``read`` every ``interval_s`` in a thread; ``mark`` names a moment of the run."""

    reader: Callable[[], Sample]
    interval_s: float = 2.0
    samples: list[Sample] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Meter:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.reader())
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()

    def mark(self, name: str) -> Sample:
        """A reading now, kept under ``name``."""
        got = self.reader()
        self.samples.append(got)
        self.marks[name] = got.at
        return got

    def between(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]


def rates(first: Sample, last: Sample) -> dict[str, float]:
    """Per-second figures between two readings: each process's CPU (cores), the function's
    calls, Crossplane's reconciles of the XR kind."""
    seconds = max(last.at - first.at, 1e-9)
    out = {f"cpu.{n}": round((last.cpu[n] - first.cpu.get(n, 0.0)) / seconds, 3) for n in last.cpu}
    out["function_calls_per_s"] = round((last.function_calls - first.function_calls) / seconds, 1)
    out["reconciles_per_s"] = round((last.reconciles - first.reconciles) / seconds, 2)
    return out
