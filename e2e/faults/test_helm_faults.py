"""Faults between provider-helm and the workload cluster, on real helm installs.

examples/selfhosted-full (namespaced, ``faults-h``) on the fault suite's control plane, the AWS
provider played, the Releases provider-helm's: it pulls each chart from the loopback chart
server and installs it into a workload cluster faked by kwok (``e2e/controlplane/workload.py``),
reached through a path that can be cut (``NetCut``: ``<cluster>-kubeconfig`` points at it).
provider-helm runs with ``--timeout`` of ``HELM_TIMEOUT`` (how long a helm command may run; 10
minutes by default), so that a cut of ``CUT_S`` outlasts every timeout on its way: the command's,
client-go's TLS handshake (10 s), and the reconciles that fail meanwhile back off. ``make faults``
cuts for longer than the default 10 minutes.

1. The workload cluster's API cut mid-creation: in the middle of the CNI's helm install (its
   release Secret pending-install), for ``CUT_S``; then restored. helm leaves the release failed
   or pending; provider-helm uninstalls it to retry and would install it again only at its poll
   (10 minutes): the function's ``clusterplugin.dev/install-try`` has it install again at once.
2. provider-helm stopped mid-withdrawal of a removed plugin (EFS): the Release is marked for
   deletion and cannot be uninstalled; what it uses (its role and their Usages) must stay.
3. provider-helm stopped mid-deletion of the cluster: the Releases carry the orphan policy; once
   it is back, they are let go without an uninstall (no helm release Secret is touched in the
   workload cluster) and everything is withdrawn.

After each: the assertions of ``e2e/faults/invariants.py``, as in test_control_plane_faults.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from e2e.aws.deletion import DeletionWatch
from e2e.controlplane.checks import assert_converged_like_the_world, gone_without_efs
from e2e.controlplane.composite import Composite, composed_ready, conditions
from e2e.controlplane.conftest import running_control_plane
from e2e.controlplane.harness import ControlPlane, StartError
from e2e.controlplane.processes import Process
from e2e.controlplane.workload import ChartServer, HelmHistory, WorkloadCluster, provider_helm
from e2e.faults.control import Parts
from e2e.faults.durations import LONG, seconds
from e2e.faults.invariants import (
    StatusWatch,
    cluster_deleted,
    honesty_problems,
    leftovers,
    uninstalls,
    until_converged,
    what_it_said,
    withdrawal_problems,
)
from e2e.faults.netcut import NetCut
from e2e.faults.report import Row
from function import upgrade
from function.flavour import ORPHAN_MANAGEMENT_POLICIES

T = TypeVar("T")
EXAMPLE = "selfhosted-full"
NAMESPACE = "faults-h"
# make faults: provider-helm's default --timeout, and a cut past it.
HELM_TIMEOUT = "10m" if LONG else "30s"
CUT_S = seconds(60, 660)
DOWN_S = seconds(15, 150)
CONVERGE_S = seconds(420, 1200)


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkloadCluster]:
    with running_control_plane(tmp_path_factory.mktemp("faults-workload"), WorkloadCluster) as cluster:
        assert isinstance(cluster, WorkloadCluster)
        yield cluster


@pytest.fixture(scope="module")
def path(workload: WorkloadCluster) -> Iterator[NetCut]:
    """The way provider-helm reaches the workload cluster's API server."""
    host, port = workload.server.removeprefix("https://").rsplit(":", 1)
    cut = NetCut(host, int(port)).start()
    yield cut
    cut.stop()


@pytest.fixture(scope="module")
def helm_history(workload: WorkloadCluster) -> Iterator[HelmHistory]:
    history = HelmHistory(workload.kube)
    history.start()
    yield history
    history.stop()


