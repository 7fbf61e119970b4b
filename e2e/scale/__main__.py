"""``make scale``: hundreds of ClusterPlugins on one function replica, on the real control plane.

    python -m e2e.scale [--xrs 200] [--real 3] [--delete 50] [--out benchmarks/results/scale.json]

Which is which:
- the bulk (``--xrs``, namespaces ``fleet-NNN``): examples/selfhosted-full on a control plane
  of its own (etcd, kube-apiserver, kube-controller-manager, Crossplane v2.4 with its default
  workers, poll interval and circuit breaker, the Composition's own TTLs), CAPI and every
  provider played by the driver (``e2e/controlplane/driver.py``), in this process;
- the real subset (``--real``, namespaces ``real-NNN``): the same example on a second control
  plane whose Crossplane calls the same function replica, its Releases installed by the real
  provider-helm, each XR into a kwok workload cluster of its own (a chart's release name and
  namespace are fixed, so two XRs cannot share one); the AWS provider played.

The run: every cluster is made with its control plane available, then every XR is created in
one burst and waited for until Ready; then the Composition's input changes for all of them (the
EBS CSI driver's default chart version, 2.64.0 -> 2.64.1: a repackaged copy with only its
version bumped, on the chart server, so provider-helm runs a real helm upgrade); then ``--delete``
of the bulk's clusters are deleted as CAPI deletes them, and their withdrawal waited for until
each XR says ClusterDeleted. Throughout, ``meter.Meter`` reads every process's CPU and RSS, the
function's calls, Crossplane's reconciles and work queue, and the API server's stored objects.
At the end the in-memory model's figure for 1,000 XRs (``model.fleet``). It writes the figures
to ``--out`` (JSON) and prints them; it exits 1 if any XR did not get where it should.
"""

from __future__ import annotations

import argparse
import copy
import io
import itertools
import json
import os
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from e2e.conftest import tool_path
from e2e.controlplane.composite import conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane
from e2e.controlplane.workload import (
    ChartServer,
    HelmHistory,
    WorkloadCluster,
    chart_index,
    provider_helm,
)
from e2e.faults.control import flag
from e2e.scale import model
from e2e.scale.fleet import Fleet, XRWatch, summary
from e2e.scale.meter import Endpoints, Meter, Sample, rates, read
from e2e.scale.planes import (
    CROSSPLANE_CIRCUIT_BREAKER_BURST,
    FleetControlPlane,
    SharedFunctionControlPlane,
)
from function.flavour import ORPHAN_MANAGEMENT_POLICIES

EBS_CHART, EBS_FROM, EBS_TO = "aws-ebs-csi-driver", "2.64.0", "2.64.1"
EBS_NODE = "ebs-release"
RESOURCE_NAME = "crossplane.io/composition-resource-name"


def bumped_chart(server: ChartServer) -> None:
    """A copy of the EBS CSI driver's chart with only its version changed, on the chart server."""
    source = server.root / f"{EBS_CHART}-{EBS_FROM}.tgz"
    out = io.BytesIO()
    with tarfile.open(source) as tar, tarfile.open(fileobj=out, mode="w:gz") as new:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name == f"{EBS_CHART}/Chart.yaml" and data is not None:
                chart = yaml.safe_load(data)
                chart["version"] = EBS_TO
                data = yaml.safe_dump(chart).encode()
                member.size = len(data)
            new.addfile(member, io.BytesIO(data) if data is not None else None)
    (server.root / f"{EBS_CHART}-{EBS_TO}.tgz").write_bytes(out.getvalue())
    (server.root / "index.yaml").write_text(yaml.safe_dump(chart_index(server.root, server.url)))


def wait(what: str, done: Callable[[], bool], timeout_s: float, interval_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout_s:.0f}s waiting for {what}"
            raise TimeoutError(msg)
        time.sleep(interval_s)


def releases_of(cp: ControlPlane, node: str) -> list[dict[str, Any]]:
    return [
        r
        for r in cp.kube.list("helm.m.crossplane.io/v1beta1", "Release")
        if (r["metadata"].get("annotations") or {}).get(RESOURCE_NAME) == node
    ]


