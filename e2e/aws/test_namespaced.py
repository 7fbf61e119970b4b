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
from function.policies import DISCOVERY_KEY, JWKS_KEY

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

