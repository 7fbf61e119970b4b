"""The real AWS provider reconciles what the namespaced flavour composes, against moto on loopback.

A control plane of its own (``AwsControlPlane``: the provider module's CRDs at v2.5.0, the
legacy kinds' conversion by the provider's webhook), provider-upjet-aws v2.5.0 (the
monolith, built from the Go module proxy by ``scripts/tools.py``) out of cluster, moto with
its request recorder, and ProviderConfigs of both scopes pointing every service at moto.
The driver plays CAPI and provider-helm only: every AWS kind is the provider's.

Here examples/selfhosted-full, namespaced, in team-w (its rules in the AWSCluster, so no
SecurityGroupIngressRule: v2.5.0 cannot observe one before it exists, "Missing Resource Identity
After Read"): every composed AWS resource turns Ready and Synced through the provider; moto holds
what the function composed; the provider writes nothing once converged; removing a plugin deletes exactly its
AWS objects, in Usage order (moto's Delete calls), with no deletion refused by the usage webhook;
deleting the XR leaves moto with nothing the XR made, in Usage order too, the webhook refusing
only what is still used (the garbage collector deletes everything at once; Crossplane replays).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.aws.conftest import (
    POLL_S,
    aws_objects,
    converge,
    delete_in_usage_order,
    not_ready,
)
from e2e.aws.deletion import (
    assert_withdrawn_in_usage_order,
    order_report,
    refusals,
    refused_objects,
)
from e2e.aws.provider import (
    AWS_KINDS,
    MOTO_ACCOUNT,
    AwsControlPlane,
    Held,
    Moto,
    held_differences,
    multi_version_kinds,
    new_in,
    snapshot_entries,
)
from e2e.controlplane.checks import (
    assert_converged_like_the_world,
    gone_without_efs,
    usage_ends,
)
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.processes import Process
from function.names import PARTITIONS
from function.policies import DISCOVERY_KEY, JWKS_KEY, lbc_policy

NAMESPACE = "team-w"
EXAMPLE = "selfhosted-full"
# Several of the provider's polls.
QUIET_S = 4 * POLL_S + 10


@pytest.fixture(scope="module")
def before(moto: Moto) -> dict[str, Any]:
    """What moto holds before any XR (nothing of ours)."""
    return moto.snapshot()


@pytest.fixture(scope="module")
def demo(aws_control_plane: AwsControlPlane, aws_api: dict, aws_providers: Providers, moto: Moto, before: dict[str, Any]) -> Iterator[Composite]:
    composite = Composite(aws_control_plane, aws_providers, EXAMPLE, aws_api, NAMESPACE)
    # Day two (test_iam_moves_with_the_chart): short soaks and deadlines.
    composite.manifest["spec"]["upgradePolicy"] = {"soakSeconds": 5, "progressDeadlineSeconds": 45}
    converge(composite)
    yield composite


def test_the_provider_serves_the_modules_crds_and_converts_the_legacy_kinds(aws_control_plane: AwsControlPlane, real_provider_aws: Process) -> None:
    """The legacy kinds the function writes at v1beta2 are stored at v2.5.0's v1beta1: the
    provider's conversion webhook answers on loopback both ways."""
    storage = multi_version_kinds(aws_control_plane)
    assert storage == {
        "buckets.s3.aws.upbound.io": "v1beta1",
        "objects.s3.aws.upbound.io": "v1beta1",
        "bucketownershipcontrols.s3.aws.upbound.io": "v1beta1",
        "distributions.cloudfront.aws.upbound.io": "v1beta1",
        "records.route53.aws.upbound.io": "v1beta1",
    }, storage
    kube = aws_control_plane.kube
    bucket: dict[str, Any] = {
        "apiVersion": "s3.aws.upbound.io/v1beta2",
        "kind": "Bucket",
        "metadata": {"name": "conversion-probe", "annotations": {"crossplane.io/paused": "true"}},
        "spec": {"forProvider": {"region": "us-east-1", "tags": {"a": "b"}}, "providerConfigRef": {"name": "default"}},
    }
    kube.create(bucket)
    try:
        stored = kube.get("s3.aws.upbound.io/v1beta1", "Bucket", "conversion-probe")
        assert stored is not None and stored["spec"]["forProvider"]["tags"] == {"a": "b"}, stored
        back = kube.get("s3.aws.upbound.io/v1beta2", "Bucket", "conversion-probe")
        assert back is not None and back["spec"]["forProvider"] == bucket["spec"]["forProvider"], back
    finally:
        kube.delete("s3.aws.upbound.io/v1beta2", "Bucket", "conversion-probe")


