"""Faults of the control plane's own parts, each at a point of one ClusterPlugin's lifecycle.

examples/selfhosted-full (namespaced) on the fault suite's control plane, CAPI and the providers
played by the driver, so what is tested is the function, Crossplane core, the API server and
etcd. One XR (``faults-a``) goes through its lifecycle with a fault at each point:

1. the function SIGKILLed mid-creation: the issuer, roles and the Releases gated on an
   initialized control plane are Ready, those gated on an available one not yet composed; the
   control plane turns available while the function is down;
1b. the function SIGKILLed mid-upgrade: the load balancer controller moved to another chart
   version (its IAM with it), its Release running the new spec and soaking; the function's only
   memory of the move is the record on the Release;
2. Crossplane core SIGKILLed mid-withdrawal of a removed plugin (EFS): the first layer is
   marked for deletion, its Usages and what they protect are not;
3. kube-apiserver and etcd SIGKILLed mid-deletion of the cluster: the Cluster is gone and the
   first layer withdrawn, the rest not.

A second XR (``faults-b``) has the function SIGKILLed at the cluster deletion's ``Gone`` stage,
where the function's only memory is the record it wrote in the XR's status (one call found the
cluster gone; the second, after the restart, must find it gone too before anything goes).

After each repair: converged (Ready with every condition True, equal to the in-memory
Crossplane's result, or ClusterDeleted with nothing left in the API server); nothing deleted but
what the point withdraws; no uninstall while the cluster was being deleted; the Usage order and
no deletion refused; and while the fault lasted, an XR that was never Ready and said what it
waited for. Each row of the fault table records how long the part was down and the time from
its repair to convergence.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from e2e.aws.deletion import DeletionWatch
from e2e.controlplane.checks import assert_converged_like_the_world, gone_without_efs
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ControlPlane
from e2e.faults.control import Outage, Parts
from e2e.faults.durations import seconds
from e2e.faults.invariants import (
    StatusWatch,
    cluster_deleted,
    honesty_problems,
    leftovers,
    uninstalls,
    what_it_said,
    withdrawal_problems,
)
from e2e.faults.report import Row
from function import upgrade
from function.flavour import ORPHAN_MANAGEMENT_POLICIES
from function.spec import UpgradePolicySpec

T = TypeVar("T")
EXAMPLE = "selfhosted-full"
# How long a part stays down: several of the XR's 1 s polls, so Crossplane meets the fault;
# in make faults, past Crossplane's 2-minute reconcile timeout.
DOWN_S = seconds(8, 150)
# Generous: the machine's load, not the function, decides how long a reconcile takes.
CONVERGE_S = seconds(300, 600)
# The load balancer controller's chart the mid-upgrade case moves to (v2.12: IAM moves too).
MOVE_LBC_TO = "1.12.0"
# spec.upgradePolicy.soakSeconds' default: how long a move runs before it is Healthy.
SOAK_S = int(UpgradePolicySpec.model_fields["soak_seconds"].default)
# What selfhosted-full composes only once the control plane is available.
HELD_FOR_AVAILABLE = {"ebs-release", "efs-release", "lbc-release"}


def every_condition_true(xr: dict[str, Any] | None) -> list[str]:
    return [f"{t}={c['status']} {c.get('reason')}: {c.get('message', '')}" for t, c in conditions(xr).items() if c["status"] != "True"]


def state(composite: Composite) -> str:
    composed = composite.composed()
    ready = sum(1 for o in composed.values() if condition_status(o, "Ready") == "True" or o["kind"] in {"Usage", "ProviderConfig"})
    return f"{len(composed)} composed, {ready} Ready"


def ride_out(parts: Parts, outage: Outage, watch: StatusWatch, row: Row, converged: Callable[[], T]) -> T:
    """Keep the part down for DOWN_S, start it again and wait until ``converged`` says so (what
    it returns); the row gets how long the part was down and the time from its repair."""
    time.sleep(DOWN_S)
    parts.start(outage)
    got = converged()
    row.down_s, row.recovery_s = outage.seconds, outage.since_repair()
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")
    return got


def wait_for_event(watch: Providers, namespace: str, since: int, what: set[str], names: set[str] | None = None) -> None:
    """Until the watch records one of ``what`` for one of ``names`` (any composed resource when None)."""
    def seen() -> bool:
        return any(e.what in what and (names is None or e.resource in names) for e in watch.history(namespace)[since:])

    watch.kube.wait_for(seen, f"a {'/'.join(sorted(what))} event in {namespace}", timeout_s=CONVERGE_S, interval_s=0.05)


@pytest.fixture(scope="module")
def demo(fault_control_plane: ControlPlane, played_api: dict, played: DeletionWatch) -> Iterator[Composite]:
    yield Composite(fault_control_plane, played, EXAMPLE, played_api, "faults-a")


def test_function_killed_mid_creation(demo: Composite, parts: Parts) -> None:
    row = Row("function SIGKILLed, restarted", "mid-creation")
    demo.create(staged=True)
    demo.wait_stalled(timeout_s=CONVERGE_S)
    demo.control_plane_revisions["initialized"] = demo.capi.set_control_plane(initialized=True, available=False)
    demo.wait_stalled(timeout_s=CONVERGE_S)
    row.state = f"{state(demo)}; the control plane turns available while the function is down"
    watch = StatusWatch(demo).start()
    outage = parts.crash("function")
    demo.control_plane_revisions["available"] = demo.capi.set_control_plane(initialized=True, available=True)
    ride_out(parts, outage, watch, row, lambda: demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True))

    # The fault was met: what waited for the control plane was composed only once the
    # function was back. Crossplane dials it with waitForReady (internal/xfn/function_runner.go):
    # a call waits for the function to come back, up to the reconcile's 2 minutes; only a call
    # in flight at the kill fails (Synced False, Unavailable). Meanwhile the XR keeps what it said last.
    late = {e.resource: e.at for e in demo.providers.history(demo.namespace) if e.what == "created" and e.resource in HELD_FOR_AVAILABLE}
    assert set(late) == HELD_FOR_AVAILABLE and min(late.values()) > (outage.started_at or 0), (late, outage)
    row.holds("converged", every_condition_true(demo.settled_xr()))
    assert_converged_like_the_world(demo)
    row.holds("nothing deleted", withdrawal_problems(demo, demo.providers, demo.composed(), set()))
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=outage.started_at))
    row.done()


def _upgrade_record(obj: dict[str, Any]) -> dict[str, Any]:
    raw = obj.get("metadata", {}).get("annotations", {}).get(upgrade.RECORD_ANNOTATION)
    return json.loads(raw) if raw else {}


def test_function_killed_mid_upgrade(demo: Composite, parts: Parts) -> None:
    lbc = demo.composed()["lbc-release"]
    running = lbc["spec"]["forProvider"]["chart"]["version"]
    target = MOVE_LBC_TO if running != MOVE_LBC_TO else None  # None: back to the default
    row = Row("function SIGKILLed, restarted", f"mid-upgrade (load balancer controller {running} -> {target or 'default'}, chart and IAM)")
    before = {n: o["metadata"]["generation"] for n, o in demo.composed().items() if o["kind"] == "Release" and n != "lbc-release"}
    xr = demo.xr()
    assert xr is not None
    watch = StatusWatch(demo).start()
    patched_at = time.monotonic()
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": {"ingress": {"awsLoadBalancerController": {"version": target}}}}, demo.namespace)

    def moving() -> dict[str, Any] | None:
        release = demo.composed()["lbc-release"]
        record = _upgrade_record(release)
        return record if record.get("phase") == "Upgrading" and record.get("runningSince") else None

    record = demo.kube.wait_for(moving, "lbc-release running its new chart, soaking", timeout_s=CONVERGE_S, interval_s=0.2)
    moved_to = record["version"]
    outage = parts.crash("function")
    row.state = f"lbc-release runs {moved_to}, soaking since {record['runningSince']}"
    ride_out(parts, outage, watch, row, lambda: demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True))

    after = demo.settled_xr()
    assert after is not None
    entry = next(p for p in after["status"]["plugins"] if p["name"] == "aws-load-balancer-controller")
    row.holds("converged", every_condition_true(after) + [f"{entry}"] * ((entry.get("upgrade"), entry.get("version")) != ("Healthy", moved_to)))
    assert_converged_like_the_world(demo)
    # One move at a time, the other charts untouched; the soak not cut short by the restart.
    moved = {n: g for n, g in ((n, o["metadata"]["generation"]) for n, o in demo.composed().items() if n in before) if g != before[n]}
    samples = watch.between(patched_at, time.monotonic())
    healthy = [s for s in samples if s.readable and s.upgrade == "Healthy" and s.charts_healthy == "True"]
    soak = SOAK_S - 2  # the clocks' seconds
    early = [f"{s.at - patched_at:.0f} s after the patch: Healthy before a {SOAK_S} s soak" for s in healthy[:1] if s.at - patched_at < soak]
    row.holds("no other chart moved, the soak kept", [f"{n} generation {before[n]} -> {g}" for n, g in moved.items()] + early)
    # Said while it lasted: Upgrading, ChartsHealthy not True, every reading until the soak ended.
    during = [s for s in samples if s.readable and s.at < patched_at + soak and s.at > outage.down_at]
    row.holds("honest status", [f"{s.at - patched_at:.0f} s: upgrade {s.upgrade!r}, ChartsHealthy {s.charts_healthy}" for s in during if s.upgrade != "Upgrading" or s.charts_healthy == "True"] + ["no reading while the function was down"] * (not during))
    row.done()


def test_crossplane_killed_mid_withdrawal(demo: Composite, parts: Parts) -> None:
    row = Row("Crossplane core SIGKILLed, restarted", "mid-withdrawal (EFS removed)")
    before = demo.composed()
    expected_gone = gone_without_efs(demo, before)
    since = len(demo.providers.history(demo.namespace))
    xr = demo.xr()
    assert xr is not None
    watch = StatusWatch(demo).start()
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": {"storage": {"efs": None}}}, demo.namespace)
    wait_for_event(demo.providers, demo.namespace, since, {"deleting", "deleted"}, expected_gone)
    outage = parts.crash("crossplane")
    then = demo.providers.history(demo.namespace)[since:]
    gone_then = {e.resource for e in then if e.what == "deleted"}
    marked = {e.resource for e in then if e.what == "deleting"}
    row.state = f"{len(marked)} of {len(expected_gone)} withdrawn resources marked for deletion, {len(gone_then)} gone"

    def withdrawn() -> dict[str, Any]:
        demo.kube.wait_for(lambda: not (expected_gone & set(demo.composed())), f"{sorted(expected_gone)} deleted", timeout_s=CONVERGE_S)
        return demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True)

    after = ride_out(parts, outage, watch, row, withdrawn)

    assert gone_then < expected_gone, f"the withdrawal was over before the fault: {sorted(gone_then)}"
    row.holds("converged", every_condition_true(demo.settled_xr()))
    assert "efs-csi" not in {p["name"] for p in after["status"]["plugins"]}
    assert set(demo.composed()) == set(before) - expected_gone
    row.holds("only EFS withdrawn, in Usage order, nothing refused", withdrawal_problems(demo, demo.providers, before, expected_gone, since=since))
    # The XR stays Ready (every wanted plugin is), with nothing composed unready.
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=watch.samples[0].at))
    row.done()


def test_apiserver_and_etcd_killed_mid_cluster_deletion(demo: Composite, parts: Parts) -> None:
    row = Row("kube-apiserver and etcd SIGKILLed, restarted", "mid-deletion of the cluster")
    before = demo.composed()
    releases = {n for n, o in before.items() if o["kind"] == "Release"}
    since = len(demo.providers.history(demo.namespace))
    watch = StatusWatch(demo).start()
    demo.capi.delete()

    def orphaned() -> bool:
        composed = demo.composed()
        return all(composed[n]["spec"].get("managementPolicies") == list(ORPHAN_MANAGEMENT_POLICIES) for n in releases)

    demo.kube.wait_for(orphaned, "every Release orphaned", timeout_s=CONVERGE_S)
    demo.providers.unreachable.add(demo.namespace)
    demo.capi.finish_deletion()
    demo.kube.wait_for(demo.capi.gone, "the Cluster and what it owned gone", timeout_s=120)
    wait_for_event(demo.providers, demo.namespace, since, {"deleted"})
    outage = parts.crash("kube-apiserver", "etcd")
    row.state = f"{len([e for e in demo.providers.history(demo.namespace)[since:] if e.what == 'deleted'])} of {len(before)} composed resources gone"
    done = ride_out(parts, outage, watch, row, lambda: cluster_deleted(demo, CONVERGE_S))

    row.holds("ClusterDeleted, nothing left", [f"Synced {condition_status(done, 'Synced')}"] * (condition_status(done, "Synced") != "True") + leftovers(demo))
    row.holds("nothing uninstalled", uninstalls(demo.providers, demo.namespace, since))
    row.holds("withdrawn in Usage order, nothing refused", withdrawal_problems(demo, demo.providers, before, set(before), since=since))
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=None))
    row.done()
    demo.kube.delete(done["apiVersion"], done["kind"], done["metadata"]["name"], demo.namespace)
    demo.kube.wait_for(lambda: demo.xr() is None, "the empty XR gone", timeout_s=60)


def crash_when_gone_is_written(composite: Composite, parts: Parts) -> tuple[threading.Event, dict[str, Any]]:
    """SIGKILL the function the moment the API server delivers the XR version that first records
    ``Gone`` (a watch, not a poll: Crossplane may call again within milliseconds, as soon as the
    garbage collector deletes what the Cluster owned). What it got: ``outage`` and ``revision``
    (the etcd revision of that XR version)."""
    xr = composite.xr()
    assert xr is not None
    got: dict[str, Any] = {}
    fired, stop = threading.Event(), threading.Event()

    def on_event(event_type: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if fired.is_set() or event_type == "DELETED" or (meta.get("namespace"), meta["name"]) != (composite.namespace, xr["metadata"]["name"]):
            return
        if (obj.get("status", {}).get("clusterDeletion") or {}).get("phase") == "Gone":
            got["outage"] = parts.crash("function")
            got["revision"] = int(meta["resourceVersion"])
            fired.set()
            stop.set()

    def on_error(err: Exception) -> None:
        got.setdefault("errors", []).append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=composite.kube.follow, args=(xr["apiVersion"], xr["kind"], on_event, stop, on_error), daemon=True)
    thread.start()
    return fired, got


def test_function_killed_when_the_cluster_is_first_found_gone(
    fault_control_plane: ControlPlane, played_api: dict, played: DeletionWatch, parts: Parts
) -> None:
    """Between the two calls that must both find the cluster gone before anything is withdrawn."""
    row = Row("function SIGKILLed, restarted", "cluster deletion, first found gone")
    composite = Composite(fault_control_plane, played, EXAMPLE, played_api, "faults-b")
    composite.create(staged=False)
    composite.wait_ready(timeout_s=CONVERGE_S, every_condition=True)
    before = composite.composed()
    since = len(played.history(composite.namespace))
    watch = StatusWatch(composite, interval_s=0.2).start()
    composite.capi.delete()
    composite.kube.wait_for(
        lambda: ((composite.xr() or {}).get("status", {}).get("clusterDeletion") or {}).get("phase") == "Deleting",
        "the deletion recorded",
        timeout_s=CONVERGE_S,
    )
    played.unreachable.add(composite.namespace)
    fired, got = crash_when_gone_is_written(composite, parts)
    composite.capi.finish_deletion()
    assert fired.wait(CONVERGE_S), f"no XR version recorded Gone within {CONVERGE_S} s: {got.get('errors')}"
    outage: Outage = got["outage"]
    withdrawn = [e for e in played.history(composite.namespace)[since:] if e.what in {"deleting", "deleted"}]
    # Crossplane may have called again before the kill landed: say where it landed.
    row.state = f"phase Gone recorded, {len(withdrawn)} of {len(before)} marked for deletion" + (
        "" if not withdrawn else " (the second call had run)"
    )
    done = ride_out(parts, outage, watch, row, lambda: cluster_deleted(composite, CONVERGE_S))

    # Gone is recorded after one call found the cluster gone: nothing goes before a second call
    # does. Crossplane deletes what a call no longer wants before it writes the XR's status, so
    # a deletion by the call that recorded Gone would precede that XR version in etcd.
    early = [e for e in played.history(composite.namespace)[since:] if e.what in {"deleting", "deleted"} and e.revision < got["revision"]]
    assert not early, f"withdrawn by the call that recorded Gone (XR at revision {got['revision']}): {early}"
    row.holds("ClusterDeleted, nothing left", leftovers(composite))
    row.holds("nothing uninstalled", uninstalls(played, composite.namespace, since))
    row.holds("withdrawn in Usage order, nothing refused", withdrawal_problems(composite, played, before, set(before), since=since))
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=None))
    row.done()
    composite.kube.delete(done["apiVersion"], done["kind"], done["metadata"]["name"], composite.namespace)
