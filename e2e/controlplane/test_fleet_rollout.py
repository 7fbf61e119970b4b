"""A fleet rollout on the real control plane: 6 ClusterPlugins in two namespaces, real provider-helm.

Each ClusterPlugin (IRSA Disabled, the AWS Load Balancer Controller alone: a Release without
``wait``) has a workload cluster of its own, a kube-apiserver on a shared etcd
(``fleet.SharedEtcdClusters``). The Composition runs the controller's chart 1.12.0; a
ClusterPluginRollout moves the fleet to 3.5.0 (canary, then 50%, then the rest) to Complete;
then its target becomes 3.4.0, which the chart server lacks: the canary's Release fails for
real (provider-helm cannot pull the chart), the canary rolls itself back, the rollout fails
and rolls back, and every cluster stays on (or returns to) 3.5.0. The timeline of the
rollout's phase, the admitted count and each cluster's Release (chart in its spec, helm's
revision) is printed; no Release of a cluster that was not admitted ever changes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.controlplane.composite import Composite
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.driver import ClusterAPI, Providers
from e2e.controlplane.fleet import (
    ClusterTimeline,
    Member,
    Sample,
    SharedEtcdClusters,
    renamed_required,
)
from e2e.controlplane.harness import ROOT, ControlPlane
from e2e.controlplane.workload import ChartServer, HelmHistory
from e2e.faults.netcut import NetCut
from function.rollout.spec import OpenWave, RolloutSpec, bucket, wave_of
from function.spec_base import CROSSPLANE_SPEC_FIELDS
from function_tools import fleet_status

LBC = "aws-load-balancer-controller"
OLD, NEW, MISSING = "1.12.0", "3.5.0", "3.4.0"
# (namespace, cluster): three in each namespace; c1 is the canary.
CLUSTERS = [("fleet-a", "c1"), ("fleet-a", "c2"), ("fleet-a", "c3"), ("fleet-b", "c4"), ("fleet-b", "c5"), ("fleet-b", "c6")]
CANARY = "fleet-a/c1"
ROLLOUT = "lbc"
WAVES = ["canary", "wave-1", "wave-2"]


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedEtcdClusters]:
    with running_control_plane(tmp_path_factory.mktemp("fleet"), SharedEtcdClusters, count=len(CLUSTERS)) as cluster:
        assert isinstance(cluster, SharedEtcdClusters)
        yield cluster


@pytest.fixture(scope="module")
def paths(workloads: SharedEtcdClusters) -> Iterator[list[NetCut]]:
    """The way provider-helm reaches each member's API server: one can be cut."""
    out = []
    for server, _ in workloads.members:
        host, port = server.removeprefix("https://").rsplit(":", 1)
        out.append(NetCut(host, int(port)).start())
    yield out
    for cut in out:
        cut.stop()


@pytest.fixture(scope="module")
def members(workloads: SharedEtcdClusters) -> Iterator[list[Member]]:
    out = []
    for (namespace, name), (_, kube) in zip(CLUSTERS, workloads.members, strict=True):
        history = HelmHistory(kube)
        history.start()
        out.append(Member(namespace, name, history))
    yield out
    for m in out:
        m.history.stop()


@pytest.fixture(scope="module")
def fleet_api(control_plane: ControlPlane, helm_providers: Providers, chart_server: ChartServer, workloads: SharedEtcdClusters) -> Iterator[dict]:
    """apis/v2 with the charts from the loopback server, the controller's at 1.12.0, and a short
    ttl.ready (the ClusterPlugins follow the rollout at ttl.waiting while it moves anyway)."""

    def edit(step_input: dict) -> None:
        for chart in step_input["charts"].values():
            chart["repository"] = chart_server.url
        step_input["charts"]["loadBalancerController"]["version"] = OLD
        step_input["ttl"]["ready"] = "5s"

    composition = control_plane.install_api("v2", edit_input=edit)
    yield composition
    control_plane.remove_api("v2")


def _composite(cp: ControlPlane, providers: Providers, api: dict, workloads: SharedEtcdClusters, index: int, tmp: Path, path: NetCut) -> Composite:  # noqa: PLR0917
    namespace, name = CLUSTERS[index]
    kubeconfig = workloads.inline_kubeconfig(name, server=f"https://{path.address}")
    c = Composite(cp, providers, "selfhosted-full", api, namespace, workload_kubeconfig=kubeconfig)
    c.capi = ClusterAPI(cp.kube, renamed_required("selfhosted-full", name, tmp / name), namespace, kubeconfig)
    labels = {"fleet": "e2e", **({"ring": "canary"} if f"{namespace}/{name}" == CANARY else {})}
    c.manifest["metadata"].update(name=name, labels=labels)
    c.manifest["spec"] = {
        "crossplane": c.manifest["spec"]["crossplane"],
        "clusterName": name,
        "region": c.manifest["spec"]["region"],
        "irsa": {"mode": "Disabled"},
        "ingress": {"awsLoadBalancerController": {}},
        "upgradePolicy": {"soakSeconds": 5, "progressDeadlineSeconds": 30},
    }
    return c


