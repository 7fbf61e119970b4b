"""e2e/scale's pieces that can be checked without a control plane: the percentiles, the reading
of a real Prometheus endpoint and of /proc, the bumped chart a real helm reads back, and the
JSON an interrupted run still writes."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from e2e.controlplane.processes import free_port
from e2e.controlplane.workload import ChartServer
from e2e.scale import __main__ as scale_run
from e2e.scale.__main__ import EBS_CHART, EBS_FROM, EBS_TO, bumped_chart
from e2e.scale.fleet import percentile, summary
from e2e.scale.meter import cpu_seconds, rss_mib, scrape, total

HELM = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "helm"


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([3.0], 99) == 3.0
    assert summary([1.0, 2.0, 3.0, 10.0]) == {"count": 4, "p50_s": 2.0, "p99_s": 10.0, "max_s": 10.0, "mean_s": 4.0}


def test_a_real_endpoint_is_read_and_summed_by_label() -> None:
    registry = CollectorRegistry()
    # The function's own histogram (function/metrics.py): its _count is the calls.
    calls = Histogram("function_cluster_plugin_run_function_seconds", "calls", ["result"], registry=registry)
    depth = Gauge("workqueue_depth", "depth", ["name"], registry=registry)
    for result, count in (("ok", 7), ("fatal", 2)):
        for _ in range(count):
            calls.labels(result).observe(0.001)
    depth.labels("composite/clusterplugins.clusterplugin.dev").set(5)
    depth.labels("other").set(40)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        got = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert total(got, "function_cluster_plugin_run_function_seconds_count") == 9
    assert total(got, "function_cluster_plugin_run_function_seconds_count", result="ok") == 7
    assert total(got, "workqueue_depth", name="composite/clusterplugins.clusterplugin.dev") == 5


def test_proc_readings_follow_this_process() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.15
    rss, peak = rss_mib(os.getpid())
    assert 10 < rss <= peak
    assert cpu_seconds(2**22 + 1) == 0.0 and rss_mib(2**22 + 1) == (0.0, 0.0)  # no such process


def test_the_bumped_chart_is_the_same_chart_at_the_new_version(tmp_path: Path) -> None:
    server = ChartServer(tmp_path / "charts")
    bumped_chart(server)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        shown = {
            version: subprocess.run(
                [str(HELM), "show", "chart", str(server.root / f"{EBS_CHART}-{version}.tgz")], capture_output=True, text=True, check=True
            ).stdout
            for version in (EBS_FROM, EBS_TO)
        }
        assert f"version: {EBS_TO}" in shown[EBS_TO] and f"version: {EBS_FROM}" in shown[EBS_FROM]
        rendered = {
            version: subprocess.run(
                [str(HELM), "template", "x", str(server.root / f"{EBS_CHART}-{version}.tgz")], capture_output=True, text=True, check=True
            ).stdout.replace(version, "V")
            for version in (EBS_FROM, EBS_TO)
        }
        assert rendered[EBS_FROM] == rendered[EBS_TO]
        index = (server.root / "index.yaml").read_text()
        assert f"{EBS_CHART}-{EBS_TO}.tgz" in index and f"{EBS_CHART}-{EBS_FROM}.tgz" in index
    finally:
        server.stop()


@pytest.mark.parametrize("stop", [TimeoutError("every XR Ready: not done in 3600 s"), KeyboardInterrupt()])
def test_an_interrupted_run_still_writes_what_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: BaseException
) -> None:
    """A burst that does not finish is itself the finding: what was measured up to it is kept."""

    def first_phase_only(args: object, out: dict) -> dict:
        out["settings"] = {"xrs": args.xrs}  # type: ignore[attr-defined]
        out["create_unfinished"] = {"bulk": summary([30.0, 60.0])}
        raise stop

    monkeypatch.setattr(scale_run, "run", first_phase_only)
    written = tmp_path / "scale.json"
    assert scale_run.main(["--xrs", "7", "--out", str(written)]) == 1
    got = json.loads(written.read_text())
    assert got["settings"] == {"xrs": 7}
    assert got["create_unfinished"]["bulk"]["count"] == 2
    assert got["interrupted"].startswith(type(stop).__name__)