def test_every_composed_aws_resource_is_ready_and_synced_through_the_provider(demo: Composite) -> None:
    composed = aws_objects(demo)
    assert {o["kind"] for o in composed.values()} >= {
        "Bucket", "BucketPolicy", "BucketPublicAccessBlock", "BucketOwnershipControls", "Object",
        "OpenIDConnectProvider", "Role", "Policy", "RolePolicyAttachment",
    }, sorted({o["kind"] for o in composed.values()})
    assert not not_ready(demo), not_ready(demo)
    # The ARNs the provider reports are moto's account's: credentials were validated.
    arns = [o["status"]["atProvider"].get("arn", "") for o in composed.values() if o["kind"] in {"Role", "Policy", "OpenIDConnectProvider"}]
    assert arns and all(f":{MOTO_ACCOUNT}:" in a for a in arns), arns
    xr = demo.xr()
    assert condition_status(xr, "Ready") == "True", conditions(xr)
    print("\n" + "\n".join(f"{n}: {o['kind']} {o['metadata']['annotations'].get('crossplane.io/external-name')}" for n, o in sorted(composed.items())))


def test_the_xr_converges_like_the_world(demo: Composite) -> None:
    """The function, fed what the real provider reports, composes what our InMemoryCrossplane does."""
    assert_converged_like_the_world(demo)


def test_moto_holds_what_the_function_composed(demo: Composite, moto: Moto) -> None:
    held = Held.read(moto)
    problems = [d for obj in aws_objects(demo).values() for d in held_differences(obj, held)]
    assert not problems, "\n".join(problems)
    # The issuer: its two objects, byte for byte, at the keys the discovery URL names.
    composed = aws_objects(demo)
    objects = [o for o in composed.values() if o["kind"] == "Object"]
    keys = sorted(o["spec"]["forProvider"]["key"] for o in objects)
    assert len(keys) == 2 and keys[0].endswith(DISCOVERY_KEY) and keys[1].endswith(JWKS_KEY), keys
    xr = demo.xr()
    assert xr is not None
    discovery = next(o for o in objects if o["spec"]["forProvider"]["key"].endswith(DISCOVERY_KEY))
    assert json.loads(discovery["spec"]["forProvider"]["content"])["issuer"] == xr["status"]["issuerURL"]
    oidc = next(o for o in composed.values() if o["kind"] == "OpenIDConnectProvider")
    assert xr["status"]["oidcProviderARN"] == oidc["status"]["atProvider"]["arn"]
    assert set(xr["status"]["roleARNs"].values()) <= {r["status"]["atProvider"]["arn"] for r in composed.values() if r["kind"] == "Role"}


def test_the_provider_stays_quiet_after_convergence(demo: Composite, moto: Moto) -> None:
    """Over several of the provider's polls, moto records reads only."""
    moto.start_recording()
    time.sleep(QUIET_S)
    calls = moto.stop_recording()
    writes = [str(c) for c in calls if c.writes]
    print(f"\nover {QUIET_S}s ({QUIET_S // POLL_S} polls of {POLL_S}s): {len(calls)} calls, {len(writes)} writes")
    assert len(calls) > len(aws_objects(demo)), "the provider did not poll at all"
    assert not writes, "\n".join(writes)
    assert not not_ready(demo), not_ready(demo)


# --- day two: the load balancer controller's IAM policy moves with its chart ---------------------


