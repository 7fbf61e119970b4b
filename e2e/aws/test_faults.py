"""AWS faults through the real provider-aws, at points of one XR's lifecycle (the fault suite's AWS part).

examples/selfhosted-full (namespaced) in ``faults-w`` on the AWS control plane of this package,
provider-aws v2.5.0 against moto, but through the fault proxy (``e2e/faults/aws_proxy.py``): the
ProviderConfigs point at it for this module, and it answers as a struggling AWS would.

1. Mid-creation: for ``FAULT_S`` IAM throttles every second call (``Throttling``) and S3 every
   third (``SlowDown``); until the XR is Ready, IAM is eventually consistent (a role or policy just
   created cannot be attached for ``CONSISTENCY_S``).
2. Mid-withdrawal of a removed plugin (EFS), for ``FAULT_S``: every second IAM and S3 call
   answers 500, every call is ``SLOW_S`` late.
3. Mid-deletion of the cluster: provider-aws stopped (SIGTERM) once the first AWS resource is
   marked for deletion, started again after ``DOWN_S``.

After each: converged (Ready, every condition True, equal to the in-memory Crossplane) or
ClusterDeleted with nothing left; what AWS saw is the Usage order (moto's Delete calls) and the
usage webhook refused nothing; nothing leaked in moto; the XR said what it waited for and was
not Ready while AWS misbehaved. (The control plane never assumes a role: provider-aws runs on
static credentials here, so the proxy's refusal to assume a fresh role is tested in tests/ only.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.aws.conftest import CONVERGE_S, aws_objects, not_ready
from e2e.aws.deletion import assert_withdrawn_in_usage_order, order_report, refusals
from e2e.aws.provider import (
    AWS_KINDS,
    AwsControlPlane,
    Moto,
    new_in,
    provider_configs,
    snapshot_entries,
)
from e2e.controlplane.checks import assert_converged_like_the_world, gone_without_efs
from e2e.controlplane.composite import Composite, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.processes import Process
from e2e.faults.aws_proxy import (
    EVENTUAL_CONSISTENCY,
    SERVER_ERROR,
    SLOW,
    THROTTLE,
    FaultProxy,
    Rule,
)
from e2e.faults.control import Parts
from e2e.faults.durations import seconds
from e2e.faults.invariants import (
    StatusWatch,
    cluster_deleted,
    honesty_problems,
    uninstalls,
    until_converged,
    what_it_said,
)
from e2e.faults.report import Row
from function.flavour import ORPHAN_MANAGEMENT_POLICIES

NAMESPACE = "faults-w"
EXAMPLE = "selfhosted-full"
FAULT_S = seconds(45, 300)
# The roles' attachments are composed once the roles are Ready: a window that spans it.
CONSISTENCY_S = seconds(45, 90)
SLOW_S = 2.0
DOWN_S = seconds(15, 150)


@pytest.fixture(scope="module")
def before(moto: Moto) -> dict[str, Any]:
    return moto.snapshot()


@pytest.fixture(scope="module")
def proxy(aws_control_plane: AwsControlPlane, moto: Moto, real_provider_aws: Process) -> Iterator[FaultProxy]:
    """The fault proxy in front of moto, where the ProviderConfigs send every service for this module."""
    running = FaultProxy(moto.endpoint).start()
    provider_configs(aws_control_plane, running.endpoint)
    yield running
    provider_configs(aws_control_plane, moto.endpoint)
    running.stop()


@pytest.fixture(scope="module")
def demo(aws_control_plane: AwsControlPlane, aws_api: dict, aws_providers: Providers, proxy: FaultProxy, before: dict[str, Any]) -> Composite:
    return Composite(aws_control_plane, aws_providers, EXAMPLE, aws_api, NAMESPACE)


def every_condition_true(composite: Composite) -> list[str]:
    return [f"{t}={c['status']} {c.get('message', '')}" for t, c in conditions(composite.settled_xr()).items() if c["status"] != "True"]


def provider_errors(composite: Composite) -> list[str]:
    """What the composed AWS resources' Synced conditions say while not Synced."""
    return sorted(
        {
            f"{n}: {conditions(o)['Synced'].get('message', '')[:160]}"
            for n, o in aws_objects(composite).items()
            if conditions(o).get("Synced", {}).get("status") == "False"
        }
    )


