"""`serve --metrics-address`: scraped over HTTP while a lifecycle runs through the real server.

The InMemoryCrossplane (function_tools/in_memory_crossplane.py) plays whole ClusterPlugin lifecycles with every call going
over gRPC to `function-cluster-plugin serve`; the test counts what it sent and what came
back, scrapes `/metrics` mid-run and at the end, and checks the numbers: calls by result,
request and response bytes, FATALs by field, plugins by phase and reason against the
last answer of each XR, build info. Unit tests cover the bounded labels and the expiring
per-XR memory.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections import Counter
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from prometheus_client.parser import text_string_to_metric_families

from function import fn
from function.__version__ import __version__
from function.metrics import OTHER, Bounded, Metrics, PluginStates, field_label, xr_key
from function.plan import PluginStatus
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests import strategies as gen
from tests.scenarios import example, own_input
from tests.test_serve import TLS, Server, serve

P = "function_cluster_plugin"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return scrape.get((name, tuple(sorted(labels.items()))), 0.0)


def plugin_gauge(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for (name, labels), v in scrape.items():
        if name == f"{P}_plugins" and v:
            d = dict(labels)
            out[(d["plugin"], d["phase"], d["reason"])] = int(v)
    return out


def moment_of(rsp: fnv1.RunFunctionResponse, req: fnv1.RunFunctionRequest, sent: float, answered: float) -> float:
    """A moment between ``sent`` and ``answered`` at which the function in process answers
    ``req`` with ``rsp``; the test fails if there is none.

    The server read its own clock in between. An answer changes with the clock only at whole
    seconds (it writes RFC 3339 seconds, and its TTL counts down to deadlines made of them,
    rounded up), so the moments tried are the two ends and each whole second between (and
    just after it).
    """
    moments = [sent, answered]
    for second in range(math.floor(sent) + 1, math.floor(answered) + 1):
        moments += [float(second), second + 0.001]
    for at in moments:
        if fn.run(req, None, at) == rsp:
            return at
    raise AssertionError(f"the served answer is none of the function's between {sent} and {answered}: {rsp}")


class Recorder:
    """A InMemoryCrossplane runner through the served function, counting what was sent and returned."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.stub = grpcv1.FunctionRunnerServiceStub(channel)
        self.results: Counter[str] = Counter()
        self.request_bytes = 0
        self.response_bytes = 0
        self.last: dict[str, tuple[fnv1.RunFunctionRequest, float]] = {}  # with its moment
        self.fields: Counter[str] = Counter()

    def __call__(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        sent = time.time()
        rsp = self.stub.RunFunction(req, timeout=20)
        # What the metrics count must not change what the function answers: the answer in
        # process at the moment the server read its clock.
        at = moment_of(rsp, req, sent, time.time())
        self.request_bytes += req.ByteSize()
        self.response_bytes += rsp.ByteSize()
        fatal = [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        self.results["fatal" if fatal else "ok"] += 1
        if fatal:
            self.fields[fatal[0].message.split(":", 1)[0]] += 1
            self.last.pop(xr_key(req), None)
        else:
            self.last[xr_key(req)] = (fnv1.RunFunctionRequest.FromString(req.SerializeToString()), at)
        return rsp

    def expected_plugins(self) -> Counter[tuple[str, str, str]]:
        """Plugins by phase and reason over the last answer to each XR (computed in process)."""
        out: Counter[tuple[str, str, str]] = Counter()
        for req, at in self.last.values():
            plan = fn.answer(req, None, at).plan
            assert plan is not None
            for p in plan.plugins:
                out[(p.name, p.phase, p.reason)] += 1
        return out


def check(srv: Server, rec: Recorder) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    scrape = samples(srv.scrape())
    calls = sum(rec.results.values())
    for result in ("ok", "fatal", "error"):
        assert value(scrape, f"{P}_run_function_seconds_count", result=result) == rec.results[result], result
    assert value(scrape, f"{P}_run_function_request_bytes_count") == calls
    assert value(scrape, f"{P}_run_function_request_bytes_sum") == rec.request_bytes
    assert value(scrape, f"{P}_run_function_response_bytes_count") == calls
    assert value(scrape, f"{P}_run_function_response_bytes_sum") == rec.response_bytes
    for f, n in rec.fields.items():
        assert value(scrape, f"{P}_fatal_results_total", field=field_label(f)) == n, f
    assert plugin_gauge(scrape) == rec.expected_plugins()
    assert value(scrape, f"{P}_xrs") == len(rec.last)
    return scrape


def invalid(xr: dict[str, Any]) -> dict[str, Any]:
    bad = copy.deepcopy(xr)
    bad["spec"]["irsa"] = {"mode": "Sometimes"}
    return bad


@pytest.mark.parametrize("mtls", [False, True], ids=["insecure", "mtls"])
def test_scrape_while_a_lifecycle_runs(mtls: bool, tls: TLS) -> None:
    with serve(metrics=True, health=False, tls=tls if mtls else None) as srv, srv.channel() as ch:
        rec = Recorder(ch)
        before = samples(srv.scrape())
        assert value(before, f"{P}_build_info", **build_labels(before)) == 1
        assert build_labels(before)["version"] == __version__
        assert value(before, f"{P}_xrs") == 0

        xr, required = example("selfhosted-full")
        world = InMemoryCrossplane(xr, required, runner=rec)
        world.run(3)  # mid-lifecycle: waiting on the control plane
        mid = check(srv, rec)
        phases = {phase for _, phase, _ in plugin_gauge(mid)}
        assert phases & {"Pending", "Installing"}, plugin_gauge(mid)
        assert any(reason for _, _, reason in plugin_gauge(mid))

        # A second XR, refused: its FATAL counts by field; then fixed, it joins the gauge.
        xr2, required2 = example("calico-legacy-claim")
        other = InMemoryCrossplane(invalid(xr2), required2, runner=rec)
        other.run(2)
        check(srv, rec)
        assert rec.fields, "the invalid XR was not refused"
        fixed = InMemoryCrossplane(xr2, required2, step_input=own_input("calico-legacy-claim"), runner=rec)
        fixed.run(4)
        assert len(check(srv, rec)) and len(rec.last) == 2

        world.run(25)  # both to the end: every plugin Ready
        fixed.run(25)
        end = check(srv, rec)
        assert {phase for _, phase, _ in plugin_gauge(end)} == {"Ready"}
        assert rec.results["ok"] > 20 and rec.results["fatal"] >= 2
        print({"calls": dict(rec.results), "scrape": {k[0]: v for k, v in end.items() if k[0].startswith(P) and "bucket" not in k[0]}})


def build_labels(scrape: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, str]:
    return next(dict(labels) for name, labels in scrape if name == f"{P}_build_info")


def test_blocked_plugins_show_with_their_reason() -> None:
    """A Secret the function cannot use blocks IRSA: plugins Blocked, reason without names."""
    xr, required = example("selfhosted-full")
    required = [o for o in required if not (o["kind"] == "Secret" and o["metadata"]["name"].endswith("-sa"))]
    sa = next(o for o in example("selfhosted-full")[1] if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-sa"))
    broken = copy.deepcopy(sa)
    broken["data"] = {"tls.crt": gen.b64("not a certificate")}
    with serve(metrics=True, health=False) as srv, srv.channel() as ch:
        rec = Recorder(ch)
        InMemoryCrossplane(xr, [*required, broken], runner=rec).run(4)
        scrape = check(srv, rec)
    blocked = {(p, r) for p, phase, r in plugin_gauge(scrape) if phase == "Blocked"}
    assert blocked, plugin_gauge(scrape)
    ns = xr["metadata"]["namespace"]
    for _, reason in blocked:
        assert ns not in reason and xr["metadata"]["name"] not in reason, reason


def test_metrics_off_serves_no_http() -> None:
    with serve(health=False) as srv:
        assert srv.metrics_address == ""
        assert "metrics_address" not in srv.log() or '"metrics_address": null' in srv.log()


# --- in process -------------------------------------------------------------------------


def test_internal_errors_count_as_error(monkeypatch: pytest.MonkeyPatch) -> None:
    m = Metrics()
    runner = fn.FunctionRunner(metrics=m)

    def boom(*_: Any) -> fn.Answer:
        raise RuntimeError("a bug")

    monkeypatch.setattr(fn, "answer", boom)
    rsp = asyncio.run(runner.RunFunction(fnv1.RunFunctionRequest()))
    assert rsp.results[0].reason == "InternalError"
    assert value(samples(m.text()), f"{P}_run_function_seconds_count", result="error") == 1


@pytest.mark.parametrize(
    ("field", "label"),
    [
        ("spec.clusterName", "spec.clusterName"),
        ("spec.storage.ebs.values.serviceAccount.name", "spec.storage.ebs"),
        ("spec.storage.ebs.values", "spec.storage.ebs"),
        ("spec.networking.calico.encapsulation", "spec.networking.calico"),
        ("spec.plugins[3].name", "spec.plugins.name"),
        ("input.charts.zzz", "input.charts.zzz"),
        ("spec.x.values.a.b.c", "spec.x.values"),
    ],
)
def test_field_labels_are_cut_to_their_known_part(field: str, label: str) -> None:
    assert field_label(field) == label


def test_user_made_up_fields_are_capped() -> None:
    m = Metrics()
    xr = {"apiVersion": "clusterplugin.dev/v1alpha1", "kind": "ClusterPlugin", "metadata": {"name": "a", "namespace": "n"}}
    for i in range(200):
        req = fnv1.RunFunctionRequest()
        req.observed.composite.resource.update({**xr, "spec": {"clusterName": "c", f"typo{i}": 1}})
        got = fn.answer(req)
        assert got.invalid_field == f"spec.typo{i}"
        m.observe(req, got, 0.001)
    fields = [dict(labels)["field"] for name, labels in samples(m.text()) if name == f"{P}_fatal_results_total"]
    assert len(fields) == 65 and OTHER in fields
    assert value(samples(m.text()), f"{P}_fatal_results_total", field=OTHER) == 200 - 64


def test_bounded_keeps_known_values() -> None:
    b = Bounded(2)
    assert [b("a"), b("b"), b("c"), b("a")] == ["a", "b", OTHER, "a"]


def test_plugin_states_expire_and_are_capped() -> None:
    now = [0.0]
    states = PluginStates(ttl=60, limit=3, clock=lambda: now[0])
    ready = [PluginStatus("vpc-cni", "Ready")]
    for i in range(5):
        states.put(f"xr-{i}", ready)
        now[0] += 1
    assert sorted(len(x) for x in states.snapshot()) == [1, 1, 1]  # the 3 most recent
    assert list(states.xrs) == ["xr-2", "xr-3", "xr-4"]
    now[0] += 59
    states.put("xr-4", ready)  # seen again: stays
    assert len(states.snapshot()) == 1  # xr-2, xr-3 are older than the TTL
    states.forget("xr-4")
    assert states.snapshot() == []


def test_a_replica_forgets_xrs_it_has_not_seen_for_the_window() -> None:
    now = [0.0]
    m = Metrics(xr_ttl=600, clock=lambda: now[0])
    xr, required = example("selfhosted-full")
    world = InMemoryCrossplane(xr, required)
    world.run(2)
    req = world.request()
    m.observe(req, fn.answer(req), 0.002)
    assert value(samples(m.text()), f"{P}_xrs") == 1
    now[0] += 601
    scrape = samples(m.text())
    assert value(scrape, f"{P}_xrs") == 0 and not plugin_gauge(scrape)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLS:
    from tests.test_serve import make_tls

    return make_tls(tmp_path_factory.mktemp("tls"))