@pytest.fixture(scope="module")
def fleet(  # noqa: PLR0917 - pytest passes fixtures by position
    control_plane: ControlPlane,
    helm_providers: Providers,
    fleet_api: dict,
    workloads: SharedEtcdClusters,
    members: list[Member],
    paths: list[NetCut],
    tmp_path_factory: pytest.TempPathFactory,
) -> list[Composite]:
    tmp = tmp_path_factory.mktemp("fleet-required")
    composites = [_composite(control_plane, helm_providers, fleet_api, workloads, i, tmp, paths[i]) for i in range(len(CLUSTERS))]
    for c in composites:
        c.create(staged=False)
    for c in composites:
        c.wait_ready(timeout_s=240)
    return composites


def _rollout(version: str, on_failure: str, name: str = ROLLOUT) -> dict[str, Any]:
    xrd = yaml.safe_load((ROOT / "apis" / "v2" / "rollout-definition.yaml").read_text())
    return {
        "apiVersion": f"{xrd['spec']['group']}/{xrd['spec']['versions'][0]['name']}",
        "kind": "ClusterPluginRollout",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"fleet": "e2e"}},
            "target": {"plugins": [{"name": LBC, "version": version}]},
            "strategy": {
                "canary": {"matchLabels": {"ring": "canary"}},
                "waves": [{"maxClusters": "50%"}, {}],
                "soakSeconds": 5,
                "progressDeadlineSeconds": 120,
                "onFailure": on_failure,
            },
        },
    }


@pytest.fixture(scope="module")
def timeline(control_plane: ControlPlane, fleet: list[Composite], members: list[Member], fleet_api: dict) -> Iterator[ClusterTimeline]:
    ref = fleet_api["spec"]["compositeTypeRef"]
    recorder = ClusterTimeline(
        control_plane.kube,
        (ref["apiVersion"], "ClusterPluginRollout", ROLLOUT),
        ("helm.m.crossplane.io/v1beta1", "Release"),
        (ref["apiVersion"], ref["kind"]),
        members,
    )
    recorder.start()
    yield recorder
    recorder.stop()


def _wait_phase(cp: ControlPlane, phase: str, timeout_s: float, name: str = ROLLOUT) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        got = cp.kube.get("clusterplugin.dev/v1alpha1", "ClusterPluginRollout", name)
        return got if (got or {}).get("status", {}).get("phase") == phase else None

    return cp.kube.wait_for(reached, f"rollout {name} {phase}", timeout_s=timeout_s, interval_s=0.5)


def _wave_index(sample: Sample) -> int:
    return WAVES.index(sample.wave) if sample.wave in WAVES else -1


def test_a_rollout_moves_the_fleet_in_waves_to_complete_and_a_real_failure_rolls_back(
    control_plane: ControlPlane, fleet: list[Composite], members: list[Member], timeline: ClusterTimeline
) -> None:
    started = time.monotonic()
    control_plane.kube.apply(_rollout(NEW, "Rollback"))
    try:
        done = _wait_phase(control_plane, "Complete", timeout_s=300)
    finally:
        print(f"\nrollout to {NEW}:\n{timeline.text()}")
    healthy_s = time.monotonic() - started
    assert done["status"]["counts"]["admitted"] == done["status"]["counts"]["healthy"] == len(CLUSTERS)
    time.sleep(1.0)
    first = timeline.snapshot()
    waves = {k: v[2] for k, v in first[-1].clusters.items()}
    assert waves[CANARY] == "canary"
    assert sorted(waves.values()) == sorted(["canary", "wave-1", "wave-1", "wave-1", "wave-2", "wave-2"])
    for s in first:
        for key, (chart, revision, _) in s.clusters.items():
            # Not admitted yet: its Release has not changed (spec and helm revision).
            if _wave_index(s) < WAVES.index(waves[key]):
                assert (chart, revision) == (OLD, 1), (key, s)
    assert {v[:2] for v in first[-1].clusters.values()} == {(NEW, 2)}

    # A target the chart server lacks: only the canary is admitted, fails for real, and every
    # cluster stays on (or returns to) the target the rollout completed.
    mark = len(timeline.snapshot())
    control_plane.kube.apply(_rollout(MISSING, "Rollback"))
    try:
        failed = _wait_phase(control_plane, "RolledBack", timeout_s=240)

        def canary_back() -> bool:
            return timeline.snapshot()[-1].clusters[CANARY][0] == NEW

        control_plane.kube.wait_for(canary_back, "the canary's Release back on 3.5.0", timeout_s=60)
    finally:
        print(f"\nrollout to {MISSING}:\n{timeline.text()}")
    assert [f["name"] for f in failed["status"]["failed"]] == [CANARY]
    second = timeline.snapshot()[mark:]
    tried = {k for s in second for k, v in s.clusters.items() if v[0] == MISSING}
    assert tried == {CANARY}
    for s in second:
        for key, (chart, revision, _) in s.clusters.items():
            if key != CANARY:
                assert (chart, revision) == (NEW, 2), (key, s)
    print(f"\nhealthy rollout {healthy_s:.0f}s, failed one {time.monotonic() - started - healthy_s:.0f}s")

    # `fleet status --kubeconfig` reads the same from the API server.
    rollouts, plugins = fleet_status.split(fleet_status.read_cluster(str(control_plane.kubeconfig)))
    text = fleet_status.summary(rollouts, plugins)
    print(f"\nfleet status:\n{text}")
    assert text.splitlines()[0].startswith(f"rollout {ROLLOUT}: RolledBack, canary open; 6 selected")
    assert "6 ClusterPlugins" in text


