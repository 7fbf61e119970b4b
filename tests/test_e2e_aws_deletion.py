"""e2e/aws/deletion.py: the Delete calls moto records, named as the composed resources they
withdraw, and the Usage-order check over them and the control plane's revisions.

The calls are real ones: boto3 against a moto server with its request recorder (the e2e's
``Moto``), read back as the e2e reads them; the Usage-order check is fed what the e2e's watch
records (``Event``) in the right and in a wrong order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.aws.deletion import (
    deletion_key_of,
    deletions,
    reversed_usages,
    usage_order_problems,
)
from e2e.aws.provider import Moto
from e2e.controlplane.driver import Event

BUCKET = "demo-oidc"
KEY = "team-w/demo/.well-known/openid-configuration"
TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]})


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    server = Moto(Path(tmp_path_factory.mktemp("moto")) / "recording.jsonl")
    yield server
    server.stop()


def _mr(kind: str, name: str, fp: dict[str, Any], at: dict[str, Any] | None = None, external: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": {"crossplane.io/external-name": external or name}}
    return {"kind": kind, "metadata": meta, "spec": {"forProvider": fp}, "status": {"atProvider": at or {}}}


def _usage(name: str, by: dict[str, Any], of: dict[str, Any]) -> dict[str, Any]:
    def end(o: dict[str, Any]) -> dict[str, Any]:
        return {"kind": o["kind"], "resourceRef": {"name": o["metadata"]["name"]}}

    return {"kind": "Usage", "metadata": {"name": name}, "spec": {"by": end(by), "of": end(of)}}


@pytest.fixture(scope="module")
def made(moto: Moto) -> dict[str, Any]:
    """Everything of the kinds the function composes, made in moto, and its composed objects."""
    iam, s3 = moto.clients.iam, moto.clients.s3
    role = iam.create_role(RoleName="demo-efs", AssumeRolePolicyDocument=TRUST)["Role"]
    policy = iam.create_policy(PolicyName="demo-lbc", PolicyDocument=POLICY)["Policy"]
    iam.attach_role_policy(RoleName="demo-efs", PolicyArn=policy["Arn"])
    oidc = iam.create_open_id_connect_provider(Url="https://oidc.example.com/team-w/demo", ClientIDList=["sts.amazonaws.com"], ThumbprintList=["a" * 40])
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=KEY, Body=b"{}")
    s3.put_bucket_policy(Bucket=BUCKET, Policy=POLICY.replace('"*"', f'"arn:aws:s3:::{BUCKET}/*"'))
    s3.put_public_access_block(Bucket=BUCKET, PublicAccessBlockConfiguration={"BlockPublicAcls": True})
    s3.put_bucket_ownership_controls(Bucket=BUCKET, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]})
    composed = {
        "efs-role": _mr("Role", "demo-x1", {}, {"arn": role["Arn"]}, external="demo-efs"),
        "efs-role-attachment": _mr("RolePolicyAttachment", "demo-x2", {"role": "demo-efs", "policyArn": policy["Arn"]}),
        "lbc-policy": _mr("Policy", "demo-x3", {}, {"arn": policy["Arn"]}, external="demo-lbc"),
        "irsa-oidc-provider": _mr("OpenIDConnectProvider", "demo-x4", {}, {"arn": oidc["OpenIDConnectProviderArn"]}),
        "irsa-bucket": _mr("Bucket", "demo-x5", {}, external=BUCKET),
        "irsa-discovery": _mr("Object", "demo-x6", {"bucket": BUCKET, "key": KEY}),
        "irsa-bucket-policy": _mr("BucketPolicy", "demo-x7", {"bucket": BUCKET}),
        "irsa-bucket-public-access": _mr("BucketPublicAccessBlock", "demo-x8", {"bucket": BUCKET}),
        "irsa-bucket-ownership": _mr("BucketOwnershipControls", "demo-x9", {"bucket": BUCKET}),
    }
    return {"composed": composed, "policy": policy["Arn"], "oidc": oidc["OpenIDConnectProviderArn"]}


def test_each_recorded_delete_call_is_named_as_the_resource_it_withdraws(moto: Moto, made: dict[str, Any]) -> None:
    iam, s3 = moto.clients.iam, moto.clients.s3
    moto.start_recording()
    iam.list_roles()  # a read: no deletion
    iam.detach_role_policy(RoleName="demo-efs", PolicyArn=made["policy"])
    iam.delete_role(RoleName="demo-efs")
    iam.delete_policy(PolicyArn=made["policy"])
    iam.delete_open_id_connect_provider(OpenIDConnectProviderArn=made["oidc"])
    s3.delete_object(Bucket=BUCKET, Key=KEY)
    s3.delete_bucket_policy(Bucket=BUCKET)
    s3.delete_public_access_block(Bucket=BUCKET)
    s3.delete_bucket_ownership_controls(Bucket=BUCKET)
    s3.delete_bucket(Bucket=BUCKET)
    calls = moto.stop_recording()
    c = made["composed"]
    order = ["efs-role-attachment", "efs-role", "lbc-policy", "irsa-oidc-provider", "irsa-discovery", "irsa-bucket-policy", "irsa-bucket-public-access", "irsa-bucket-ownership", "irsa-bucket"]
    assert deletions(calls) == [deletion_key_of(c[n]) for n in order]
    assert len(set(deletions(calls))) == len(order)


def _events(sequence: list[tuple[str, dict[str, Any]]]) -> list[Event]:
    return [Event(what, o["kind"], o["metadata"]["name"], "team-w", "", revision) for revision, (what, o) in enumerate(sequence, start=100)]


def test_the_usage_order_check_tells_the_right_order_from_a_wrong_one(made: dict[str, Any]) -> None:
    c = made["composed"]
    attachment, role = c["efs-role-attachment"], c["efs-role"]
    usage = _usage("demo-u1", attachment, role)
    composed = {**c, "usage-efs-role-attachment-efs-role": usage}
    usages = {"usage-efs-role-attachment-efs-role": usage}
    right = _events([("deleting", attachment), ("deleted", attachment), ("deleting", usage), ("deleted", usage), ("deleting", role), ("deleted", role)])
    in_moto = [deletion_key_of(attachment), deletion_key_of(role)]

    order = usage_order_problems(usages, composed, right, in_moto)
    assert order.checked == ["usage-efs-role-attachment-efs-role: control plane", "usage-efs-role-attachment-efs-role: moto"]
    assert not order.problems, order.problems
    # The same evidence refutes the reversed expectation.
    assert usage_order_problems(reversed_usages(usages), composed, right, in_moto).problems

    # The role marked for deletion while its Usage is still there: refused.
    early = _events([("deleting", attachment), ("deleting", role), ("deleted", attachment), ("deleted", usage), ("deleted", role)])
    assert [p for p in usage_order_problems(usages, composed, early, in_moto).problems if "the Usage gone at" in p]
    # The role marked before its attachment: refused.
    first = _events([("deleting", usage), ("deleted", usage), ("deleting", role), ("deleting", attachment), ("deleted", attachment), ("deleted", role)])
    assert [p for p in usage_order_problems(usages, composed, first, in_moto).problems if "marked for deletion" in p and "Role" in p]
    # The role marked after the Usage went, the attachment marked but not yet gone: refused
    # (the function holds the Usage until the API server no longer has the attachment).
    overlap = _events([("deleting", attachment), ("deleting", usage), ("deleted", usage), ("deleting", role), ("deleted", attachment), ("deleted", role)])
    assert [p for p in usage_order_problems(usages, composed, overlap, in_moto).problems if "RolePolicyAttachment" in p and "gone at" in p]
    # AWS asked to delete the role before the policy was detached: refused.
    assert [p for p in usage_order_problems(usages, composed, right, in_moto[::-1]).problems if "moto got" in p]
    # Deleting the XR (collected): the attachment gone before the role is marked, the Usage
    # going a revision after the role was marked (its in-use label lifted first): allowed;
    # the role marked while the attachment is only marked: refused.
    lifted = _events([("deleting", attachment), ("deleting", usage), ("deleted", attachment), ("deleting", role), ("deleted", usage), ("deleted", role)])
    assert not usage_order_problems(usages, composed, lifted, in_moto, collected=True).problems
    assert usage_order_problems(usages, composed, lifted, in_moto).problems
    assert usage_order_problems(usages, composed, overlap, in_moto, collected=True).problems
    # No Delete call for the role at all: refused, not skipped.
    assert usage_order_problems(usages, composed, right, in_moto[:1]).problems
    # The used end not withdrawn: nothing to check.
    assert not usage_order_problems(usages, composed, right[:2], []).checked