@pytest.fixture(scope="module")
def chart_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChartServer]:
    server = ChartServer(tmp_path_factory.mktemp("faults-charts"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def real_provider_helm(fault_control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    try:
        process = provider_helm(fault_control_plane, tmp_path_factory.mktemp("faults-provider-helm"), [f"--timeout={HELM_TIMEOUT}"])
    except (StartError, TimeoutError) as err:
        pytest.fail(f"provider-helm did not start: {err}", pytrace=False)
    yield process
    process.stop()
    del fault_control_plane.processes[process.name]  # stopped on purpose: not a process that died


@pytest.fixture(scope="module")
def played_aws(fault_control_plane: ControlPlane, real_provider_helm: Process) -> Iterator[DeletionWatch]:
    """The played AWS provider; Releases are provider-helm's (only watched)."""
    watch = DeletionWatch(fault_control_plane.kube, namespaced=True, real_kinds=frozenset({"Release"}))
    watch.start()
    yield watch
    watch.stop()


@pytest.fixture(scope="module")
def helm_api(
    fault_control_plane: ControlPlane, played_aws: DeletionWatch, chart_server: ChartServer, path: NetCut
) -> Iterator[dict]:
    """apis/v2 with every chart's repository the loopback chart server."""
    def from_the_chart_server(step_input: dict) -> None:
        for chart in step_input["charts"].values():
            chart["repository"] = chart_server.url

    composition = fault_control_plane.install_api("v2", edit_input=from_the_chart_server)
    yield composition
    fault_control_plane.remove_api("v2")


@pytest.fixture(scope="module")
def demo(fault_control_plane: ControlPlane, helm_api: dict, played_aws: DeletionWatch, workload: WorkloadCluster, path: NetCut) -> Iterator[Composite]:
    kubeconfig = workload.inline_kubeconfig("demo", server=f"https://{path.address}")
    yield Composite(fault_control_plane, played_aws, EXAMPLE, helm_api, NAMESPACE, workload_kubeconfig=kubeconfig)


def releases(composite: Composite) -> dict[str, dict[str, Any]]:
    return {n: o for n, o in composite.composed().items() if o["kind"] == "Release"}


def test_workload_api_cut_mid_creation(demo: Composite, path: NetCut, helm_history: HelmHistory) -> None:
    row = Row(f"workload cluster's API unreachable ({CUT_S} s, provider-helm --timeout {HELM_TIMEOUT})", "mid-creation")
    demo.create(staged=True)
    demo.wait_stalled(timeout_s=CONVERGE_S)
    demo.control_plane_revisions["initialized"] = demo.capi.set_control_plane(initialized=True, available=False)
    demo.control_plane_revisions["available"] = demo.capi.set_control_plane(initialized=True, available=True)

    def cni_installing() -> bool:
        cni = releases(demo).get("cni-release")
        if cni is None:
            return False
        name = cni["metadata"]["annotations"]["crossplane.io/external-name"]
        return helm_history.first(name, status="pending-install") is not None

    demo.kube.wait_for(cni_installing, "the CNI's helm install under way", timeout_s=CONVERGE_S, interval_s=0.1)
    watch = StatusWatch(demo).start()
    path.cut()
    cut_at = time.monotonic()
    got = releases(demo)
    cni_name = got["cni-release"]["metadata"]["annotations"]["crossplane.io/external-name"]
    cut_off = helm_history.first(cni_name, status="deployed") is None
    row.state = f"{sum(composed_ready(o) for o in got.values())} of {len(got)} Releases composed so far deployed" + (
        "; the CNI's helm install cut off" if cut_off else ""
    )
    time.sleep(CUT_S)
    during = watch.between(cut_at, time.monotonic())
    path.restore()
    restored_at = time.monotonic()
    until_converged(demo, lambda: demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True))
    row.down_s, row.recovery_s = restored_at - cut_at, time.monotonic() - restored_at
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")
    print("\n".join(helm_history.timeline()))
    cni = demo.composed()["cni-release"]
    print(f"cni-release: status.failed {cni['status'].get('failed')}, annotations {cni['metadata']['annotations']}")
    if cut_off:
        # helm could not finish the install: provider-helm uninstalled it to retry, and the
        # function had it install again at once (else: at its poll, 10 minutes on).
        assert upgrade.INSTALL_TRY_ANNOTATION in cni["metadata"]["annotations"], helm_history.timeline()

    # The cut was met: provider-helm's connections were held, the Releases reported it.
    assert path.held > 0
    errors = {s.synced_message for s in during if s.synced_message} | {m for s in during for m in s.waiting}
    assert any(s.unready for s in during), what_it_said(during)
    print(f"during the cut: {sorted(errors)[:5]}")
    row.holds("converged", [f"{t}={c['status']}" for t, c in conditions(demo.settled_xr()).items() if c["status"] != "True"])
    assert_converged_like_the_world(demo)
    row.holds("nothing deleted", withdrawal_problems(demo, demo.providers, demo.composed(), set()))
    row.holds("honest status", honesty_problems(watch.between(cut_at, time.monotonic()), ready_from=restored_at))
    row.done()


def test_provider_helm_stopped_mid_withdrawal(demo: Composite, parts: Parts, helm_history: HelmHistory) -> None:
    row = Row("provider-helm stopped, started", "mid-withdrawal (EFS removed)")
    before = demo.composed()
    expected_gone = gone_without_efs(demo, before)
    since = len(demo.providers.history(NAMESPACE))
    efs = before["efs-release"]
    watch = StatusWatch(demo).start()
    outage = parts.stop("provider-helm")
    xr = demo.xr()
    assert xr is not None
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": {"storage": {"efs": None}}}, NAMESPACE)
    demo.kube.wait_for(
        lambda: (demo.kube.get(efs["apiVersion"], "Release", efs["metadata"]["name"], NAMESPACE) or {}).get("metadata", {}).get("deletionTimestamp"),
        "efs-release marked for deletion",
        timeout_s=CONVERGE_S,
    )
    time.sleep(DOWN_S)
    # What the Release uses stays while helm cannot uninstall it.
    held = set(demo.composed()) & expected_gone
    row.state = f"efs-release marked for deletion; {len(held)} of {len(expected_gone)} withdrawn resources held back"
    parts.start(outage)

    def withdrawn() -> dict[str, Any]:
        demo.kube.wait_for(lambda: not (expected_gone & set(demo.composed())), f"{sorted(expected_gone)} deleted", timeout_s=CONVERGE_S)
        return demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True)

    until_converged(demo, withdrawn)
    row.down_s, row.recovery_s = outage.seconds, outage.since_repair()
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")

    assert {"efs-role", "efs-role-attachment"} <= held, held
    # While helm could not uninstall, the XR (Ready: every plugin it asks for is) said what it
    # still withdrew.
    down = watch.between(outage.down_at, outage.started_at or time.monotonic())
    assert any("still withdrawing" in s.plugins_message and "efs-release" in s.plugins_message for s in down), [s.plugins_message for s in down]
    row.holds("converged", [f"{t}={c['status']}" for t, c in conditions(demo.settled_xr()).items() if c["status"] != "True"])
    # Uninstalled from the workload cluster (helm's release Secrets deleted), in Usage order.
    assert helm_history.first(efs["metadata"]["annotations"]["crossplane.io/external-name"], event="DELETED") is not None
    row.holds("only EFS withdrawn, in Usage order, nothing refused", withdrawal_problems(demo, demo.providers, before, expected_gone, since=since))
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=outage.down_at))
    row.done()