REFUSED = "3.6.0"  # the XRD's pattern takes it; the function knows no IAM policy for it


def _reports(cp: ControlPlane, fleet_api: dict) -> dict[str, dict[str, Any]]:
    ref = fleet_api["spec"]["compositeTypeRef"]
    return {
        f"{x['metadata']['namespace']}/{x['metadata']['name']}": x.get("status", {}).get("rollout", {})
        for x in cp.kube.list(ref["apiVersion"], ref["kind"])
    }


def _wait_held(cp: ControlPlane, fleet_api: dict, because: str, timeout_s: float) -> dict[str, dict[str, Any]]:
    def held() -> dict[str, dict[str, Any]] | None:
        got = _reports(cp, fleet_api)
        ok = len(got) == len(CLUSTERS) and all(r.get("phase") == "Held" and because in r.get("reason", "") for r in got.values())
        return got if ok else None

    return cp.kube.wait_for(held, f"every ClusterPlugin Held ({because})", timeout_s=timeout_s, interval_s=0.5)


def test_a_refused_edit_and_a_deleted_rollout_move_no_release(
    control_plane: ControlPlane, fleet: list[Composite], members: list[Member], timeline: ClusterTimeline, fleet_api: dict
) -> None:
    """Issue 48 on real provider-helm, after the test above (every cluster on 3.5.0, the
    Composition on 1.12.0): a version the function refuses, then a Complete rollout deleted;
    in neither does any Release change (its spec's chart nor helm's revision)."""
    before = {k: v[:2] for k, v in timeline.snapshot()[-1].clusters.items()}
    assert {chart for chart, _ in before.values()} == {NEW}, before
    mark = len(timeline.snapshot())
    control_plane.kube.apply(_rollout(REFUSED, "Rollback"))
    try:
        reports = _wait_held(control_plane, fleet_api, f"rollout {ROLLOUT} is refused (spec.target.plugins[0].version", 120)
        time.sleep(15)  # several TTLs of every ClusterPlugin
    finally:
        print(f"\nrollout edited to {REFUSED}:\n{timeline.text()}")
    assert all(r["applied"] == [{"name": LBC, "version": NEW}] for r in reports.values()), reports
    for s in timeline.snapshot()[mark:]:
        assert {k: v[:2] for k, v in s.clusters.items()} == before, s

    # Fixed to 3.5.0: a new target every cluster already runs, Complete; then deleted.
    control_plane.kube.apply(_rollout(NEW, "Rollback"))
    _wait_phase(control_plane, "Complete", timeout_s=240)
    control_plane.kube.delete("clusterplugin.dev/v1alpha1", "ClusterPluginRollout", ROLLOUT)
    try:
        _wait_held(control_plane, fleet_api, f"rollout {ROLLOUT} no longer selects this ClusterPlugin", 120)
        time.sleep(15)
    finally:
        print(f"\nrollout fixed, Complete, deleted:\n{timeline.text()}")
    for s in timeline.snapshot()[mark:]:
        assert {k: v[:2] for k, v in s.clusters.items()} == before, s
    for c in fleet:
        c.wait_ready(timeout_s=60)


