"""Real helm installs: provider-helm out of cluster, the vendored charts into a workload cluster faked by kwok.

examples/selfhosted-full in namespace team-h on the session's control plane, with every
chart's repository pointed at the loopback chart server and ``<cluster>-kubeconfig``
holding the workload cluster's kubeconfig. The driver plays CAPI and the AWS provider;
the Releases are provider-helm's: it pulls each chart, runs helm install into the workload
cluster (``wait: true`` waiting on Deployment, DaemonSet and Job status computed by the
real controllers from kwok's pods) and reports the Release Ready itself.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.controlplane.checks import assert_converged_like_the_world, assert_creations_follow_gates
from e2e.controlplane.composite import Composite, conditions
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.day_two import PhaseRecorder, latest_revision, plugin_entry, revision_event
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane
from e2e.controlplane.timeline import StatusTimeline
from e2e.controlplane.workload import (
    ChartServer,
    HelmHistory,
    WorkloadCluster,
    workload_available,
)
from function import upgrade

NAMESPACE = "team-h"
EXAMPLE = "selfhosted-full"
# The vendored older aws-vpc-cni chart (tests/fixtures/older-charts) and the default.
OLD_CNI, NEW_CNI = "1.21.1", "1.22.4"
SOAK_S, DEADLINE_S = 10, 30


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkloadCluster]:
    with running_control_plane(tmp_path_factory.mktemp("workload"), WorkloadCluster) as cluster:
        assert isinstance(cluster, WorkloadCluster)
        yield cluster


@pytest.fixture(scope="module")
def helm_history(workload: WorkloadCluster) -> Iterator[HelmHistory]:
    history = HelmHistory(workload.kube)
    history.start()
    yield history
    history.stop()


# provider-helm, the played providers and the workload cluster outlive the API: removing it
# deletes what is left, and a Release whose cluster is gone would never be uninstalled.
@pytest.fixture(scope="module")
def helm_api(
    control_plane: ControlPlane, helm_providers: Providers, chart_server: ChartServer, workload: WorkloadCluster
) -> Iterator[dict]:
    """apis/v2 with every chart's repository the loopback chart server."""
    def from_the_chart_server(step_input: dict) -> None:
        for chart in step_input["charts"].values():
            chart["repository"] = chart_server.url

    composition = control_plane.install_api("v2", edit_input=from_the_chart_server)
    yield composition
    control_plane.remove_api("v2")


@pytest.fixture(scope="module", autouse=True)
def timeline(control_plane: ControlPlane, helm_api: dict) -> Iterator[StatusTimeline]:
    """Every change of the Releases' and the XR's conditions from before the XR is created, for
    the readiness tests to show."""
    recorder = StatusTimeline(control_plane.kube, (helm_api["spec"]["compositeTypeRef"]["apiVersion"], helm_api["spec"]["compositeTypeRef"]["kind"]))
    recorder.start()
    yield recorder
    recorder.stop()


@pytest.fixture(scope="module")
def demo(
    control_plane: ControlPlane,
    helm_api: dict,
    helm_providers: Providers,
    workload: WorkloadCluster,
    helm_history: HelmHistory,
) -> Iterator[Composite]:
    composite = Composite(
        control_plane, helm_providers, EXAMPLE, helm_api, NAMESPACE, workload_kubeconfig=workload.inline_kubeconfig("demo")
    )
    # Day two (test_day_two_*): the CNI starts one chart version behind the default, and
    # upgrades soak 10 s and fail after 30 s.
    spec = composite.manifest["spec"]
    spec["networking"]["amazonVPC"]["version"] = OLD_CNI
    spec["upgradePolicy"] = {"soakSeconds": SOAK_S, "progressDeadlineSeconds": DEADLINE_S}
    composite.converge(timeout_s=240)
    yield composite


@pytest.fixture(scope="module")
def phases(demo: Composite) -> Iterator[PhaseRecorder]:
    """Each change of the plugins' day-two fields from the converged XR on."""
    recorder = PhaseRecorder(demo.xr)
    recorder.start()
    yield recorder
    recorder.stop()


def releases(composite: Composite) -> dict[str, str]:
    """composition-resource-name -> helm release name, of the composed Releases."""
    return {
        name: obj["metadata"]["annotations"]["crossplane.io/external-name"]
        for name, obj in composite.composed().items()
        if obj["kind"] == "Release"
    }


