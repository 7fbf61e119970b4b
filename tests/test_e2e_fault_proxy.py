"""e2e/faults/aws_proxy.py: the fault proxy in front of moto, through real boto3 clients.

Each error is read back by botocore's own parsers of the service's protocol (the code the SDK
sees) and classified by botocore's standard retry mode (what an SDK does with it: throttling
and transient errors are retried, ``NoSuchEntity`` is not); the rest of the traffic reaches
moto unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.retries.standard import (
    RetryContext,
    ThrottledRetryableChecker,
    TransientRetryableChecker,
)

from e2e.faults.aws_proxy import (
    EVENTUAL_CONSISTENCY,
    SERVER_ERROR,
    SLOW,
    THROTTLE,
    FaultProxy,
    Rule,
)
from tests.aws_helpers import ADMIN, MotoServer

TRUST = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]})
POLICY = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "*"}]})


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def proxy(moto: MotoServer) -> Iterator[FaultProxy]:
    moto.reset()
    running = FaultProxy(moto.endpoint).start()
    yield running
    running.stop()


def client(proxy: FaultProxy, service: str, attempts: int = 1) -> Any:
    """A boto3 client of ``service`` through the proxy; ``attempts`` 1: no retry."""
    return boto3.client(
        service,
        endpoint_url=proxy.endpoint,
        region_name="us-east-1",
        aws_access_key_id=ADMIN["aws_access_key_id"],
        aws_secret_access_key=ADMIN["aws_secret_access_key"],
        config=Config(retries={"mode": "standard", "total_max_attempts": attempts}, s3={"addressing_style": "path"}),
    )


def refused(call: Any, **kwargs: Any) -> ClientError:
    with pytest.raises(ClientError) as err:
        call(**kwargs)
    return err.value


def retried_as(err: ClientError) -> set[str]:
    """How botocore's standard retry mode classifies the error: throttling, transient, or neither."""
    # The checkers read the status code from the HTTP response: the one the error came with.
    answered = SimpleNamespace(status_code=err.response["ResponseMetadata"]["HTTPStatusCode"])
    context = RetryContext(attempt_number=1, parsed_response=err.response, http_response=answered, caught_exception=None)
    out = set()
    if ThrottledRetryableChecker().is_retryable(context):
        out.add("throttling")
    if TransientRetryableChecker().is_retryable(context):
        out.add("transient")
    return out


def test_without_rules_everything_reaches_moto(proxy: FaultProxy) -> None:
    iam, s3 = client(proxy, "iam"), client(proxy, "s3")
    iam.create_role(RoleName="plain", AssumeRolePolicyDocument=TRUST)
    assert iam.get_role(RoleName="plain")["Role"]["RoleName"] == "plain"
    s3.create_bucket(Bucket="plain-bucket")
    s3.put_object(Bucket="plain-bucket", Key="a/b.json", Body=b'{"k": 1}', ContentType="application/json")
    got = s3.get_object(Bucket="plain-bucket", Key="a/b.json")
    assert got["Body"].read() == b'{"k": 1}' and got["ContentType"] == "application/json"
    assert s3.head_object(Bucket="plain-bucket", Key="a/b.json")["ContentLength"] == 8
    assert proxy.forwarded >= 6 and proxy.injected == []


# service -> (a call, its arguments, the throttling error's code, its HTTP status)
THROTTLED = {
    "iam": ("create_role", {"RoleName": "r", "AssumeRolePolicyDocument": TRUST}, "Throttling", 400),
    "sts": ("get_caller_identity", {}, "Throttling", 400),
    "ec2": ("describe_vpcs", {}, "RequestLimitExceeded", 503),
    "s3": ("create_bucket", {"Bucket": "b"}, "SlowDown", 503),
    "cloudfront": ("list_distributions", {}, "Throttling", 400),
    "route53": ("list_hosted_zones", {}, "Throttling", 400),
}


@pytest.mark.parametrize("service", sorted(THROTTLED))
def test_throttling_is_each_services_own(proxy: FaultProxy, service: str) -> None:
    call, kwargs, code, status = THROTTLED[service]
    proxy.set(Rule(THROTTLE, services=frozenset({service})))
    err = refused(getattr(client(proxy, service), call), **kwargs)
    assert err.response["Error"]["Code"] == code
    assert err.response["ResponseMetadata"]["HTTPStatusCode"] == status
    assert "throttling" in retried_as(err)
    assert [(i.kind, i.service, i.status, i.code) for i in proxy.injected] == [(THROTTLE, service, status, code)]


