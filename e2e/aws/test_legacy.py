"""The real AWS provider reconciles what the legacy flavour composes, against moto on loopback.

examples/calico-legacy-claim (apis/v1: claim ClusterPlugin in platform-w, cluster-scoped XR)
with its own Composition. The function writes the cluster-scoped Bucket, Object and
BucketOwnershipControls at v1beta2; provider-aws v2.5.0's CRDs store them at v1beta1, so the
API server converts every one through the provider's conversion webhook on loopback
(``AwsControlPlane``). Every composed AWS resource turns Ready and Synced; moto holds what
was composed; deleting the claim leaves nothing in moto.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.aws.conftest import (
    aws_objects,
    converge,
    delete_in_usage_order,
    not_ready,
    played_providers,
)
from e2e.aws.provider import AwsControlPlane, Held, Moto, held_differences
from e2e.controlplane.checks import assert_converged_like_the_world
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import ROOT
from e2e.controlplane.processes import Process

LEGACY_NAMESPACE = "platform-w"
LEGACY_EXAMPLE = "calico-legacy-claim"


@pytest.fixture(scope="module")
def legacy_aws_providers(aws_control_plane: AwsControlPlane, real_provider_aws: Process) -> Iterator[Providers]:
    yield from played_providers(aws_control_plane, namespaced=False)


@pytest.fixture(scope="module")
def legacy_aws_api(aws_control_plane: AwsControlPlane, legacy_aws_providers: Providers) -> Iterator[dict]:
    aws_control_plane.install_api("v1")
    own = aws_control_plane.install_composition(ROOT / "examples" / LEGACY_EXAMPLE / "composition.yaml")
    yield own
    aws_control_plane.remove_api("v1")
    aws_control_plane.kube.delete(own["apiVersion"], "Composition", own["metadata"]["name"])


@pytest.fixture(scope="module")
def edge(aws_control_plane: AwsControlPlane, legacy_aws_api: dict, legacy_aws_providers: Providers, moto: Moto) -> Iterator[tuple[Composite, dict[str, Any]]]:
    """The legacy claim converged, and what moto held before it."""
    held_before = moto.snapshot()
    composite = Composite(aws_control_plane, legacy_aws_providers, LEGACY_EXAMPLE, legacy_aws_api, LEGACY_NAMESPACE, document="claim.yaml")
    converge(composite)
    yield composite, held_before


def test_legacy_every_composed_aws_resource_is_ready_and_synced(edge: tuple[Composite, dict[str, Any]]) -> None:
    composite, _ = edge
    composed = aws_objects(composite)
    kinds = {(o["kind"], o["apiVersion"]) for o in composed.values()}
    assert {("Bucket", "s3.aws.upbound.io/v1beta2"), ("Object", "s3.aws.upbound.io/v1beta2"), ("BucketOwnershipControls", "s3.aws.upbound.io/v1beta2")} <= kinds, kinds
    assert not not_ready(composite), not_ready(composite)
    assert condition_status(composite.resource(), "Ready") == "True", conditions(composite.resource())
    assert_converged_like_the_world(composite)


def test_legacy_moto_holds_what_the_function_composed(edge: tuple[Composite, dict[str, Any]], moto: Moto) -> None:
    composite, _ = edge
    held = Held.read(moto)
    problems = [d for obj in aws_objects(composite).values() for d in held_differences(obj, held)]
    assert not problems, "\n".join(problems)


def test_legacy_deleting_the_claim_leaves_nothing_in_moto(edge: tuple[Composite, dict[str, Any]], moto: Moto) -> None:
    """Through the garbage collector and the usage webhook's replayed deletions, as for the
    namespaced XR: AWS sees the users deleted before what they use."""
    composite, held_before = edge
    delete_in_usage_order(composite, moto, None, held_before, "the legacy claim")