def test_throttled_and_eventually_consistent_mid_creation(demo: Composite, proxy: FaultProxy) -> None:
    row = Row(
        f"AWS throttling (IAM Throttling every 2nd call, S3 SlowDown every 3rd) for {FAULT_S:g} s; IAM eventually consistent "
        f"throughout (a new role or policy cannot be attached for {CONSISTENCY_S:g} s)",
        "mid-creation",
    )
    consistency = Rule(EVENTUAL_CONSISTENCY, window_s=CONSISTENCY_S)
    proxy.set(Rule(THROTTLE, services=frozenset({"iam"}), every=2), Rule(THROTTLE, services=frozenset({"s3"}), every=3), consistency)
    fault_at = time.monotonic()
    watch = StatusWatch(demo).start()
    demo.create(staged=False)
    seen: set[str] = set()
    while time.monotonic() - fault_at < FAULT_S:
        seen |= set(provider_errors(demo))
        time.sleep(2)
    got = demo.composed()
    row.state = f"{len(got)} composed, {sum(conditions(o).get('Ready', {}).get('status') == 'True' for o in got.values())} Ready when AWS recovered"
    # The roles and attachments come after the issuer: IAM stays eventually consistent for them.
    proxy.set(consistency)
    cleared_at = time.monotonic()
    until_converged(demo, lambda: demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True), lambda: not_ready(demo))
    proxy.clear()
    row.down_s, row.recovery_s = cleared_at - fault_at, time.monotonic() - cleared_at
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")
    print("what provider-aws reported meanwhile:\n  " + "\n  ".join(sorted(seen)[:20]))

    injected = proxy.faults(since=fault_at)
    kinds = {(i.kind, i.service, i.code) for i in injected}
    print(f"faults injected: {len(injected)}: {sorted(kinds)}")
    assert (THROTTLE, "iam", "Throttling") in kinds and (THROTTLE, "s3", "SlowDown") in kinds, kinds
    assert any(k == EVENTUAL_CONSISTENCY for k, _, _ in kinds), kinds
    row.holds("converged", every_condition_true(demo))
    assert_converged_like_the_world(demo)
    row.holds("nothing deleted", [f"{e.what} {e.resource}" for e in demo.providers.history(NAMESPACE) if e.what in {"deleting", "deleted"}])
    row.holds("honest status", honesty_problems(watch.between(fault_at, time.monotonic()), ready_from=cleared_at))
    row.done()


def test_500s_and_slow_answers_mid_withdrawal(demo: Composite, proxy: FaultProxy, moto: Moto) -> None:
    row = Row(f"AWS 500s (IAM and S3, every 2nd call) and {SLOW_S:g} s slow answers, {FAULT_S:g} s", "mid-withdrawal (EFS removed)")
    held_before = moto.snapshot()
    composed = demo.composed()
    expected_gone = gone_without_efs(demo, composed)
    gone_aws = {n: composed[n] for n in expected_gone if composed[n]["kind"] in AWS_KINDS}
    xr = demo.xr()
    assert xr is not None and gone_aws
    moto.start_recording()
    proxy.set(Rule(SERVER_ERROR, services=frozenset({"iam", "s3"}), every=2), Rule(SLOW, delay_s=SLOW_S))
    fault_at = time.monotonic()
    watch = StatusWatch(demo).start()
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": {"storage": {"efs": None}}}, NAMESPACE)
    time.sleep(FAULT_S)
    row.state = f"{len(expected_gone & set(demo.composed()))} of {len(expected_gone)} withdrawn resources still composed when AWS recovered"
    proxy.clear()
    cleared_at = time.monotonic()
    refs = {(composed[n]["apiVersion"], composed[n]["kind"], composed[n]["metadata"]["name"]) for n in expected_gone}

    def withdrawn() -> dict[str, Any]:
        demo.kube.wait_for(lambda: all(demo.kube.get(a, k, nm, NAMESPACE) is None for a, k, nm in refs), f"{sorted(expected_gone)} deleted", timeout_s=CONVERGE_S, interval_s=1)
        return demo.wait_ready(timeout_s=CONVERGE_S, every_condition=True)

    until_converged(demo, withdrawn, lambda: not_ready(demo))
    row.down_s, row.recovery_s = cleared_at - fault_at, time.monotonic() - cleared_at
    calls = moto.stop_recording()
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")

    kinds = {(i.kind, i.service, i.code) for i in proxy.faults(since=fault_at)}
    print(f"faults injected: {sorted(kinds)}")
    assert (SERVER_ERROR, "iam", "InternalFailure") in kinds and any(k == SLOW for k, _, _ in kinds), kinds
    row.holds("converged", every_condition_true(demo))
    held_after = moto.snapshot()
    row.holds("only EFS's AWS objects deleted, nothing added", [f"added {new_in(held_after, held_before)}"] * bool(new_in(held_after, held_before)) + [f"removed {new_in(held_before, held_after)}"] * (new_in(held_before, held_after) != snapshot_entries(list(gone_aws.values()))))
    order = assert_withdrawn_in_usage_order(demo.providers, NAMESPACE, composed, expected_gone, calls)
    print(order_report(order, calls, composed))
    row.holds("Usage order in moto, nothing refused", refusals(demo.cp, demo.providers, composed, NAMESPACE))
    row.holds("honest status", honesty_problems(watch.between(fault_at, time.monotonic()), ready_from=fault_at))
    row.done()