def phase(
    meter: Meter, start: Sample, end: Sample, fleets: dict[str, dict[str, float]]
) -> dict[str, Any]:
    """What a phase took: per-XR seconds of each fleet, wall time, rates, peaks, stored objects."""
    window = meter.between(start.at, end.at) or [start, end]
    pairs = list(itertools.pairwise(window))
    return {
        "wall_s": round(end.at - start.at, 1),
        "per_xr": {name: summary(list(seconds.values())) for name, seconds in fleets.items()},
        "rates": rates(start, end),
        "peak_rss_mib": {n: round(max(s.rss[n][0] for s in window), 1) for n in end.rss},
        "peak_cpu_cores": {
            n: round(max((b.cpu[n] - a.cpu[n]) / max(b.at - a.at, 1e-9) for a, b in pairs), 2)
            for n in end.cpu
        }
        if pairs
        else {},
        "max_queue_depth": max(s.queue_depth for s in window),
        "max_active_workers": max(s.active_workers for s in window),
        "reconcile_errors": end.reconcile_errors - start.reconcile_errors,
        "circuit_opens": end.circuit_opens - start.circuit_opens,
        "watch_events_dropped": end.events_dropped - start.events_dropped,
        "stored_objects": end.stored_objects,
        "function_calls": end.function_calls - start.function_calls,
        "reconciles": end.reconciles - start.reconciles,
    }


def metrics_url(cp: ControlPlane) -> str:
    return f"http://127.0.0.1:{flag(cp.processes['crossplane'].argv, 'metrics-port')}/metrics"


