"""e2e/aws/provider.py's comparisons, checked without moto or the provider.

The AWS provider's e2e tests call a policy moto holds equal to the composed one when the two
are IAM-equivalent, and count moto's recorded requests as writes or reads: both must be
able to tell a difference.
"""

from __future__ import annotations

import json

from e2e.aws.provider import Call, new_in, normal_policy

TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/x"},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {
                "StringEquals": {
                    "x:sub": "system:serviceaccount:kube-system:a",
                    "x:aud": "sts.amazonaws.com",
                }
            },
        }
    ],
}


def test_iam_equivalent_documents_are_equal() -> None:
    listed = json.loads(json.dumps(TRUST))
    listed["Statement"][0]["Action"] = ["sts:AssumeRoleWithWebIdentity"]
    listed["Statement"][0]["Condition"]["StringEquals"]["x:aud"] = ["sts.amazonaws.com"]
    assert normal_policy(json.dumps(TRUST)) == normal_policy(listed)
    # A statement object and a one-statement list; values in another order.
    single = {**TRUST, "Statement": TRUST["Statement"][0]}
    assert normal_policy(single) == normal_policy(TRUST)
    two = {"Statement": [{"Effect": "Allow", "Action": ["b", "a"], "Resource": "*"}]}
    assert normal_policy(two) == normal_policy(
        {"Statement": [{"Effect": "Allow", "Action": ["a", "b"], "Resource": ["*"]}]}
    )


def test_documents_that_differ_are_not_equal() -> None:
    other_sub = json.loads(json.dumps(TRUST))
    other_sub["Statement"][0]["Condition"]["StringEquals"]["x:sub"] = (
        "system:serviceaccount:kube-system:b"
    )
    assert normal_policy(other_sub) != normal_policy(TRUST)
    like = json.loads(json.dumps(TRUST))
    like["Statement"][0]["Condition"] = {
        "StringLike": like["Statement"][0]["Condition"]["StringEquals"]
    }
    assert normal_policy(like) != normal_policy(TRUST)
    extra = json.loads(json.dumps(TRUST))
    extra["Statement"][0]["Action"] = ["sts:AssumeRoleWithWebIdentity", "sts:TagSession"]
    assert normal_policy(extra) != normal_policy(TRUST)


def test_writes_and_reads_of_moto_recording() -> None:
    assert Call("iam", "POST", "/", "CreateRole").writes
    assert Call("iam", "POST", "/", "TagRole").writes
    assert not Call("iam", "POST", "/", "GetRole").writes
    assert not Call("ec2", "POST", "/", "DescribeSecurityGroupRules").writes
    assert Call("s3", "PUT", "/bucket/key", "").writes
    assert Call("s3", "DELETE", "/bucket?policy", "").writes
    assert not Call("s3", "GET", "/bucket?policy", "").writes
    assert not Call("s3", "HEAD", "/bucket", "").writes


def test_new_in_names_only_what_was_added() -> None:
    before = {"roles": ["a"], "buckets": {"b": ["k"]}}
    after = {"roles": ["a", "c"], "buckets": {"b": ["k", "j"], "d": []}}
    assert new_in(after, before) == {"roles": ["c"], "buckets": {"b": ["k", "j"], "d": []}}
    assert new_in(before, before) == {}