def test_provider_aws_stopped_mid_cluster_deletion(demo: Composite, aws_control_plane: AwsControlPlane, moto: Moto, before: dict[str, Any]) -> None:
    row = Row("provider-aws stopped, started", "mid-deletion of the cluster")
    parts = Parts(aws_control_plane)
    composed = demo.composed()
    releases = {n for n, o in composed.items() if o["kind"] == "Release"}
    since = len(demo.providers.history(NAMESPACE))
    moto.start_recording()
    demo.capi.delete()
    demo.kube.wait_for(
        lambda: all(o["spec"].get("managementPolicies") == list(ORPHAN_MANAGEMENT_POLICIES) for n, o in demo.composed().items() if n in releases),
        "every Release orphaned",
        timeout_s=120,
    )
    demo.providers.unreachable.add(NAMESPACE)
    demo.capi.finish_deletion()
    demo.kube.wait_for(demo.capi.gone, "the Cluster and what it owned gone", timeout_s=120)
    demo.kube.wait_for(
        lambda: any(e.what == "deleting" and e.kind in AWS_KINDS for e in demo.providers.history(NAMESPACE)[since:]),
        "a first AWS resource marked for deletion",
        timeout_s=CONVERGE_S,
        interval_s=0.1,
    )
    watch = StatusWatch(demo).start()
    outage = parts.stop("provider-aws")
    left = [n for n in composed if n in demo.composed()]
    row.state = f"{len(left)} of {len(composed)} composed resources left, the first AWS layer marked for deletion"
    time.sleep(DOWN_S)
    parts.start(outage)

    done = cluster_deleted(demo, CONVERGE_S, lambda: not_ready(demo))
    row.down_s, row.recovery_s = outage.seconds, outage.since_repair()
    calls = moto.stop_recording()
    print(f"\nwhat the XR said: {what_it_said(watch.stop())}")

    row.holds("ClusterDeleted, nothing left in moto", [f"left in moto: {new_in(moto.snapshot(), before)}"] * bool(new_in(moto.snapshot(), before)) + [f"composed: {sorted(demo.composed())}"] * bool(demo.composed()))
    row.holds("nothing uninstalled", uninstalls(demo.providers, NAMESPACE, since))
    order = assert_withdrawn_in_usage_order(demo.providers, NAMESPACE, composed, set(composed), calls)
    print(order_report(order, calls, composed))
    row.holds("Usage order in moto, nothing refused", refusals(demo.cp, demo.providers, composed, NAMESPACE))
    row.holds("honest status", honesty_problems(watch.between(outage.down_at, time.monotonic()), ready_from=None))
    row.done()
    demo.kube.delete(done["apiVersion"], done["kind"], done["metadata"]["name"], NAMESPACE)
    demo.kube.wait_for(lambda: demo.xr() is None, "the empty XR gone", timeout_s=60)
