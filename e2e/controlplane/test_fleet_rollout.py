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


def _composite(cp: ControlPlane, providers: Providers, api: dict, workloads: SharedEtcdClusters, index: int, tmp: Path) -> Composite:  # noqa: PLR0917
    namespace, name = CLUSTERS[index]
    kubeconfig = workloads.kubeconfig_of(index, name)
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
    tmp_path_factory: pytest.TempPathFactory,
) -> list[Composite]:
    tmp = tmp_path_factory.mktemp("fleet-required")
    composites = [_composite(control_plane, helm_providers, fleet_api, workloads, i, tmp) for i in range(len(CLUSTERS))]
    for c in composites:
        c.create(staged=False)
    for c in composites:
        c.wait_ready(timeout_s=240)
    return composites


def _rollout(version: str, on_failure: str) -> dict[str, Any]:
    xrd = yaml.safe_load((ROOT / "apis" / "v2" / "rollout-definition.yaml").read_text())
    return {
        "apiVersion": f"{xrd['spec']['group']}/{xrd['spec']['versions'][0]['name']}",
        "kind": "ClusterPluginRollout",
        "metadata": {"name": ROLLOUT},
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


def _wait_phase(cp: ControlPlane, phase: str, timeout_s: float) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        got = cp.kube.get("clusterplugin.dev/v1alpha1", "ClusterPluginRollout", ROLLOUT)
        return got if (got or {}).get("status", {}).get("phase") == phase else None

    return cp.kube.wait_for(reached, f"rollout {phase}", timeout_s=timeout_s, interval_s=0.5)


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