class ScaleRun:
    """The control planes, the fleets, the watches and the meter of one run."""

    def __init__(self, args: argparse.Namespace, stack: ExitStack, root: Path) -> None:
        self.args, self.stack, self.root = args, stack, root
        self.bulk_cp = FleetControlPlane(
            root / "bulk", tool_path, circuit_breaker_burst=args.circuit_breaker_burst
        )
        stack.callback(self.bulk_cp.stop)
        self.bulk_cp.start()
        composition = self.bulk_cp.install_api("v2", ttl_waiting=None)
        self.played = self.providers(self.bulk_cp, frozenset())
        ref = composition["spec"]["compositeTypeRef"]
        self.xr_kind = (ref["apiVersion"], ref["kind"])
        self.pids = {
            "function": self.bulk_cp.processes["function"].proc.pid,
            "crossplane": self.bulk_cp.processes["crossplane"].proc.pid,
            "kube-apiserver": self.bulk_cp.processes["kube-apiserver"].proc.pid,
            "etcd": self.bulk_cp.processes["etcd"].proc.pid,
            "driver (played providers)": os.getpid(),
        }
        self.crossplane_metrics = [metrics_url(self.bulk_cp)]
        self.fleets = {"bulk": Fleet(self.bulk_cp, self.played, composition, args.xrs)}
        self.watches = {"bulk": XRWatch(self.bulk_cp.kube, *self.xr_kind).start()}
        self.real_cp: SharedFunctionControlPlane | None = None
        if args.real:
            self.start_real()

    def providers(self, cp: ControlPlane, real_kinds: frozenset[str]) -> Providers:
        played = Providers(cp.kube, namespaced=True, real_kinds=real_kinds)
        played.start()
        self.stack.callback(played.stop)
        return played

    def start_real(self) -> None:
        """The real subset's control plane, its workload clusters, chart server and provider-helm."""
        real_cp = SharedFunctionControlPlane(
            self.root / "real",
            tool_path,
            function_of=self.bulk_cp,
            circuit_breaker_burst=self.args.circuit_breaker_burst,
        )
        self.stack.callback(real_cp.stop)
        real_cp.start()
        workloads = []
        for i in range(self.args.real):
            workload = WorkloadCluster(self.root / f"workload-{i}", tool_path)
            self.stack.callback(workload.stop)
            workload.start()
            workloads.append(workload)
            # kwok's pods serve no admission webhook: they are removed as they appear.
            history = HelmHistory(workload.kube)
            history.start()
            self.stack.callback(history.stop)
        charts = ChartServer(self.root / "charts")
        bumped_chart(charts)
        charts.start()
        self.stack.callback(charts.stop)
        helm = provider_helm(real_cp, self.root / "provider-helm")
        self.stack.callback(helm.stop)
        played = self.providers(real_cp, frozenset({"Release"}))

        def from_the_chart_server(step_input: dict[str, Any]) -> None:
            for chart in step_input["charts"].values():
                chart["repository"] = charts.url

        composition = real_cp.install_api("v2", ttl_waiting=None, edit_input=from_the_chart_server)
        self.fleets["real"] = Fleet(
            real_cp,
            played,
            composition,
            self.args.real,
            prefix="real",
            workload_kubeconfig=lambda i: workloads[i].inline_kubeconfig("demo"),
        )
        self.watches["real"] = XRWatch(real_cp.kube, *self.xr_kind).start()
        self.pids |= {
            "crossplane (real)": real_cp.processes["crossplane"].proc.pid,
            "kube-apiserver (real)": real_cp.processes["kube-apiserver"].proc.pid,
            "provider-helm": helm.proc.pid,
        }
        self.crossplane_metrics.append(metrics_url(real_cp))
        self.real_cp = real_cp

    def meter(self) -> Meter:
        endpoints = Endpoints(
            self.pids,
            self.bulk_cp.function_metrics,
            self.crossplane_metrics,
            f"{self.bulk_cp.server}/metrics",
            self.bulk_cp.kube.tls,
        )
        meter = Meter(lambda: read(endpoints), interval_s=self.args.interval).start()
        self.stack.callback(meter.stop)
        return meter

    def create(self, meter: Meter, out: dict[str, Any]) -> Sample:
        """Every XR in one burst, to Ready."""
        burst = meter.mark("burst")
        out["burst_created_s"] = {name: round(f.create_xrs(), 1) for name, f in self.fleets.items()}
        wait(
            "every XR Ready",
            lambda: all(len(self.watches[n].ready_at) >= f.count for n, f in self.fleets.items()),
            self.args.timeout,
        )
        ready = meter.mark("all ready")
        took = {
            n: {k: self.watches[n].ready_at[k] - f.created_at[k] for k in f.created_at}
            for n, f in self.fleets.items()
        }
        out["create"] = phase(meter, burst, ready, took)
        return burst

    def change_input(self, meter: Meter, out: dict[str, Any]) -> None:
        """The Composition's input changes for all of them: a new default chart version."""
        for f in self.fleets.values():
            changed = copy.deepcopy(f.composition)
            changed["spec"]["pipeline"][0]["input"]["charts"]["ebs"]["version"] = EBS_TO
            f.cp.kube.apply(changed)
        change = meter.mark("input change")

        def applied(f: Fleet, deployed: bool) -> bool:
            moved = [
                r
                for r in releases_of(f.cp, EBS_NODE)
                if r["spec"]["forProvider"]["chart"]["version"] == EBS_TO
            ]
            if deployed:
                moved = [
                    r
                    for r in moved
                    if (r.get("status", {}).get("atProvider") or {}).get("version") == EBS_TO
                ]
            return len(moved) >= f.count

        wait(
            f"every XR's {EBS_NODE} at {EBS_TO}",
            lambda: all(applied(f, n == "real") for n, f in self.fleets.items()),
            self.args.timeout,
        )
        out["input_change"] = phase(meter, change, meter.mark("input applied"), {})

    def delete(self, meter: Meter, out: dict[str, Any]) -> None:
        """``--delete`` of the bulk's clusters deleted as CAPI deletes them; their withdrawal."""
        victims = self.fleets["bulk"].members[: self.args.delete]
        for m in victims:
            m.capi.delete()

        def orphaned(m: Any) -> bool:
            releases = [o for o in m.composed().values() if o["kind"] == "Release"]
            return conditions(m.xr()).get("PluginsReady", {}).get(
                "reason"
            ) == "ClusterDeleting" and all(
                r["spec"].get("managementPolicies") == list(ORPHAN_MANAGEMENT_POLICIES)
                for r in releases
            )

        wait(
            "every deleted cluster's XR ClusterDeleting, its Releases orphaned",
            lambda: all(orphaned(m) for m in victims),
            self.args.timeout,
            5,
        )
        self.played.unreachable.update(m.namespace for m in victims)
        gone = meter.mark("clusters gone")
        for m in victims:
            m.capi.finish_deletion()
        keys = {Fleet.key(m) for m in victims}
        deleted = self.watches["bulk"].deleted_at
        wait(
            "every deleted cluster's XR ClusterDeleted",
            lambda: keys <= set(deleted),
            self.args.timeout,
        )
        out["delete"] = phase(
            meter,
            gone,
            meter.mark("all withdrawn"),
            {"bulk": {k: deleted[k] - gone.at for k in keys}},
        )


