"""Fixtures of the AWS provider's tests, one set for the package (both flavours' modules).

moto with its request recorder, a control plane of its own (``AwsControlPlane``), the real
provider-aws out of cluster and ProviderConfigs of both scopes pointing at moto. A provider
binary that cannot be built fails the tests that need it with the reason (scripts/tools.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.aws.deletion import DeletionWatch, assert_withdrawn_in_usage_order, order_report
from e2e.aws.lost_creates import LostCreates
from e2e.aws.provider import (
    AWS_KINDS,
    AwsControlPlane,
    Moto,
    new_in,
    provider_aws,
    provider_configs,
)
from e2e.controlplane.composite import Composite, condition_status, conditions
from e2e.controlplane.conftest import pytest_runtest_makereport, running_control_plane
from e2e.controlplane.driver import Providers
from e2e.controlplane.harness import StartError
from e2e.controlplane.processes import Process

__all__ = ["pytest_runtest_makereport"]  # the logs of the control plane in a failing test's report

# The provider's poll (its default is 10 minutes): the quiet period of the tests spans several.
POLL_S = 15
CONVERGE_S = 900


@pytest.fixture(scope="package")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    server = Moto(tmp_path_factory.mktemp("moto") / "recording.jsonl")
    yield server
    server.stop()


@pytest.fixture(scope="package")
def aws_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AwsControlPlane]:
    with running_control_plane(tmp_path_factory.mktemp("aws"), AwsControlPlane) as cp:
        assert isinstance(cp, AwsControlPlane)
        yield cp


@pytest.fixture(scope="package")
def lost_creates(aws_control_plane: AwsControlPlane, moto: Moto) -> Iterator[LostCreates]:
    """provider-aws's lost creates adopted while it runs (e2e/aws/lost_creates.py); each one
    is printed, and listed again at the end."""
    mender = LostCreates(aws_control_plane.kube, moto.clients.iam).start()
    yield mender
    adopted = mender.stop()
    print(f"\nprovider-aws's lost creates adopted: {[str(a) for a in adopted] or 'none'}; stuck, not adopted: {sorted(mender.refused) or 'none'}; polls that failed: {mender.errors[-5:] or 'none'}")


@pytest.fixture(scope="package")
def real_provider_aws(aws_control_plane: AwsControlPlane, moto: Moto, lost_creates: LostCreates) -> Iterator[Process]:
    provider_configs(aws_control_plane, moto.endpoint)
    started = time.monotonic()
    try:
        process = provider_aws(aws_control_plane, poll=f"{POLL_S}s", moto_endpoint=moto.endpoint)
    except (StartError, TimeoutError) as err:
        pytest.fail(f"provider-aws did not start: {err}", pytrace=False)
    print(f"\nprovider-aws ready in {time.monotonic() - started:.1f}s")
    yield process
    process.stop()
    del aws_control_plane.processes[process.name]  # stopped on purpose: not a process that died


def aws_objects(composite: Composite) -> dict[str, dict[str, Any]]:
    """composition-resource-name -> composed object, of the provider's kinds."""
    return {n: o for n, o in composite.composed().items() if o["kind"] in AWS_KINDS}


def not_ready(composite: Composite) -> str:
    """The composed AWS resources not Ready and Synced, with the provider's conditions."""
    lines = []
    for name, obj in sorted(aws_objects(composite).items()):
        if condition_status(obj, "Ready") != "True" or condition_status(obj, "Synced") != "True":
            said = "; ".join(f"{t}={c['status']} {c.get('reason')}: {c.get('message', '')}" for t, c in conditions(obj).items())
            lines.append(f"{name} ({obj['kind']}): {said}")
    return "\n".join(lines)


def converge(composite: Composite, timeout_s: float = CONVERGE_S) -> dict[str, Any]:
    """Composite.converge at the real provider's pace (each stage may take minutes); fails
    the test naming what is not Ready."""
    started = time.monotonic()
    try:
        composite.create(staged=True)
        composite.wait_stalled(timeout_s=timeout_s)
        composite.control_plane_revisions["initialized"] = composite.capi.set_control_plane(initialized=True, available=False)
        composite.wait_stalled(timeout_s=timeout_s)
        composite.control_plane_revisions["available"] = composite.capi.set_control_plane(initialized=True, available=True)
        xr = composite.wait_ready(timeout_s)
    except TimeoutError as err:
        pytest.fail(f"{composite.example} did not converge through provider-aws: {err}\n{not_ready(composite)}", pytrace=False)
    print(f"\n{composite.example} converged through provider-aws in {time.monotonic() - started:.0f}s")
    return xr


def played_providers(cp: AwsControlPlane, *, namespaced: bool) -> Iterator[Providers]:
    """The driver for one flavour's Releases (played); every AWS kind is provider-aws's. It
    also records when each composed object was marked for deletion and any deletion the usage
    webhook refused (``DeletionWatch``)."""
    providers = DeletionWatch(cp.kube, namespaced=namespaced, real_kinds=AWS_KINDS)
    providers.start()
    yield providers
    providers.stop()


@pytest.fixture(scope="module")
def aws_providers(aws_control_plane: AwsControlPlane, real_provider_aws: Process) -> Iterator[Providers]:
    """The namespaced flavour's played providers, for one module."""
    yield from played_providers(aws_control_plane, namespaced=True)


@pytest.fixture(scope="module")
def aws_api(aws_control_plane: AwsControlPlane, aws_providers: Providers) -> Iterator[dict]:
    """apis/v2 (namespaced ClusterPlugin) installed for one module; its Composition."""
    composition = aws_control_plane.install_api("v2")
    yield composition
    aws_control_plane.remove_api("v2")


def delete_and_wait(composite: Composite, timeout_s: float = 600) -> dict[str, dict[str, Any]]:
    """Delete the XR (or the claim) and wait until every resource it composed is gone; those."""
    composed = composite.composed()
    made = composite.resource()
    assert made is not None
    meta = made["metadata"]
    composite.kube.delete(made["apiVersion"], made["kind"], meta["name"], meta.get("namespace"))
    names = {(o["apiVersion"], o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in composed.values()}
    composite.kube.wait_for(
        lambda: all(composite.kube.get(a, k, n, ns) is None for a, k, n, ns in names),
        "every composed resource deleted",
        timeout_s=timeout_s,
        interval_s=1,
    )
    return composed


def delete_in_usage_order(
    composite: Composite, moto: Moto, namespace: str | None, held_before: dict[str, Any], what: str
) -> dict[str, dict[str, Any]]:
    """Delete the XR (or the claim): moto is left with nothing it made, and AWS saw the users
    deleted before what they use (through the garbage collector and the usage webhook's
    replayed deletions). The composed resources, as they were."""
    moto.start_recording()
    started = time.monotonic()
    composed = delete_and_wait(composite)
    calls = moto.stop_recording()
    left = new_in(moto.snapshot(), held_before)
    print(f"\nmoto after deleting {what} ({time.monotonic() - started:.0f}s), beyond what it held before: {left}")
    assert not left, left
    order = assert_withdrawn_in_usage_order(composite.providers, namespace, composed, set(composed), calls, collected=True)
    print(order_report(order, calls, composed))
    return composed