@pytest.mark.parametrize(("service", "code"), [("iam", "InternalFailure"), ("ec2", "InternalError"), ("s3", "InternalError")])
def test_server_errors_are_500s_an_sdk_retries(proxy: FaultProxy, service: str, code: str) -> None:
    proxy.set(Rule(SERVER_ERROR, services=frozenset({service})))
    call = {"iam": ("list_roles", {}), "ec2": ("describe_vpcs", {}), "s3": ("list_buckets", {})}[service]
    err = refused(getattr(client(proxy, service), call[0]), **call[1])
    assert (err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]) == (code, 500)
    assert "transient" in retried_as(err)


def test_an_sdk_retrying_gets_through_every_other_request(proxy: FaultProxy) -> None:
    """Every second CreateRole is throttled: boto3 with retries gets each role made, once."""
    proxy.set(Rule(THROTTLE, services=frozenset({"iam"}), actions=frozenset({"CreateRole"}), every=2))
    iam = client(proxy, "iam", attempts=3)
    for name in ("one", "two", "three"):
        iam.create_role(RoleName=name, AssumeRolePolicyDocument=TRUST)
    assert len(proxy.faults([THROTTLE])) >= 1
    assert sorted(r["RoleName"] for r in iam.list_roles()["Roles"]) == ["one", "three", "two"]


def test_a_rule_touches_only_its_services_and_actions(proxy: FaultProxy) -> None:
    proxy.set(Rule(THROTTLE, services=frozenset({"iam"}), actions=frozenset({"DeleteRole"})))
    iam = client(proxy, "iam")
    iam.create_role(RoleName="kept", AssumeRolePolicyDocument=TRUST)
    client(proxy, "s3").list_buckets()
    assert refused(iam.delete_role, RoleName="kept").response["Error"]["Code"] == "Throttling"
    proxy.clear()
    iam.delete_role(RoleName="kept")
    assert [i.action for i in proxy.injected] == ["DeleteRole"]


def test_slow_responses_arrive_late_and_whole(proxy: FaultProxy) -> None:
    proxy.set(Rule(SLOW, services=frozenset({"iam"}), delay_s=0.6))
    iam = client(proxy, "iam")
    started = time.monotonic()
    iam.create_role(RoleName="slow", AssumeRolePolicyDocument=TRUST)
    assert time.monotonic() - started >= 0.6
    assert iam.get_role(RoleName="slow")["Role"]["RoleName"] == "slow"
    assert {(i.kind, i.status) for i in proxy.injected} == {(SLOW, 0)}


def test_a_fresh_role_exists_but_cannot_be_attached_or_assumed_for_a_while(proxy: FaultProxy) -> None:
    iam, sts = client(proxy, "iam"), client(proxy, "sts")
    iam.create_role(RoleName="older", AssumeRolePolicyDocument=TRUST)  # before IAM lagged
    proxy.set(Rule(EVENTUAL_CONSISTENCY, window_s=1.5))
    role = iam.create_role(RoleName="fresh", AssumeRolePolicyDocument=TRUST)["Role"]
    policy = iam.create_policy(PolicyName="fresh-policy", PolicyDocument=POLICY)["Policy"]
    assert iam.get_role(RoleName="fresh")["Role"]["Arn"] == role["Arn"]  # it exists
    err = refused(iam.attach_role_policy, RoleName="fresh", PolicyArn="arn:aws:iam::aws:policy/AdministratorAccess")
    assert (err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]) == ("NoSuchEntity", 404)
    assert retried_as(err) == set()  # an SDK does not retry it: the caller must
    err = refused(iam.attach_role_policy, RoleName="older", PolicyArn=policy["Arn"])
    assert err.response["Error"]["Code"] == "NoSuchEntity" and policy["Arn"] in err.response["Error"]["Message"]
    err = refused(sts.assume_role, RoleArn=role["Arn"], RoleSessionName="session")
    assert (err.response["Error"]["Code"], err.response["ResponseMetadata"]["HTTPStatusCode"]) == ("AccessDenied", 403)
    time.sleep(1.6)
    iam.attach_role_policy(RoleName="fresh", PolicyArn=policy["Arn"])
    assert [p["PolicyArn"] for p in iam.list_attached_role_policies(RoleName="fresh")["AttachedPolicies"]] == [policy["Arn"]]
    assert {i.code for i in proxy.faults([EVENTUAL_CONSISTENCY])} == {"NoSuchEntity", "AccessDenied"}


def test_a_rule_is_checked_when_made() -> None:
    with pytest.raises(ValueError, match="kind 'flaky'"):
        Rule("flaky")
    with pytest.raises(ValueError, match="every 0"):
        Rule(THROTTLE, every=0)
