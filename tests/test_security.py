"""Security by default: exact trust policies, public read of two keys only, no key leaks."""

from __future__ import annotations

import asyncio
import base64
import json
import logging as stdlogging

import pytest
from crossplane.function import logging
from google.protobuf import json_format

from function import fn
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import SCENARIOS, by_name, staged_control_plane

EXPECTED_SUBJECTS = {
    "vpc-cni-role": "system:serviceaccount:kube-system:aws-node",
    "ebs-role": "system:serviceaccount:kube-system:ebs-csi-controller-sa",
    "efs-role": "system:serviceaccount:kube-system:efs-csi-controller-sa",
    "lbc-role": "system:serviceaccount:kube-system:aws-load-balancer-controller",
}
RELEASE_OF_ROLE = {
    "vpc-cni-role": ("cni-release", ("serviceAccount",)),
    "ebs-role": ("ebs-release", ("controller", "serviceAccount")),
    "efs-role": ("efs-release", ("controller", "serviceAccount")),
    "lbc-role": ("lbc-release", ("serviceAccount",)),
}


def _final(name: str) -> InMemoryCrossplane:
    world = by_name(name).world(staged=False)
    world.run(15)
    assert world.xr_ready
    return world


@pytest.mark.parametrize(
    "name", ["selfhosted-full", "external-eks", "china-region", "selfhosted-legacy-xr"]
)
def test_trust_policies_name_the_exact_service_account_and_audience(name: str) -> None:
    world = _final(name)
    issuer = world.xr["status"]["issuerURL"].removeprefix("https://")
    provider = world.xr["status"]["oidcProviderARN"]
    partition = {"china-region": "aws-cn"}.get(name, "aws")
    assert provider.startswith(f"arn:{partition}:iam::")
    if name == "china-region":
        assert issuer.endswith(".amazonaws.com.cn")
    roles = {n: c for n, c in world.composed.items() if n in EXPECTED_SUBJECTS}
    assert roles
    for node, c in roles.items():
        doc = json.loads(c.obj["spec"]["forProvider"]["assumeRolePolicy"])
        assert len(doc["Statement"]) == 1
        st = doc["Statement"][0]
        assert st["Effect"] == "Allow"
        assert st["Action"] == "sts:AssumeRoleWithWebIdentity"
        assert st["Principal"] == {"Federated": provider}
        assert st["Condition"] == {
            "StringEquals": {
                f"{issuer}:sub": EXPECTED_SUBJECTS[node],
                f"{issuer}:aud": "sts.amazonaws.com",
            }
        }
        assert "*" not in json.dumps(doc)
        # The chart's ServiceAccount is exactly the one the trust policy names.
        release, path = RELEASE_OF_ROLE[node]
        values = world.composed[release].obj["spec"]["forProvider"]["values"]
        for key in path:
            values = values[key]
        assert f"system:serviceaccount:kube-system:{values['name']}" == EXPECTED_SUBJECTS[node]
        assert (
            values["annotations"]["eks.amazonaws.com/role-arn"]
            == world.xr["status"]["roleARNs"][
                {
                    "vpc-cni-role": "vpcCni",
                    "ebs-role": "ebs",
                    "efs-role": "efs",
                    "lbc-role": "loadBalancerController",
                }[node]
            ]
        )