def test_provider_helm_installs_every_release_and_the_xr_converges(
    demo: Composite, workload: WorkloadCluster, helm_history: HelmHistory, chart_server: ChartServer
) -> None:
    assert_converged_like_the_world(demo)
    composed = demo.composed()
    named = releases(demo)
    assert set(named) == {
        "ccm-release", "cni-release", "cert-manager-release", "pod-identity-webhook-release",
        "ebs-release", "efs-release", "lbc-release",
    }, named
    for name in named:
        status = composed[name]["status"]
        assert status["atProvider"]["state"] == "deployed", status
        # The CNI's Release was upgraded since: test_the_xr_is_ready_before_provider_helm_polls.
        if name != "cni-release":
            assert conditions(composed[name])["Ready"]["reason"] == "Available", status
    # Each chart came from the loopback server (provider-helm's chart cache was emptied).
    pulled = {path.lstrip("/") for path in chart_server.requests}
    for name in named:
        chart = composed[name]["spec"]["forProvider"]["chart"]
        assert any(p.startswith(chart["name"] + "-") and p.endswith(".tgz") for p in pulled), (chart, pulled)
    # The workload cluster runs every chart's Deployments and DaemonSets, available.
    namespaces = {composed[n]["spec"]["forProvider"]["namespace"] for n in named}
    workloads = workload.workloads(namespaces)
    assert len(workloads) >= len(named), [w["metadata"]["name"] for w in workloads]
    not_up = [f"{w['kind']} {w['metadata']['name']}: {w.get('status')}" for w in workloads if not workload_available(w)]
    assert not not_up, "\n".join(not_up)
    assert not helm_history.errors, helm_history.errors
    print(f"\nwebhook configurations removed from the workload cluster: {helm_history.removed_webhooks}")


def test_the_xr_is_ready_before_provider_helm_polls_the_upgraded_cni(
    demo: Composite, helm_history: HelmHistory, timeline: StatusTimeline
) -> None:
    """Once the webhook serves, the function upgrades the CNI's Release (aws-node restarts for
    IRSA). provider-helm, at its default poll, says that Release Ready again only 10 minutes
    later; the XR is Ready without waiting for it, on what provider-helm wrote after the
    upgrade: Synced at the Release's generation and the release deployed.

    The restart is also a day-two move that soaks (spec.upgradePolicy.soakSeconds, 10 s here).
    The XR does not wait for the soak: a Release that runs its spec counts as ready for the gates
    and the XR's readiness, and `ChartsHealthy` says `Upgrading` until the soak ends
    (docs/architecture.md, "Day two: upgrades"). The function's record of the move on the Release
    (``runningSince``) is a metadata write, which has provider-helm look again at once: then this
    run cannot show the 10-minute poll not being waited for, only that the XR was Ready before
    the soak ended and the move ended Healthy.

    The XR is read as Crossplane settles it (Composite.settled_xr): a reconcile that read the
    XR from its cache one write behind writes the Ready condition of before the XR was Ready
    (``Unready resources: lbc-release``, the last Release to turn Ready) for a moment."""
    cni = demo.composed()["cni-release"]
    cond = conditions(cni)
    assert helm_history.first(releases(demo)["cni-release"], status="pending-upgrade") is not None, helm_history.timeline()
    assert cni["status"]["atProvider"]["revision"] == 2, cni["status"]
    xr_ready = conditions(demo.settled_xr())["Ready"]
    assert xr_ready["status"] == "True", f"{xr_ready}\n{timeline.text()}"
    assert demo.ready_at is not None
    if cond["Ready"]["status"] == "True":
        # provider-helm looked again: prompted by the function's record write, or after the XR was
        # Ready. The function saw the new spec run: the move soaks, or it ended Healthy and the XR
        # did not wait past the soak's end for anything (second-granular times of two clocks, the
        # function's and Crossplane's).
        record = json.loads(cni["metadata"]["annotations"][upgrade.RECORD_ANNOTATION])
        assert record["version"] == cni["spec"]["forProvider"]["chart"]["version"], record
        if record["phase"] == "Upgrading":
            assert record.get("runningSince"), record
        else:
            assert record["phase"] == "Healthy", record
            healthy_at = dt.datetime.fromisoformat(record["since"]).timestamp()
            ready = dt.datetime.fromisoformat(demo.ready_at).timestamp()
            assert ready <= healthy_at + 2, (record, demo.ready_at, timeline.text())
    else:
        assert cond["Ready"]["reason"] == "Unavailable", cond
        assert cond["Synced"]["status"] == "True", cond
        assert cond["Synced"]["observedGeneration"] == cni["metadata"]["generation"], (cond, cni["metadata"])
    print(f"\ncni-release after the upgrade: metadata.generation {cni['metadata']['generation']}, conditions {cni['status']['conditions']}")


