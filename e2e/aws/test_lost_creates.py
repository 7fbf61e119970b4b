"""A lost create of provider-aws is adopted when, and only when, AWS holds it under this very
managed resource's tags (e2e/aws/lost_creates.py), on the real provider-aws against moto.

The lost create is set up as upjet leaves it: the OIDC provider exists in moto, tagged by
provider-aws for the managed resource, which has no external-name; provider-aws's every create
answers EntityAlreadyExists. Beside it, one held under another resource's name stays stuck.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.aws.lost_creates import ALREADY_EXISTS, EXTERNAL_NAME, LostCreates, crossplane_kind
from e2e.aws.provider import PROVIDER_CONFIG, AwsControlPlane, Moto
from e2e.controlplane.composite import condition_status, conditions
from e2e.controlplane.processes import Process

API_VERSION = "iam.aws.upbound.io/v1beta1"
KIND = "OpenIDConnectProvider"
THUMBPRINT = "9e99a48a9960b14926bb7f3b02e22da2b0ab7280"
OURS, NOT_OURS = "lost-create-probe", "not-ours-probe"


def url_of(name: str) -> str:
    return f"https://{name}.example.com"


def managed(name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name},
        "spec": {
            "forProvider": {"url": url_of(name), "clientIdList": ["sts.amazonaws.com"], "thumbprintList": [THUMBPRINT]},
            "providerConfigRef": {"name": PROVIDER_CONFIG},
        },
    }


@pytest.fixture(scope="module")
def held(moto: Moto) -> Iterator[dict[str, str]]:
    """name -> ARN of the two OIDC providers moto holds first: ours tagged by provider-aws for
    the managed resource OURS, the other for a managed resource of another name."""
    iam = moto.clients.iam
    arns = {}
    for name, tagged_for in ((OURS, OURS), (NOT_OURS, "someone-else")):
        tags = {"crossplane-kind": crossplane_kind(API_VERSION, KIND), "crossplane-name": tagged_for, "crossplane-providerconfig": PROVIDER_CONFIG}
        arns[name] = iam.create_open_id_connect_provider(
            Url=url_of(name), ClientIDList=["sts.amazonaws.com"], ThumbprintList=[THUMBPRINT], Tags=[{"Key": k, "Value": v} for k, v in tags.items()]
        )["OpenIDConnectProviderArn"]
    yield arns
    left = {ref["Arn"] for ref in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]}
    for arn in set(arns.values()) & left:
        iam.delete_open_id_connect_provider(OpenIDConnectProviderArn=arn)


@pytest.fixture(scope="module")
def probes(aws_control_plane: AwsControlPlane, real_provider_aws: Process, held: dict[str, str]) -> Iterator[None]:
    kube = aws_control_plane.kube
    for name in (OURS, NOT_OURS):
        kube.create(managed(name))
    yield
    for name in (OURS, NOT_OURS):
        kube.delete(API_VERSION, KIND, name)
    kube.wait_for(lambda: all(kube.get(API_VERSION, KIND, n) is None for n in (OURS, NOT_OURS)) or None, "the probes deleted", timeout_s=180, interval_s=1)


def said(obj: dict[str, Any] | None) -> str:
    return "gone" if obj is None else "; ".join(f"{t}={c['status']}: {c.get('message', '')[:200]}" for t, c in conditions(obj).items())


def test_a_lost_create_tagged_for_the_resource_is_adopted(aws_control_plane: AwsControlPlane, probes: None, held: dict[str, str], lost_creates: LostCreates) -> None:
    kube = aws_control_plane.kube

    def synced() -> dict[str, Any] | None:
        obj = kube.get(API_VERSION, KIND, OURS)
        return obj if obj and condition_status(obj, "Ready") == "True" and condition_status(obj, "Synced") == "True" else None

    try:
        obj = kube.wait_for(synced, f"{OURS} Ready and Synced", timeout_s=180, interval_s=1)
    except TimeoutError as err:
        pytest.fail(f"{err}: {said(kube.get(API_VERSION, KIND, OURS))}", pytrace=False)
    assert obj["metadata"]["annotations"][EXTERNAL_NAME] == held[OURS], obj["metadata"]["annotations"]
    assert obj["status"]["atProvider"]["arn"] == held[OURS], obj["status"]["atProvider"]
    # Adopted by the mender, not found by provider-aws on its own: its create had been refused.
    assert [a.arn for a in lost_creates.adopted if a.name == OURS] == [held[OURS]], lost_creates.adopted


def test_one_held_under_another_resources_name_stays_stuck(aws_control_plane: AwsControlPlane, probes: None, held: dict[str, str], lost_creates: LostCreates) -> None:
    kube = aws_control_plane.kube

    def refused() -> dict[str, Any] | None:
        obj = kube.get(API_VERSION, KIND, NOT_OURS)
        message = conditions(obj).get("Synced", {}).get("message", "") if obj else ""
        return obj if ALREADY_EXISTS in message else None

    kube.wait_for(refused, f"{NOT_OURS} refused with {ALREADY_EXISTS}", timeout_s=180, interval_s=1)
    # Three of the mender's passes while it is stuck.
    time.sleep(3 * lost_creates.interval_s + 1)
    obj = kube.get(API_VERSION, KIND, NOT_OURS)
    assert obj is not None and EXTERNAL_NAME not in obj["metadata"].get("annotations", {}), obj
    assert condition_status(obj, "Synced") == "False", said(obj)
    assert not [a for a in lost_creates.adopted if a.name == NOT_OURS], lost_creates.adopted
    # What IAM held is said: the object under the URL, tagged for another resource.
    said_of_it = lost_creates.refused[f"{KIND} /{NOT_OURS}"]
    assert said_of_it.startswith("0 tagged for it") and held[NOT_OURS] in said_of_it and "someone-else" in said_of_it, said_of_it
