"""The issuer behind CloudFront (``spec.irsa.hosting``): order, gates, status, policies, deletion.

Shared: only the two documents (under the XR's own path, in the platform team's
bucket) and the OIDC provider. Managed: private bucket, origin access control,
distribution, a bucket policy for that distribution only (once its ARN is known), the
optional Route 53 alias, and the OIDC provider last. The distribution is slow (about
15 minutes): the status says so while the rest waits for it.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any

import pytest

from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests.scenarios import SCENARIOS, Scenario, by_name, staged_control_plane

CLOUDFRONT_SCENARIOS = [s for s in SCENARIOS if s.example.startswith("cloudfront-")]
MANAGED = "cloudfront-managed"
SHARED = "cloudfront-shared"


def _timeline(world: InMemoryCrossplane, steps: int) -> tuple[dict[str, int], dict[str, int], list[dict]]:
    """(step each node was created, step it was first observed ready, irsa's status per step)."""
    created: dict[str, int] = {}
    ready: dict[str, int] = {}
    irsa: list[dict[str, Any]] = []
    before = staged_control_plane(3, 8)
    for _ in range(steps):
        before(world)
        rec = world.reconcile()
        assert rec.fatal is None, rec.fatal
        for name in rec.created:
            created.setdefault(name, rec.step)
        irsa.append(next(p for p in world.xr["status"]["plugins"] if p["name"] == "irsa"))
        for name, c in world.composed.items():
            if c.ready:
                ready.setdefault(name, rec.step + 1)  # observed ready from the next reconcile
    return created, ready, irsa


def _for_provider(world: InMemoryCrossplane, node: str) -> dict[str, Any]:
    return world.composed[node].obj["spec"]["forProvider"]


def _at_provider(world: InMemoryCrossplane, node: str) -> dict[str, Any]:
    """What the provider reports of ``node`` (status.atProvider), as Crossplane observes it."""
    return world._observed_object(world.composed[node])["status"]["atProvider"]


# --- Managed -------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", [True, False], ids=["with-record", "without-record"])
def test_managed_order_follows_the_gates_with_a_slow_distribution(zone: bool) -> None:
    scenario = by_name(MANAGED if zone else "cloudfront-managed-no-record")
    world = scenario.world(slow={"Distribution": 15})
    created, ready, irsa = _timeline(world, 45)
    assert world.xr_ready and world.deletions == []

    def after(node: str, *deps: str) -> None:
        for dep in deps:
            assert created[node] >= ready[dep], f"{node} at {created[node]}, {dep} ready {ready[dep]}"

    after("irsa-origin-access-control", "irsa-bucket", "irsa-bucket-public-access")
    after(
        "irsa-distribution",
        "irsa-origin-access-control",
        "irsa-bucket",
        "irsa-bucket-ownership",
        "irsa-bucket-public-access",
    )
    # The bucket policy names the distribution's ARN, which exists only once it is deployed.
    after("irsa-bucket-policy", "irsa-distribution", "irsa-bucket-public-access")
    after("irsa-discovery", "irsa-bucket")
    provider_deps = ["irsa-distribution", "irsa-bucket-policy", "irsa-discovery", "irsa-jwks"]
    if zone:
        after("irsa-dns-record", "irsa-distribution")
        provider_deps.append("irsa-dns-record")
    else:
        assert "irsa-dns-record" not in created
    after("irsa-oidc-provider", *provider_deps)
    for role in ("vpc-cni-role", "ebs-role"):
        after(role, "irsa-oidc-provider")
    assert ready["irsa-distribution"] - created["irsa-distribution"] >= 15
    # While CloudFront deploys, the status says why the issuer waits so long.
    deploying = irsa[created["irsa-distribution"] : ready["irsa-distribution"] - 1]
    assert deploying
    for status in deploying:
        assert status["phase"] == "Installing"
        assert "CloudFront takes about 15 minutes" in status["message"], status
    assert all("15 minutes" not in s.get("message", "") for s in irsa[ready["irsa-distribution"] :])
    if not zone:
        # The user creates the record: the status says where it must point, even when Ready.
        domain = _at_provider(world, "irsa-distribution")["domainName"]
        assert f"at {domain}" in irsa[-1]["message"] and irsa[-1]["phase"] == "Ready"


def test_managed_resources_are_what_the_design_says() -> None:
    world = by_name("cloudfront-managed-namespaced").world(staged=False)
    world.run(20)
    assert world.xr_ready
    xr = world.xr
    bucket = world.composed["irsa-bucket"].obj["metadata"]["annotations"]["crossplane.io/external-name"]
    pab = _for_provider(world, "irsa-bucket-public-access")
    assert all(pab[k] is True for k in ("blockPublicAcls", "ignorePublicAcls", "blockPublicPolicy", "restrictPublicBuckets"))
    assert _for_provider(world, "irsa-bucket-ownership")["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    oac = _for_provider(world, "irsa-origin-access-control")
    assert (oac["originAccessControlOriginType"], oac["signingBehavior"], oac["signingProtocol"]) == ("s3", "always", "sigv4")
    dist = world.composed["irsa-distribution"]
    assert dist.obj["apiVersion"] == "cloudfront.aws.m.upbound.io/v1beta1"
    fp = dist.obj["spec"]["forProvider"]
    assert "region" not in fp  # global: the CRD has no region
    assert fp["aliases"] == ["auth-oidc.example.com"] and fp["enabled"] is True
    (origin,) = fp["origin"]
    assert origin["domainName"] == f"{bucket}.s3.eu-west-1.amazonaws.com"  # REST, not website
    assert origin["originAccessControlId"] == _at_provider(world, "irsa-origin-access-control")["id"]
    behaviour = fp["defaultCacheBehavior"]
    assert behaviour["allowedMethods"] == behaviour["cachedMethods"] == ["GET", "HEAD"]
    assert behaviour["viewerProtocolPolicy"] == "https-only"
    assert behaviour["cachePolicyId"] == "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
    assert behaviour["targetOriginId"] == origin["originId"]
    assert fp["viewerCertificate"] == {
        "acmCertificateArn": xr["spec"]["irsa"]["hosting"]["cloudFront"]["certificateArn"],
        "sslSupportMethod": "sni-only",
        "minimumProtocolVersion": "TLSv1.2_2021",
    }
    assert fp["priceClass"] == "PriceClass_100"
    assert fp["restrictions"] == {"geoRestriction": {"restrictionType": "none"}}
    record = _for_provider(world, "irsa-dns-record")
    assert record["name"] == "auth-oidc.example.com" and record["type"] == "A"
    assert record["alias"]["zoneId"] == "Z2FDTNDATAQYW2"
    assert record["alias"]["name"] == _at_provider(world, "irsa-distribution")["domainName"]
    assert xr["status"]["issuerURL"] == "https://auth-oidc.example.com"
    assert _for_provider(world, "irsa-oidc-provider")["url"] == "https://auth-oidc.example.com"
    assert _for_provider(world, "irsa-jwks")["key"] == "keys.json"


def test_a_managed_path_prefixes_the_keys_and_the_issuer() -> None:
    world = by_name("cloudfront-managed-no-record").world(staged=False)
    world.run(20)
    issuer = "https://auth-oidc.example.com/issuers/auth"
    assert world.xr["status"]["issuerURL"] == issuer
    discovery = _for_provider(world, "irsa-discovery")
    assert discovery["key"] == "issuers/auth/.well-known/openid-configuration"
    doc = json.loads(discovery["content"])
    assert doc["issuer"] == issuer and doc["jwks_uri"] == f"{issuer}/keys.json"
    assert _for_provider(world, "irsa-jwks")["key"] == "issuers/auth/keys.json"
    policy = json.loads(_for_provider(world, "irsa-bucket-policy")["policy"])
    bucket = _for_provider(world, "irsa-discovery")["bucket"]
    assert policy["Statement"][0]["Resource"] == [
        f"arn:aws:s3:::{bucket}/issuers/auth/.well-known/openid-configuration",
        f"arn:aws:s3:::{bucket}/issuers/auth/keys.json",
    ]
    assert _for_provider(world, "irsa-distribution")["priceClass"] == "PriceClass_All"


# --- Shared --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [SHARED, "cloudfront-shared-legacy-xr", "cloudfront-shared-bucket-elsewhere"])
def test_shared_writes_only_its_documents_under_its_own_path(name: str) -> None:
    world = by_name(name).world()
    created, ready, _ = _timeline(world, 20)
    assert world.xr_ready
    kinds = {c.obj["kind"] for c in world.composed.values()}
    assert not kinds & {"Bucket", "BucketPolicy", "BucketPublicAccessBlock", "BucketOwnershipControls", "Distribution", "OriginAccessControl", "Record"}
    issuer = "https://oidc.example.com/team-c/api"
    assert world.xr["status"]["issuerURL"] == issuer
    region = "eu-central-1" if name.endswith("elsewhere") else "us-east-1"
    for node, key in (("irsa-discovery", ".well-known/openid-configuration"), ("irsa-jwks", "keys.json")):
        fp = _for_provider(world, node)
        assert (fp["bucket"], fp["key"], fp["region"]) == ("acme-oidc-issuers", f"team-c/api/{key}", region)
    doc = json.loads(_for_provider(world, "irsa-discovery")["content"])
    assert doc["issuer"] == issuer and doc["jwks_uri"] == f"{issuer}/keys.json"
    assert _for_provider(world, "irsa-oidc-provider")["url"] == issuer
    assert created["irsa-oidc-provider"] >= max(ready["irsa-discovery"], ready["irsa-jwks"])
    # No Usage of the platform team's bucket (it is not composed): only the roles' of the provider.
    usages = {n for n in world.composed if n.startswith("usage-irsa-")}
    assert usages == set()


# --- policies: S3's own definition of "public" ------------------------------------------------

# S3 User Guide, "The meaning of 'public'": a bucket policy is non-public only if every
# statement that allows access grants it to fixed values (no wildcard, no policy variable)
# of a principal (AWS account, user, role or service principal) or of one of these keys.
FIXING_KEYS = {
    "aws:sourcearn",
    "aws:sourcevpc",
    "aws:sourcevpce",
    "aws:sourceowner",
    "aws:sourceaccount",
    "aws:principalorgid",
    "aws:userid",
    "s3:dataaccesspointarn",
    "s3:dataaccesspointaccount",
}
FIXING_OPERATORS = {"StringEquals", "StringEqualsIgnoreCase", "ArnEquals", "ArnLike", "StringLike"}


def _fixed(value: Any) -> bool:
    values = value if isinstance(value, list) else [value]
    return bool(values) and all(
        isinstance(v, str) and v and not any(c in v for c in "*?") and "${" not in v for v in values
    )


def _fixed_principal(principal: Any) -> bool:
    if principal == "*" or not isinstance(principal, dict):
        return False
    return all(_fixed(v) for v in principal.values())


def _fixed_condition(condition: dict[str, Any]) -> bool:
    for operator, pairs in condition.items():
        for key, value in pairs.items():
            if operator in FIXING_OPERATORS and key.lower() in FIXING_KEYS and _fixed(value):
                return True
            if operator == "IpAddress" and key.lower() == "aws:sourceip" and _fixed(value):
                nets = value if isinstance(value, list) else [value]
                if all(ipaddress.ip_network(n, strict=False).prefixlen > 0 for n in nets):
                    return True
    return False


def s3_considers_public(policy: dict[str, Any]) -> bool:
    """Whether S3 counts a bucket policy as granting public access (Block Public Access)."""
    for st in policy["Statement"]:
        if st["Effect"] != "Allow":
            continue  # denies never make a policy public
        if not (_fixed_principal(st.get("Principal")) or _fixed_condition(st.get("Condition", {}))):
            return True
    return False


def test_the_public_checker_follows_s3s_definition() -> None:
    allow: dict[str, Any] = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}

    def policy(**st: Any) -> dict[str, Any]:
        return {"Statement": [{**allow, **st}]}

    arn = "arn:aws:cloudfront::111122223333:distribution/E1"
    # The documented public examples.
    assert s3_considers_public(policy(Principal="*"))
    assert s3_considers_public(policy(Principal={"AWS": "*"}))
    assert s3_considers_public(policy(Principal="*", Condition={"StringLike": {"aws:SourceVpc": "vpc-*"}}))
    assert s3_considers_public(policy(Principal="*", Condition={"StringEquals": {"aws:SourceArn": "arn:aws:cloudfront::*"}}))
    assert s3_considers_public(policy(Principal={"Service": "*"}))
    # And the non-public ones: fixed principals, or fixed values of the listed keys.
    assert not s3_considers_public(policy(Principal={"AWS": "arn:aws:iam::111122223333:root"}))
    assert not s3_considers_public(policy(Principal={"Service": "cloudfront.amazonaws.com"}))
    assert not s3_considers_public(policy(Principal="*", Condition={"StringEquals": {"AWS:SourceArn": arn}}))
    # examples/selfhosted-full's S3Public policy is public, as it must be.
    world = by_name("selfhosted-full").world(staged=False)
    world.run(6)
    assert s3_considers_public(json.loads(_for_provider(world, "irsa-bucket-policy")["policy"]))


@pytest.mark.parametrize("scenario", [s for s in CLOUDFRONT_SCENARIOS if "managed" in s.name], ids=lambda s: s.name)
def test_the_managed_bucket_policy_is_not_public_and_names_one_distribution(scenario: Scenario) -> None:
    world = scenario.world(staged=False)
    world.run(20)
    policy = json.loads(_for_provider(world, "irsa-bucket-policy")["policy"])
    assert not s3_considers_public(policy)
    allows = [s for s in policy["Statement"] if s["Effect"] == "Allow"]
    (st,) = allows
    assert st["Principal"] == {"Service": "cloudfront.amazonaws.com"}
    assert st["Action"] == "s3:GetObject"
    # The SourceArn is the observed ARN of this XR's distribution, a fixed value.
    dist = _at_provider(world, "irsa-distribution")["arn"]
    assert st["Condition"] == {"StringEquals": {"AWS:SourceArn": dist}}
    docs = [_for_provider(world, n) for n in ("irsa-discovery", "irsa-jwks")]
    assert st["Resource"] == [f"arn:aws:s3:::{d['bucket']}/{d['key']}" for d in docs]
    (deny,) = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


@pytest.mark.parametrize("scenario", CLOUDFRONT_SCENARIOS, ids=lambda s: s.name)
def test_no_star_principal_in_any_allow_behind_cloudfront(scenario: Scenario) -> None:
    world = scenario.world(staged=False)
    world.run(20)
    assert world.xr_ready
    checked = 0
    for c in world.composed.values():
        fp = c.obj["spec"].get("forProvider", {})
        for key in ("policy", "assumeRolePolicy"):
            if key not in fp:
                continue
            doc = json.loads(fp[key])
            for st in doc["Statement"]:
                checked += 1
                if st["Effect"] == "Allow":
                    assert "*" not in json.dumps(st.get("Principal", {})), (c.name, st)
    assert checked >= 2  # the two roles' trust policies at least


# --- deletion order ------------------------------------------------------------------------


def _deleted_before(usages: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every (first, then) the Usages order, transitively: ``first`` goes before ``then``."""
    order = set(usages)
    while True:
        more = {(a, d) for a, b in order for c, d in order if b == c} - order
        if not more:
            return order
        order |= more


@pytest.mark.parametrize("name", [MANAGED, "cloudfront-managed-namespaced", SHARED])
def test_usages_order_the_deletion(name: str) -> None:
    world = by_name(name).world(staged=False)
    world.run(20)
    refs = {
        (c.obj["kind"], c.obj["metadata"]["name"]): n for n, c in world.composed.items()
    }
    usages = set()
    for c in world.composed.values():
        if c.obj["kind"] == "Usage":
            spec = c.obj["spec"]
            by = refs[(spec["by"]["kind"], spec["by"]["resourceRef"]["name"])]
            of = refs[(spec["of"]["kind"], spec["of"]["resourceRef"]["name"])]
            usages.add((by, of))
    order = _deleted_before(usages)
    for role in ("vpc-cni-role", "ebs-role"):
        assert (role, "irsa-oidc-provider") in order
    if name == SHARED:
        return
    must = [
        ("irsa-oidc-provider", "irsa-distribution"),
        ("irsa-discovery", "irsa-distribution"),
        ("irsa-jwks", "irsa-distribution"),
        ("irsa-distribution", "irsa-bucket"),
        ("irsa-distribution", "irsa-origin-access-control"),
        ("irsa-discovery", "irsa-bucket"),
        ("irsa-jwks", "irsa-bucket"),
        ("irsa-dns-record", "irsa-distribution"),
        ("vpc-cni-role", "irsa-distribution"),
    ]
    missing = [pair for pair in must if pair not in order]
    assert not missing, missing


# --- changing the hosting of an issuer in use --------------------------------------------------


def _ready_selfhosted() -> InMemoryCrossplane:
    world = by_name("selfhosted-full").world(staged=False)
    world.run(20)
    assert world.xr_ready and world.xr["status"]["oidcProviderARN"]
    return world


def test_moving_an_issuer_in_use_behind_cloudfront_is_refused_and_changes_nothing() -> None:
    world = _ready_selfhosted()
    composed = copy.deepcopy({n: c.obj for n, c in world.composed.items()})
    before = world.xr["status"]["issuerURL"]
    world.xr["spec"]["irsa"]["hosting"] = {
        "type": "CloudFront",
        "cloudFront": {"distribution": "Shared", "domain": "oidc.example.com", "bucketName": "acme-oidc"},
    }
    for rec in world.run(3):
        assert rec.fatal is not None
        assert rec.fatal.startswith(f"spec.irsa.hosting: would move the issuer from {before} to https://oidc.example.com/team-a/demo")
        assert "not supported" in rec.fatal
    assert world.deletions == []
    assert {n: c.obj for n, c in world.composed.items()} == composed
    # Putting it back is accepted again.
    del world.xr["spec"]["irsa"]["hosting"]
    assert all(rec.fatal is None for rec in world.run(2))
    assert world.deletions == []


def test_hosting_may_change_until_the_oidc_provider_exists() -> None:
    scenario = by_name(SHARED)
    world = scenario.world()
    world.hidden.add("Secret/api-sa")  # nothing is published without the key
    world.run(3)
    assert "irsa-oidc-provider" not in world.composed
    assert world.xr["status"]["issuerURL"] == "https://oidc.example.com/team-c/api"
    world.xr["spec"]["irsa"]["hosting"]["cloudFront"]["domain"] = "issuer.example.com"
    world.hidden.clear()
    for rec in world.run(20, before=staged_control_plane(3, 8)):
        assert rec.fatal is None, rec.fatal
    assert world.xr_ready
    assert world.xr["status"]["issuerURL"] == "https://issuer.example.com/team-c/api"