def test_releases_install_only_after_what_they_wait_for_is_deployed(demo: Composite, helm_history: HelmHistory) -> None:
    """Crossplane's creations respect the gates with provider-helm's real readiness, and in the
    workload cluster each helm install began (its release Secret pending-install) only after
    helm's wait of every Release it depends on had ended (that release's Secret deployed)."""
    deps = assert_creations_follow_gates(demo)
    named = releases(demo)
    checked = []
    problems = []
    for node, needs in deps.items():
        if node not in named:
            continue
        began = helm_history.first(named[node], status="pending-install")
        assert began is not None, f"{named[node]}: no pending-install release Secret seen"
        for dep in needs & set(named):
            deployed = helm_history.first(named[dep], status="deployed")
            checked.append((node, dep))
            if deployed is None or not deployed < began:
                problems.append(f"{named[node]} install began at {began}, {named[dep]} deployed at {deployed}")
    assert not problems, "\n".join(problems)
    # The gates of docs/architecture.md between Releases, as real helm saw them.
    for pair in (
        ("cert-manager-release", "ccm-release"),
        ("cert-manager-release", "cni-release"),
        ("pod-identity-webhook-release", "cert-manager-release"),
        ("ebs-release", "pod-identity-webhook-release"),
        ("ebs-release", "cni-release"),
    ):
        assert pair in checked, (pair, sorted(checked))
    # Once the pod identity webhook serves, the function restarts the CNI's pods (a values
    # change: one helm upgrade) so that they get the role's credentials.
    restarted = helm_history.first(named["cni-release"], status="pending-upgrade")
    webhook_deployed = helm_history.first(named["pod-identity-webhook-release"], status="deployed")
    assert restarted is not None and webhook_deployed is not None and webhook_deployed < restarted, helm_history.timeline()
    print("\n" + "\n".join(helm_history.timeline()))


# --- day two (function/upgrade.py) ---------------------------------------------------------


def _wait_plugin(demo: Composite, plugin: str, done: Any, what: str, timeout_s: float = 180) -> dict[str, Any]:
    """Until ``done(status.plugins[plugin])``; that entry."""
    return demo.kube.wait_for(
        lambda: (e if done(e := plugin_entry(demo.xr(), plugin)) else None), f"{plugin}: {what}", timeout_s=timeout_s, interval_s=0.5
    )


def _patch_spec(demo: Composite, spec: dict[str, Any]) -> None:
    xr = demo.xr()
    assert xr is not None
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": spec}, NAMESPACE)


def _release_generations(demo: Composite) -> dict[str, int]:
    return {n: int(o["metadata"]["generation"]) for n, o in demo.composed().items() if o["kind"] == "Release"}


def test_day_two_no_release_is_written_again_once_converged(demo: Composite) -> None:
    """After convergence the API server records no spec write by the function to any Release.

    provider-helm stores waitTimeout as a Go duration: the function once wrote "10m", which
    came back "10m0s", a second spec version of every wait: true Release. Five XR writes (each
    a reconcile, each a server-side apply of every composed resource) change no generation,
    and the wait: true Releases the function never changed are at their first one.
    """
    _wait_plugin(demo, "vpc-cni", lambda e: e.get("upgrade") == "Healthy", "the IRSA restart soaked")
    before = _release_generations(demo)
    xr = demo.xr()
    assert xr is not None
    for i in range(5):
        demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"metadata": {"annotations": {"e2e/touch": str(i)}}}, NAMESPACE)
        time.sleep(2)
    after = _release_generations(demo)
    print(f"\nRelease generations after 5 reconciles: {after}")
    assert after == before
    # At most two: the function's one, and provider-helm's own late initialization (it writes
    # chart.pullSecretRef: {} into the spec once); a waitTimeout the provider rewrites would be
    # one more on every reconcile, and ``after == before`` above would fail.
    for name in ("ccm-release", "cert-manager-release", "pod-identity-webhook-release"):
        assert after[name] <= 2, (name, after)