def run(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """The three phases; ``out`` holds what was measured so far, also when a phase fails or
    the run is interrupted (``main`` writes it either way)."""
    root = Path(args.root or tempfile.mkdtemp(prefix="scale-"))
    print(f"logs under {root}", flush=True)
    out["settings"] = {
        "xrs": args.xrs,
        "real": args.real,
        "delete": args.delete,
        "circuit_breaker_burst": args.circuit_breaker_burst,
    }
    with ExitStack() as stack:
        scale = ScaleRun(args, stack, root)
        started = time.monotonic()
        for f in scale.fleets.values():
            f.make_clusters()
        out["clusters_made_s"] = round(time.monotonic() - started, 1)
        meter = scale.meter()
        try:
            scale.create(meter, out)
            print(json.dumps({"create": out["create"]}, indent=1), flush=True)
            scale.change_input(meter, out)
            print(json.dumps({"input_change": out["input_change"]}, indent=1), flush=True)
            scale.delete(meter, out)
            print(json.dumps({"delete": out["delete"]}, indent=1), flush=True)
        finally:
            _readings(scale, meter, out)
    out["in_memory"] = model.fleet(args.model_xrs)
    return out


def _readings(scale: ScaleRun, meter: Meter, out: dict[str, Any]) -> None:
    """The meter's readings and marks (from the burst), and what the watches and driver met."""
    origin = meter.marks.get("burst", meter.samples[0].at if meter.samples else time.monotonic())
    out["samples"] = [
        {
            "t": round(s.at - origin, 1),
            "function_calls": s.function_calls,
            "reconciles": s.reconciles,
            "queue_depth": s.queue_depth,
            "stored_objects": s.stored_objects,
            "cpu": s.cpu,
            "rss_mib": {n: r[0] for n, r in s.rss.items()},
        }
        for s in meter.samples
    ]
    out["marks"] = {k: round(v - origin, 1) for k, v in meter.marks.items()}
    if "create" not in out and "burst" in meter.marks:
        # The burst did not finish: how many XRs reached Ready, and how long they took.
        out["create_unfinished"] = {
            name: summary([t - origin for t in w.ready_at.values()])
            for name, w in scale.watches.items()
        }
    out["watch_errors"] = {n: w.errors[:5] for n, w in scale.watches.items()}
    out["driver_errors"] = scale.played.errors[:10]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.scale", description=__doc__.split("\n\n", 1)[0]
    )
    parser.add_argument("--xrs", type=int, default=int(os.environ.get("SCALE_XRS", "200")))
    parser.add_argument("--real", type=int, default=int(os.environ.get("SCALE_REAL", "3")))
    parser.add_argument("--delete", type=int, default=int(os.environ.get("SCALE_DELETE", "50")))
    parser.add_argument("--model-xrs", type=int, default=1000)
    parser.add_argument(
        "--circuit-breaker-burst",
        type=float,
        default=CROSSPLANE_CIRCUIT_BREAKER_BURST,
        help="Crossplane's (its default: 100)",
    )
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between readings")
    parser.add_argument("--timeout", type=float, default=3600, help="the longest a phase may take")
    parser.add_argument(
        "--root", default="", help="where the logs go (a temporary directory by default)"
    )
    parser.add_argument("--out", default="benchmarks/results/scale.json")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {}
    code = 0
    try:
        run(args, result)
    except (TimeoutError, KeyboardInterrupt) as err:
        # What was measured up to here is kept: a phase that times out is itself a finding.
        result["interrupted"] = f"{type(err).__name__}: {err}"
        print(f"FAILED: {result['interrupted']}", file=sys.stderr)
        code = 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