def _in_wave(cp: ControlPlane, fleet_api: dict, rollout: dict[str, Any], wave: str) -> list[str]:
    """The ClusterPlugins in ``wave`` of ``rollout`` as its status stands, found as they find it."""
    spec = RolloutSpec.model_validate({k: v for k, v in rollout["spec"].items() if k not in CROSSPLANE_SPEC_FIELDS})
    waves = [OpenWave.model_validate(w) for w in rollout["status"]["waves"]]
    ref = fleet_api["spec"]["compositeTypeRef"]
    return [
        f"{x['metadata']['namespace']}/{x['metadata']['name']}"
        for x in cp.kube.list(ref["apiVersion"], ref["kind"])
        if wave_of(spec.strategy, waves, x["metadata"].get("labels", {}), bucket(x["metadata"]["uid"])) == wave
    ]


def test_an_admitted_cluster_cut_off_holds_its_wave_and_the_rollout_never_says_complete(
    control_plane: ControlPlane,
    fleet: list[Composite],
    members: list[Member],
    paths: list[NetCut],
    fleet_api: dict,
) -> None:
    """Issue 48's false Complete, on real provider-helm: after the tests above every cluster
    keeps 3.5.0 (Held); a new rollout moves the fleet to 1.12.0 (the Composition's version),
    and as its wave-1 opens one of its clusters' workload API is cut, past the progress
    deadline. The rollout halts (maxFailures 0), never says Complete, and no cluster outside
    the canary and wave-1 moves. Its own upgrade fails meanwhile (its upgradePolicy) and rolls
    back; once it is back, that failed spec is not tried again and the rollout stays Halted."""
    name = "lbc-back"
    back = _rollout(OLD, "Halt", name=name)
    back["spec"]["strategy"]["progressDeadlineSeconds"] = 60
    recorder = ClusterTimeline(
        control_plane.kube,
        ("clusterplugin.dev/v1alpha1", "ClusterPluginRollout", name),
        ("helm.m.crossplane.io/v1beta1", "Release"),
        (fleet_api["spec"]["compositeTypeRef"]["apiVersion"], fleet_api["spec"]["compositeTypeRef"]["kind"]),
        members,
    )
    recorder.start()
    try:
        control_plane.kube.apply(back)

        def wave_1() -> dict[str, Any] | None:
            got = control_plane.kube.get("clusterplugin.dev/v1alpha1", "ClusterPluginRollout", name) or {}
            return got if got.get("status", {}).get("wave") == "wave-1" else None

        opened = control_plane.kube.wait_for(wave_1, f"{name}: wave-1 open", timeout_s=240, interval_s=0.2)
        in_wave_1 = _in_wave(control_plane, fleet_api, opened, "wave-1")
        still = recorder.snapshot()[-1].clusters
        # The one of wave-1 whose Release has not moved yet (the others may have seen the wave).
        cut_key = next((k for k in in_wave_1 if still[k][0] == NEW), None)
        assert cut_key is not None, (in_wave_1, still)
        index = [f"{ns}/{n}" for ns, n in CLUSTERS].index(cut_key)
        paths[index].cut()
        cut_at = time.monotonic()
        halted = _wait_phase(control_plane, "Halted", timeout_s=240, name=name)
        cut_for = time.monotonic() - cut_at
        report = _reports(control_plane, fleet_api)[cut_key]
        time.sleep(10)
        paths[index].restore()
        # Back: its Release's own upgrade failed meanwhile (upgradePolicy's 30 s deadline) and
        # rolled back to 3.5.0; the failed spec is not tried again, the rollout stays Halted.
        time.sleep(30)
        back = _reports(control_plane, fleet_api)[cut_key]
    finally:
        for cut in paths:
            if cut.is_cut:
                cut.restore()
        recorder.stop()
        print(f"\n{name} ({cut_key if 'cut_key' in locals() else '?'} cut as wave-1 opened):\n{recorder.text()}")
    print(f"cut for {cut_for:.0f}s before Halted: {halted['status']['message']}\nits report then: {report}\nback: {back}")
    samples = recorder.snapshot()
    assert "Complete" not in {s.phase for s in samples}
    assert samples[-1].phase == "Halted"
    assert report.get("phase") == "Failed", report  # admitted: never Skipped
    assert report.get("wave") == "wave-1", report
    assert cut_key in {f["name"] for f in halted["status"]["failed"]}, halted["status"]
    assert cut_key not in {f["name"] for f in halted["status"].get("skipped", [])}
    assert back.get("phase") == "Failed", back
    for key in samples[-1].clusters:
        charts = [chart for chart, _ in itertools.groupby(s.clusters[key][0] for s in samples)]
        if key == cut_key:
            assert charts == [NEW, OLD, NEW], (key, charts)  # admitted, then its own rollback
        elif key in in_wave_1 or key == CANARY:
            assert charts == [NEW, OLD], (key, charts)  # admitted: moved, never back
        else:
            assert charts == [NEW], (key, charts)  # never admitted: never moved
    control_plane.kube.delete("clusterplugin.dev/v1alpha1", "ClusterPluginRollout", name)