def test_day_two_a_cni_upgrade_moves_nothing_that_depends_on_it_until_helm_deployed_it(
    demo: Composite, helm_history: HelmHistory, phases: PhaseRecorder
) -> None:
    """One change: the CNI to the default version and new EBS values. The CNI moves first;
    EBS (gated on the CNI) only once helm deployed the CNI's new revision and it soaked."""
    named = releases(demo)
    cni, ebs = named["cni-release"], named["ebs-release"]
    cni_revision, ebs_revision = latest_revision(helm_history, cni), latest_revision(helm_history, ebs)
    assert plugin_entry(demo.xr(), "vpc-cni")["version"] == OLD_CNI
    _patch_spec(demo, {"networking": {"amazonVPC": {"version": None}}, "storage": {"ebs": {"values": {"controller": {"logLevel": 3}}}}})
    moved = _wait_plugin(demo, "vpc-cni", lambda e: e.get("upgrade") == "Healthy" and e.get("version") == NEW_CNI, f"Healthy at {NEW_CNI}")
    assert moved["lastHealthyVersion"] == NEW_CNI
    _wait_plugin(demo, "ebs-csi", lambda e: e.get("upgrade") == "Healthy" and latest_revision(helm_history, ebs) > ebs_revision, "Healthy with new values")
    cni_deployed = revision_event(helm_history, cni, cni_revision + 1, "deployed")
    ebs_began = revision_event(helm_history, ebs, ebs_revision + 1, "pending-upgrade")
    print("\n" + "\n".join(helm_history.timeline()) + "\n" + phases.text())
    assert cni_deployed is not None and ebs_began is not None
    # Helm's own order in the workload cluster: the CNI's new revision deployed, then (after
    # its soak) the EBS upgrade began.
    assert cni_deployed.revision < ebs_began.revision, (cni_deployed, ebs_began)
    assert ebs_began.at - cni_deployed.at >= SOAK_S - 1, (cni_deployed, ebs_began)
    assert phases.phases("vpc-cni")[-2:] == ["Upgrading", "Healthy"], phases.text()


def test_day_two_a_chart_version_the_repository_lacks_is_rolled_back(
    demo: Composite, helm_history: HelmHistory, phases: PhaseRecorder
) -> None:
    named = releases(demo)
    cni = named["cni-release"]
    revision = latest_revision(helm_history, cni)
    _patch_spec(demo, {"networking": {"amazonVPC": {"version": "9.9.9"}}})
    entry = _wait_plugin(demo, "vpc-cni", lambda e: e.get("upgrade") == "RolledBack", "RolledBack", timeout_s=DEADLINE_S + 120)
    print("\n" + phases.text())
    # The recorder polls on its own: let it see what the XR said.
    demo.kube.wait_for(lambda: phases.phases("vpc-cni")[-1:] == ["RolledBack"], "RolledBack recorded", timeout_s=10)
    assert phases.phases("vpc-cni")[-3:] == ["Upgrading", "RollingBack", "RolledBack"], phases.text()
    # provider-helm's own words, and the way forward.
    assert 'version "9.9.9" not found' in entry["message"], entry
    assert "clusterplugin.dev/retry-upgrade" in entry["message"], entry
    assert entry["version"] == NEW_CNI and entry["lastHealthyVersion"] == NEW_CNI
    release = demo.composed()["cni-release"]
    assert release["spec"]["forProvider"]["chart"]["version"] == NEW_CNI
    # helm never ran the missing chart: no revision since.
    assert latest_revision(helm_history, cni) == revision, helm_history.timeline()
    # No loop: while the spec still asks for 9.9.9, the Release is not written again.
    generation = release["metadata"]["generation"]
    time.sleep(10)
    assert demo.composed()["cni-release"]["metadata"]["generation"] == generation
    assert demo.xr()["status"]["upgrade"] == "RolledBack"