def _grants(document: Any) -> set[tuple[str, str, str, str]]:
    """(effect, action, resource, conditions) of every grant a policy document makes."""
    doc = json.loads(document) if isinstance(document, str) else document
    out = set()
    for st in doc["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st.get("Resource", "*")
        resources = resources if isinstance(resources, list) else [resources]
        condition = json.dumps(st.get("Condition"), sort_keys=True)
        out |= {(st["Effect"], a, r, condition) for a in actions for r in resources}
    return out


def _policy_grants(document: Any) -> str:
    """Which controller's policy a document grants: v2.12's or v2.13's.

    By what it grants, not by its text: v2.12's grants are a subset of v2.13's, so their union
    grants exactly v2.13's, and provider-aws leaves a policy whose new document is equivalent
    to the one AWS holds as it is (terraform suppresses equivalent policy diffs): after a move
    to v2.13 through the union, AWS keeps the union's text, which grants v2.13's.
    """
    got = _grants(document)
    for name, chart in (("v2.12", "1.12.0"), ("v2.13", "3.5.0")):
        if got == _grants(lbc_policy(PARTITIONS["aws"], chart)):
            return name
    return f"other ({len(got)} grants)"


def _lbc_timeline(demo: Composite, moto: Moto, until: Any, timeout_s: float) -> list[tuple[float, str, str, str]]:
    """(seconds, what moto's policy grants, the Release's chart in its spec, the plugin's
    upgrade phase) at each change, polled until ``until(entry)``."""
    seen: list[tuple[float, str, str, str]] = []
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        composed = demo.composed()
        policy_arn = composed["lbc-policy"]["status"]["atProvider"]["arn"]
        grants = _policy_grants(moto.policies()[policy_arn]["document"])
        chart = composed["lbc-release"]["spec"]["forProvider"]["chart"]["version"]
        entry = next(p for p in demo.xr()["status"]["plugins"] if p["name"] == "aws-load-balancer-controller")
        row = (round(time.monotonic() - start, 1), grants, chart, entry.get("upgrade", ""))
        if not seen or seen[-1][1:] != row[1:]:
            seen.append(row)
        if until(entry, row):
            return seen
        time.sleep(0.5)
    msg = f"not done in {timeout_s:.0f}s: " + "; ".join(map(str, seen))
    raise AssertionError(msg)


def _set_lbc(demo: Composite, version: str | None) -> None:
    xr = demo.xr()
    assert xr is not None
    patch = {"spec": {"ingress": {"awsLoadBalancerController": {"version": version}}}}
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], patch, NAMESPACE)


def test_iam_moves_with_the_chart_expand_then_contract_and_back(demo: Composite, moto: Moto) -> None:
    """Where AWS sees it: moto's policy (its default version's document) beside the Release's
    spec, on one timeline. From chart 1.12.0 (controller v2.12): an upgrade to 3.5.0 (v2.13)
    that fails (the played chart repository lacks it) and is rolled back, then the same upgrade
    retried once 3.5.0 can be had. Each time the policy grants v2.13's permissions before the
    chart is 3.5.0, and narrows to one version's only once that version runs."""
    # What _policy_grants rests on: v2.13 grants all v2.12 does, and more.
    assert _grants(lbc_policy(PARTITIONS["aws"], "1.12.0")) < _grants(lbc_policy(PARTITIONS["aws"], "3.5.0"))
    _set_lbc(demo, "1.12.0")
    _lbc_timeline(demo, moto, lambda e, row: row[1:] == ("v2.12", "1.12.0", "Healthy"), 300)

    demo.providers.missing_charts.add(("aws-load-balancer-controller", "3.5.0"))
    _set_lbc(demo, None)  # the default: 3.5.0
    failed = _lbc_timeline(demo, moto, lambda e, row: row[3] == "RolledBack" and row[1] == "v2.12", 300)
    print("\nupgrade to 3.5.0, which fails and is rolled back (s, moto's policy grants, Release chart, phase):\n  " + "\n  ".join(map(str, failed)))
    first_3_5 = next(i for i, r in enumerate(failed) if r[2] == "3.5.0")
    assert failed[first_3_5][1] == "v2.13", failed  # expanded before the chart moved
    back = next(i for i in range(first_3_5, len(failed)) if failed[i][2] == "1.12.0")
    # The chart first, then the policy: it still grants v2.13's until 1.12.0 runs again.
    assert failed[back][1] == "v2.13", failed
    assert failed[-1][1:] == ("v2.12", "1.12.0", "RolledBack"), failed

    demo.providers.missing_charts.clear()
    xr = demo.xr()
    assert xr is not None
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"metadata": {"annotations": {"clusterplugin.dev/retry-upgrade": "1"}}}, NAMESPACE)
    healthy = _lbc_timeline(demo, moto, lambda e, row: row[2:] == ("3.5.0", "Healthy"), 300)
    print("upgrade retried (s, moto's policy grants, Release chart, phase):\n  " + "\n  ".join(map(str, healthy)))
    first_3_5 = next(i for i, r in enumerate(healthy) if r[2] == "3.5.0")
    assert healthy[first_3_5][1] == "v2.13", healthy  # expanded before the chart moved again
    assert healthy[-1][1:] == ("v2.13", "3.5.0", "Healthy"), healthy
    demo.wait_ready(timeout_s=300)