def test_only_the_two_discovery_documents_are_public() -> None:
    world = _final("selfhosted-full")
    bucket = world.composed["irsa-bucket"].obj["metadata"]["annotations"][
        "crossplane.io/external-name"
    ]
    policy = json.loads(world.composed["irsa-bucket-policy"].obj["spec"]["forProvider"]["policy"])
    public = [s for s in policy["Statement"] if s["Principal"] == "*" and s["Effect"] == "Allow"]
    assert len(public) == 1
    assert public[0]["Action"] == "s3:GetObject"
    assert public[0]["Resource"] == [
        f"arn:aws:s3:::{bucket}/.well-known/openid-configuration",
        f"arn:aws:s3:::{bucket}/keys.json",
    ]
    denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert denies and denies[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    pab = world.composed["irsa-bucket-public-access"].obj["spec"]["forProvider"]
    assert pab["blockPublicAcls"] is True and pab["ignorePublicAcls"] is True
    ownership = world.composed["irsa-bucket-ownership"].obj["spec"]["forProvider"]["rule"]
    assert ownership == {"objectOwnership": "BucketOwnerEnforced"}


def test_jwks_is_the_public_half_of_the_sa_secret() -> None:
    from cryptography.hazmat.primitives import serialization

    world = _final("selfhosted-full")
    secret = next(o for o in world.required if o["kind"] == "Secret")
    key = serialization.load_pem_public_key(base64.b64decode(secret["data"]["tls.crt"]))
    jwks = json.loads(world.composed["irsa-jwks"].obj["spec"]["forProvider"]["content"])
    (jwk,) = jwks["keys"]
    n = int.from_bytes(base64.urlsafe_b64decode(jwk["n"] + "=="), "big")
    assert n == key.public_numbers().n  # type: ignore[union-attr]
    discovery = json.loads(world.composed["irsa-discovery"].obj["spec"]["forProvider"]["content"])
    assert discovery["issuer"] == world.xr["status"]["issuerURL"]
    assert discovery["jwks_uri"] == world.xr["status"]["issuerURL"] + "/keys.json"


def _secret_fragments(world: InMemoryCrossplane) -> list[str]:
    """Every way the private key (and nothing public) could show up in output."""
    out = []
    for obj in world.required:
        if obj["kind"] != "Secret":
            continue
        encoded = obj["data"]["tls.key"]
        pem = base64.b64decode(encoded).decode()
        body_lines = [ln for ln in pem.splitlines() if ln and not ln.startswith("-----")]
        out += [encoded[:40], encoded[-40:], *body_lines[1:4]]
    assert out, "the scenario has no private key to look for"
    return out


# Scenarios in which the function asks for <cluster>-sa (SelfHosted IRSA).
KEY_SCENARIOS = [
    s
    for s in SCENARIOS
    if s.example not in {"external-eks", "eks-pod-identity", "eks-pod-identity-legacy"}
    and not s.name.endswith("irsa-disabled")
]


@pytest.mark.parametrize("scenario", KEY_SCENARIOS, ids=lambda s: s.name)
def test_private_key_never_leaves_memory(scenario, capsys) -> None:
    """Serve-path logging at DEBUG, every response in every encoding: no trace of tls.key."""
    logging.configure(logging.Level.DEBUG)
    runner = fn.FunctionRunner()
    captured: list[str] = []

    def run_and_capture(req):
        rsp = asyncio.run(runner.RunFunction(req, None))
        captured.append(json_format.MessageToJson(rsp))
        captured.append(rsp.SerializeToString().decode("latin-1"))
        return rsp

    world = scenario.world(runner=run_and_capture)
    world.run(20, before=staged_control_plane(3, 8))
    fragments = _secret_fragments(world)
    out = capsys.readouterr()
    captured += [out.out, out.err, json.dumps(world.xr)]
    for text in captured:
        for frag in fragments:
            assert frag not in text
    # The check is not vacuous: the request itself did carry the key.
    req = world.request()
    world._fill(req, fn.run(req))
    assert any(frag in req.SerializeToString().decode("latin-1") for frag in fragments)
    logging.configure(logging.Level.DISABLED)
    stdlogging.getLogger().handlers.clear()


def test_no_statement_grants_wildcard_actions_or_principals() -> None:
    world = _final("selfhosted-full")
    for c in world.composed.values():
        fp = c.obj["spec"].get("forProvider", {})
        for key in ("policy", "assumeRolePolicy"):
            if key not in fp or c.obj["kind"] == "BucketPolicy":
                continue
            doc = json.loads(fp[key])
            for st in doc["Statement"]:
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                assert "*" not in actions
                assert st.get("Principal") != "*"


POD_IDENTITY_SCENARIOS = [s.name for s in SCENARIOS if s.example.startswith("eks-pod-identity")]


@pytest.mark.parametrize("name", POD_IDENTITY_SCENARIOS)
def test_pod_identity_roles_serve_one_service_account_of_one_cluster(name: str) -> None:
    """EKS Pod Identity: every role trusts pods.eks.amazonaws.com only under conditions on the
    session tags naming its one service account, its namespace and this cluster; its
    association names the same; the chart's ServiceAccount carries no role annotation (IRSA
    would take precedence); no issuer, webhook or cert-manager is composed."""
    world = _final(name)
    roles = {n: c for n, c in world.composed.items() if n in EXPECTED_SUBJECTS}
    assert roles
    for node, c in roles.items():
        namespace, account = EXPECTED_SUBJECTS[node].removeprefix("system:serviceaccount:").split(":")
        doc = json.loads(c.obj["spec"]["forProvider"]["assumeRolePolicy"])
        (st,) = doc["Statement"]
        assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
        assert st["Condition"]["StringEquals"] == {
            "aws:RequestTag/eks-cluster-name": "prod",
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": account,
        }
        # The example's region, or the scenario's (GovCloud: its own partition).
        region = world.xr["spec"]["region"]
        partition = "aws-us-gov" if region.startswith("us-gov-") else "aws"
        assert st["Condition"]["StringLike"] == {
            "aws:RequestTag/eks-cluster-arn": f"arn:{partition}:eks:{region}:*:cluster/prod"
        }
        association = world.composed[f"{node}-association"].obj["spec"]["forProvider"]
        assert (association["namespace"], association["serviceAccount"]) == (namespace, account)
        assert association["clusterName"] == "prod"
        key = {"vpc-cni-role": "vpcCni", "ebs-role": "ebs", "lbc-role": "loadBalancerController"}[node]
        assert association["roleArn"] == world.xr["status"]["roleARNs"][key]
        assert "disableSessionTags" not in association  # the conditions need the session tags
        release, path = RELEASE_OF_ROLE[node]
        values = world.composed[release].obj["spec"]["forProvider"]["values"]
        for key in path:
            values = values[key]
        assert values == {"name": account}
    assert not any(n.startswith("irsa-") for n in world.composed)
    assert "pod-identity-webhook-release" not in world.composed
    assert "cert-manager-release" not in world.composed
    assert "issuerURL" not in world.xr["status"] and "oidcProviderARN" not in world.xr["status"]


def test_the_pod_identity_trust_rule_catches_a_role_for_any_service_account() -> None:
    """Control: a Pod Identity trust policy without the service-account condition (Upbound's
    shape, which any association in the account could use) fails the exact-shape rule."""
    from tests.test_iam_lint import Doc, trust_problems

    world = _final("eks-pod-identity")
    text = world.composed["ebs-role"].obj["spec"]["forProvider"]["assumeRolePolicy"]
    ctx = (("bucket", ""), ("eks_cluster", "prod"), ("issuer", ""), ("provider", ""), ("region", "us-west-2"))
    assert trust_problems(Doc("eks-pod-identity", "ebs-role", "trust", text, ctx)) == []
    doc = json.loads(text)
    del doc["Statement"][0]["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-service-account"]
    assert trust_problems(Doc("eks-pod-identity", "ebs-role", "trust", json.dumps(doc), ctx))
    doc["Statement"][0].pop("Condition")
    assert trust_problems(Doc("eks-pod-identity", "ebs-role", "trust", json.dumps(doc), ctx))