def test_day_two_hold_keeps_refused_values_and_moves_no_other_chart(
    demo: Composite, helm_history: HelmHistory, phases: PhaseRecorder
) -> None:
    """EBS values its chart's schema refuses, with onFailure Hold: EBS keeps them, the load
    balancer controller's change waits, until a person puts EBS's values right."""
    named = releases(demo)
    ebs = named["ebs-release"]
    _patch_spec(
        demo,
        {
            "networking": {"amazonVPC": {"version": None}},
            "upgradePolicy": {"onFailure": "Hold"},
            "storage": {"ebs": {"values": {"controller": {"logLevel": "loud"}}}},
        },
    )
    failed = _wait_plugin(demo, "ebs-csi", lambda e: e.get("upgrade") == "Failed", "Failed", timeout_s=DEADLINE_S + 120)
    assert "onFailure: Hold" in failed["message"], failed
    assert "logLevel" in failed["message"], failed  # helm's schema error, quoted
    assert demo.composed()["ebs-release"]["spec"]["forProvider"]["values"]["controller"]["logLevel"] == "loud"
    lbc_generation = demo.composed()["lbc-release"]["metadata"]["generation"]
    _patch_spec(demo, {"ingress": {"awsLoadBalancerController": {"values": {"replicaCount": 1}}}})
    held = _wait_plugin(demo, "aws-load-balancer-controller", lambda e: "held" in e.get("message", ""), "held back")
    time.sleep(10)
    assert demo.composed()["lbc-release"]["metadata"]["generation"] == lbc_generation, held
    assert demo.xr()["status"]["upgrade"] == "Failed"
    # A person acts: EBS's values put right. EBS moves, then the controller.
    revision = latest_revision(helm_history, ebs)
    _patch_spec(demo, {"storage": {"ebs": {"values": {"controller": {"logLevel": 3}}}}})
    _wait_plugin(demo, "ebs-csi", lambda e: e.get("upgrade") == "Healthy", "EBS Healthy", timeout_s=240)
    # The controller waited for EBS (one move at a time): only then does its own move run.
    demo.kube.wait_for(
        lambda: demo.composed()["lbc-release"]["metadata"]["generation"] > lbc_generation,
        "the controller's values written",
        timeout_s=240,
    )
    _wait_plugin(demo, "aws-load-balancer-controller", lambda e: e.get("upgrade") == "Healthy", "Healthy", timeout_s=240)
    print("\n" + phases.text() + "\n" + "\n".join(helm_history.timeline()))
    assert plugin_entry(demo.xr(), "ebs-csi")["upgrade"] == "Healthy"
    assert demo.composed()["lbc-release"]["spec"]["forProvider"]["values"]["replicaCount"] == 1
    # EBS's values "loud" never reached helm's release history: refused before a revision.
    assert latest_revision(helm_history, ebs) == revision


def test_deleting_the_xr_uninstalls_in_usage_order(demo: Composite, workload: WorkloadCluster, helm_history: HelmHistory) -> None:
    composed = demo.composed()
    named = releases(demo)
    namespaces = {composed[n]["spec"]["forProvider"]["namespace"] for n in named}
    usages = [
        o["spec"] for o in composed.values() if o["kind"] == "Usage" and o["spec"]["of"]["kind"] == "Release" and o["spec"]["by"]["kind"] == "Release"
    ]
    assert usages, "no Usage between Releases was composed"
    xr = demo.xr()
    assert xr is not None
    demo.kube.delete(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], NAMESPACE)
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in composed.values()}
    demo.kube.wait_for(
        lambda: all(demo.kube.get(a, k, n, NAMESPACE) is None for a, k, n in names),
        "every composed resource deleted",
        timeout_s=240,
        interval_s=1,
    )
    by_name = {o["metadata"]["name"]: named[n] for n, o in composed.items() if n in named}
    problems = []
    for spec in usages:
        of, by = by_name[spec["of"]["resourceRef"]["name"]], by_name[spec["by"]["resourceRef"]["name"]]
        of_gone, by_gone = helm_history.first(of, event="DELETED"), helm_history.first(by, event="DELETED")
        if of_gone is None or by_gone is None or not by_gone < of_gone:
            problems.append(f"{by} uninstalled at {by_gone}, {of} (which it uses) at {of_gone}")
    assert not problems, "\n".join(problems)
    print("\n" + "\n".join(helm_history.timeline()))
    # Helm removed what it installed: no release Secret, Deployment or DaemonSet is left.
    assert {e.release for e in helm_history.events if e.event == "DELETED"} >= set(named.values())
    left = workload.kube.list("v1", "Secret", labels={"owner": "helm"})
    assert not left, [s["metadata"]["name"] for s in left]
    remaining = [w["metadata"]["name"] for w in workload.workloads(namespaces)]
    assert not remaining, remaining
    assert demo.xr() is None