def test_removing_a_plugin_deletes_exactly_its_aws_objects(demo: Composite, moto: Moto) -> None:
    held_before = moto.snapshot()
    composed = demo.composed()
    xr = demo.xr()
    assert xr is not None
    expected_gone = gone_without_efs(demo, composed)
    gone_aws = {n: composed[n] for n in expected_gone if composed[n]["kind"] in AWS_KINDS}
    assert gone_aws, expected_gone

    moto.start_recording()
    started = time.monotonic()
    demo.kube.patch(xr["apiVersion"], xr["kind"], xr["metadata"]["name"], {"spec": {"storage": {"efs": None}}}, NAMESPACE)
    # Gone from the API server, by name: Crossplane strips the composite label from what it
    # deletes, so the XR's label no longer lists a resource the moment it is marked for
    # deletion, long before provider-aws has deleted it in AWS and let it go.
    refs = {(composed[n]["apiVersion"], composed[n]["kind"], composed[n]["metadata"]["name"]) for n in expected_gone}
    demo.kube.wait_for(lambda: all(demo.kube.get(a, k, nm, NAMESPACE) is None for a, k, nm in refs), f"{sorted(expected_gone)} deleted", timeout_s=300, interval_s=1)
    withdrawn_s = time.monotonic() - started
    demo.wait_ready(timeout_s=300)
    calls = moto.stop_recording()
    held_after = moto.snapshot()
    removed = new_in(held_before, held_after)
    added = new_in(held_after, held_before)
    print(f"\nmoto after removing EFS ({withdrawn_s:.0f}s): removed {removed}, added {added}")
    assert not added, added
    assert removed == snapshot_entries(list(gone_aws.values())), removed
    # Users first, then their Usages, then what they used; in moto as in the control plane.
    order = assert_withdrawn_in_usage_order(demo.providers, NAMESPACE, composed, expected_gone, calls)
    print(order_report(order, calls, composed))
    # Withdrawn one layer per reconcile: the usage webhook never had to refuse a deletion.
    refused = refusals(demo.cp, demo.providers, composed, NAMESPACE)
    assert not refused, "\n".join(refused)


def test_deleting_the_xr_leaves_nothing_in_moto(demo: Composite, moto: Moto, before: dict[str, Any]) -> None:
    """Crossplane's garbage collector deletes everything at once: the usage webhook refuses
    each used resource until its Usages are gone, then Crossplane replays the deletion
    (``replayDeletion: true``). So AWS sees the users deleted before what they use."""
    composed = delete_in_usage_order(demo, moto, NAMESPACE, before, "the XR")
    # The garbage collector deletes everything at once, so the webhook refuses what is still
    # used: only that, and Crossplane replays each deletion once the Usages are gone.
    refused = refusals(demo.cp, demo.providers, composed, NAMESPACE)
    print(f"traces of deletions the usage webhook refused (and Crossplane replayed): {len(refused)}\n  " + "\n  ".join(refused))
    used = {usage_ends(o)[1] for o in composed.values() if o["kind"] == "Usage"}
    assert refused_objects(demo.providers, NAMESPACE) <= used, refused_objects(demo.providers, NAMESPACE) - used


def test_provider_log_has_no_call_moto_lacks(aws_control_plane: AwsControlPlane, real_provider_aws: Process) -> None:
    """Calls the provider made that moto does not implement show up as errors in its log."""
    lacking = [line for line in Path(real_provider_aws.log_path).read_text(errors="replace").splitlines() if "not yet implemented" in line.lower() or "InvalidAction" in line]
    assert not lacking, "\n".join(lacking[:20])