def test_provider_helm_stopped_mid_cluster_deletion(demo: Composite, parts: Parts, path: NetCut, helm_history: HelmHistory) -> None:
    row = Row("provider-helm stopped, started", "mid-deletion of the cluster")
    before = demo.composed()
    named = {n: o for n, o in before.items() if o["kind"] == "Release"}
    since = len(demo.providers.history(NAMESPACE))
    helm_events = len(helm_history.events)
    demo.capi.delete()
    demo.kube.wait_for(
        lambda: all(o["spec"].get("managementPolicies") == list(ORPHAN_MANAGEMENT_POLICIES) for o in releases(demo).values()),
        "every Release orphaned",
        timeout_s=CONVERGE_S,
    )
    # CAPI is done: the Cluster and its kubeconfig go, and the workload cluster with them.
    path.cut()
    demo.capi.finish_deletion()
    demo.kube.wait_for(demo.capi.gone, "the Cluster and what it owned gone", timeout_s=120)
    watch = StatusWatch(demo).start()
    demo.kube.wait_for(
        lambda: any(o["metadata"].get("deletionTimestamp") for o in releases(demo).values()) or not releases(demo),
        "the Releases marked for deletion",
        timeout_s=CONVERGE_S,
        interval_s=0.1,
    )
    outage = parts.stop("provider-helm")
    row.state = f"{len(named)} Releases marked for deletion, {len(before) - len(named)} other resources left"
    time.sleep(DOWN_S)
    parts.start(outage)

    done = cluster_deleted(demo, CONVERGE_S)
    row.down_s, row.recovery_s = outage.seconds, outage.since_repair()
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")

    row.holds("ClusterDeleted, nothing left", leftovers(demo))
    # Nothing was uninstalled: helm's release Secrets in the workload cluster are untouched.
    touched = [f"{e.release} {e.event} {e.status}" for e in helm_history.events[helm_events:]]
    row.holds("nothing uninstalled", touched + uninstalls(demo.providers, NAMESPACE, since))
    row.holds("withdrawn in Usage order, nothing refused", withdrawal_problems(demo, demo.providers, before, set(before), since=since))
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=None))
    row.done()
    demo.kube.delete(done["apiVersion"], done["kind"], done["metadata"]["name"], NAMESPACE)
    path.restore()
