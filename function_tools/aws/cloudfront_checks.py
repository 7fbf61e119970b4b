"""``aws preflight``: the issuer behind CloudFront (``spec.irsa.hosting: CloudFront``).

Shared: the platform team's bucket (BucketOwnerEnforced, all four Block Public Access
flags), the distribution serving the domain (alias, the bucket's REST endpoint with an
origin access control as its origin), and a bucket policy letting that distribution, and
only through CloudFront, read this cluster's two documents. Managed: the ACM
certificate (us-east-1, issued, covering the domain), the hosted zone, and no other
distribution holding the domain. With ``--live``: the issuer's discovery URL answers.
"""

from __future__ import annotations

import fnmatch
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import ClientError

from function.names import CLUSTER_TAG, Partition
from function.policies import CLOUDFRONT_SERVICE, shared_bucket_policy
from function_tools.aws.checks import Check, Status, absent, code, denied, tag_map

CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
ALL_FOUR = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
PRIVATE_BPA = ",".join(f"{k}=true" for k in ALL_FOUR)
SETUP = "docs/issuer.md: what the platform team sets up once"


def check_account_public_access_block_behind_cloudfront() -> Check:
    """Account-level Block Public Access does not matter behind CloudFront."""
    return Check(
        "account/s3-block-public-access",
        Status.PASS,
        "not in the way: the issuer is served by CloudFront from a private bucket, which Block "
        "Public Access allows (on or off)",
    )


# --- Shared: the platform team's bucket -----------------------------------------------


def create_bucket_command(bucket: str, region: str) -> str:
    """The command that creates ``bucket`` in ``region`` (us-east-1 takes no location)."""
    where = (
        ""
        if region == "us-east-1"
        else (f" --create-bucket-configuration LocationConstraint={region}")
    )
    return f"aws s3api create-bucket --bucket {bucket} --region {region}{where}"


def _head_region(s3: Any, bucket: str, region: str) -> tuple[str | None, Check | None]:
    """(the bucket's region, or a failed check)."""
    name = "shared/bucket"
    try:
        head = s3.head_bucket(Bucket=bucket)
    except ClientError as err:
        if absent(err, "NoSuchBucket"):
            msg = f"the Shared distribution's bucket {bucket} does not exist"
            fix = (
                f"create it: {create_bucket_command(bucket, region)}, then its ownership, "
                f"public access block and policy (below; {SETUP}); or correct bucketName"
            )
            return None, Check(name, Status.FAIL, msg, fix)
        if denied(err):
            msg = (
                f"bucket {bucket} exists but these credentials may not use it (HeadBucket: 403): "
                "it is another account's, or the provider lacks s3:ListBucket on it"
            )
            fix = "the bucket must be in the provider's account; check bucketName"
            return None, Check(name, Status.FAIL, msg, fix)
        raise
    headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return head.get("BucketRegion") or headers.get("x-amz-bucket-region"), None


def check_shared_bucket(s3: Any, bucket: str, region: str) -> list[Check]:
    """The platform team's bucket: exists in ``region``, ACLs off, all four BPA flags."""
    actual, failed = _head_region(s3, bucket, region)
    if failed is not None:
        return [failed]
    checks = []
    if actual and actual != region:
        msg = f"bucket {bucket} is in {actual}, not {region} where the function writes"
        fix = f"set spec.irsa.hosting.cloudFront.bucketRegion: {actual}"
        checks.append(Check("shared/bucket", Status.FAIL, msg, fix))
    else:
        checks.append(Check("shared/bucket", Status.PASS, f"bucket {bucket} exists in {region}"))
    checks += [_ownership(s3, bucket), private_access_block(s3, bucket, "shared/bucket")]
    return checks


def _ownership(s3: Any, bucket: str) -> Check:
    name = "shared/bucket-ownership"
    fix = (
        f"aws s3api put-bucket-ownership-controls --bucket {bucket} --ownership-controls "
        "Rules=[{ObjectOwnership=BucketOwnerEnforced}] (an origin access control needs ACLs off)"
    )
    try:
        rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    except ClientError as err:
        if absent(err, "NoSuchBucket"):
            return _no_bucket(name, bucket, fix)
        if code(err) != "OwnershipControlsNotFoundError":
            raise
        rules = []
    ownership = [r.get("ObjectOwnership") for r in rules]
    if ownership != ["BucketOwnerEnforced"]:
        got = ", ".join(str(o) for o in ownership) or "unset"
        msg = f"bucket {bucket} has object ownership {got}, not BucketOwnerEnforced (ACLs on)"
        return Check(name, Status.FAIL, msg, fix)
    return Check(name, Status.PASS, f"bucket {bucket}: BucketOwnerEnforced (ACLs off)")


def _no_bucket(name: str, bucket: str, fix: str) -> Check:
    """``name``'s finding when the bucket it is about does not exist."""
    msg = f"bucket {bucket} does not exist"
    return Check(name, Status.FAIL, msg, f"create the bucket (see shared/bucket), then: {fix}")


def private_access_block(s3: Any, bucket: str, prefix: str = "bucket") -> Check:
    """All four Block Public Access flags on the bucket behind CloudFront."""
    name = f"{prefix}/public-access-block"
    fix = (
        f"aws s3api put-public-access-block --bucket {bucket} "
        f"--public-access-block-configuration {PRIVATE_BPA}"
    )
    try:
        conf = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    except ClientError as err:
        if code(err) == "NoSuchBucket":
            return _no_bucket(name, bucket, fix)
        if code(err) != "NoSuchPublicAccessBlockConfiguration":
            raise
        conf = {}
    off = [k for k in ALL_FOUR if not conf.get(k)]
    if off:
        msg = (
            f"bucket {bucket} leaves {', '.join(off)} off: behind CloudFront it should never be "
            "public"
        )
        return Check(name, Status.FAIL, msg, fix)
    return Check(name, Status.PASS, f"bucket {bucket} blocks all public access")


# --- the distribution ------------------------------------------------------------------


@dataclass(frozen=True)
class Distribution:
    """What preflight reads of a CloudFront distribution."""

    id: str
    arn: str
    domain_name: str
    aliases: tuple[str, ...]
    origins: tuple[tuple[str, str], ...]  # (domain name, origin access control id)
    cache_policy: str
    viewer_protocol: str


def distributions_for(cloudfront: Any, domain: str) -> list[Distribution]:
    """The distributions whose aliases include ``domain``."""
    out = []
    for page in cloudfront.get_paginator("list_distributions").paginate():
        for item in page.get("DistributionList", {}).get("Items", []) or []:
            aliases = tuple(item.get("Aliases", {}).get("Items", []) or [])
            if domain not in aliases:
                continue
            origins = tuple(
                (o.get("DomainName", ""), o.get("OriginAccessControlId", "") or "")
                for o in item.get("Origins", {}).get("Items", []) or []
            )
            behaviour = item.get("DefaultCacheBehavior", {})
            out.append(
                Distribution(
                    item["Id"],
                    item["ARN"],
                    item.get("DomainName", ""),
                    aliases,
                    origins,
                    behaviour.get("CachePolicyId", "") or "",
                    behaviour.get("ViewerProtocolPolicy", ""),
                )
            )
    return out


def bucket_origins(bucket: str, region: str, partition: Partition) -> set[str]:
    """The S3 REST endpoints of ``bucket`` an origin may name (regional, or legacy global)."""
    return {
        f"{bucket}.s3.{region}.{partition.dns_suffix}",
        f"{bucket}.s3.{partition.dns_suffix}",
    }


def check_shared_distribution(
    cloudfront: Any, domain: str, origins: set[str]
) -> tuple[list[Check], Distribution | None]:
    """The distribution serving ``domain`` has the bucket (with an OAC) as its origin."""
    name = "shared/distribution"
    found = distributions_for(cloudfront, domain)
    if not found:
        msg = f"no CloudFront distribution in this account serves {domain} (an alias)"
        return [Check(name, Status.FAIL, msg, f"create it ({SETUP}), or fix domain")], None
    (dist,) = found  # CloudFront lets one distribution hold an alias
    served = [(d, oac) for d, oac in dist.origins if d in origins]
    if not served:
        msg = (
            f"distribution {dist.id} serves {domain} from {[d for d, _ in dist.origins]}, not from "
            f"the bucket's REST endpoint ({sorted(origins)[0]})"
        )
        fix = "make the bucket the distribution's origin (its REST endpoint, not the website one)"
        return [Check(name, Status.FAIL, msg, fix)], dist
    if not any(oac for _, oac in served):
        msg = f"distribution {dist.id}'s origin {served[0][0]} has no origin access control"
        fix = (
            "create an origin access control (s3, always, sigv4) and set it on the origin: "
            "without it CloudFront reads the private bucket anonymously and is refused"
        )
        return [Check(name, Status.FAIL, msg, fix)], dist
    checks = [
        Check(name, Status.PASS, f"distribution {dist.id} serves {domain} from the bucket, signed")
    ]
    if dist.cache_policy != CACHING_DISABLED:
        msg = (
            f"distribution {dist.id} caches with policy {dist.cache_policy or '(legacy TTLs)'}: a "
            "cached JWKS outlives a key rotation"
        )
        fix = f"use the managed CachingDisabled policy {CACHING_DISABLED} on its default behaviour"
        checks.append(Check(f"{name}/caching", Status.WARN, msg, fix))
    if dist.viewer_protocol == "allow-all":
        msg = f"distribution {dist.id} also serves plain HTTP (viewer protocol allow-all)"
        checks.append(Check(f"{name}/https", Status.WARN, msg, "set https-only"))
    return checks, dist


# --- the bucket policy -----------------------------------------------------------------


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _grants_cloudfront(st: dict[str, Any], key_arn: str) -> bool:
    if st.get("Effect") != "Allow":
        return False
    principal = st.get("Principal")
    services = _list(principal.get("Service", [])) if isinstance(principal, dict) else []
    actions = _list(st.get("Action", []))
    resources = _list(st.get("Resource", []))
    return (
        CLOUDFRONT_SERVICE in services
        and any(fnmatch.fnmatchcase("s3:GetObject", a) for a in actions)
        and any(fnmatch.fnmatchcase(key_arn, r) for r in resources)
    )


def _source_arns(st: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for operator, pairs in (st.get("Condition") or {}).items():
        if operator not in {"StringEquals", "ArnEquals", "ArnLike", "StringLike"}:
            continue
        for key, value in pairs.items():
            if key.lower() == "aws:sourcearn":
                out |= {str(v) for v in _list(value)}
    return out


def cloudfront_readers(policy: dict[str, Any], key_arns: list[str]) -> tuple[set[str], bool]:
    """(distribution ARNs the policy lets CloudFront read every key for, a grant without one)."""
    readers: set[str] | None = None
    unconditioned = False
    for key_arn in key_arns:
        found: set[str] = set()
        for st in _list(policy.get("Statement", [])):
            if _grants_cloudfront(st, key_arn):
                arns = _source_arns(st)
                unconditioned = unconditioned or not arns
                found |= arns
        readers = found if readers is None else readers & found
    return readers or set(), unconditioned


def check_shared_bucket_policy(
    s3: Any,
    bucket: str,
    keys: tuple[str, ...],
    dist: Distribution | None,
    partition: Partition,
) -> Check:
    """The bucket policy lets the distribution (``AWS:SourceArn``) read this cluster's keys."""
    name = "shared/bucket-policy"
    arn = dist.arn if dist else "arn:aws:cloudfront::<account>:distribution/<id>"
    want = json.dumps(shared_bucket_policy(bucket, arn, partition), separators=(",", ":"))
    fix = (
        f"put this bucket policy on {bucket} (function-cluster-plugin aws shared-bucket-policy "
        f"prints it): {want}"
    )
    try:
        policy = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    except ClientError as err:
        if code(err) == "NoSuchBucket":
            return _no_bucket(name, bucket, fix)
        if code(err) != "NoSuchBucketPolicy":
            raise
        msg = f"bucket {bucket} has no policy: CloudFront is refused"
        return Check(name, Status.FAIL, msg, fix)
    key_arns = [f"arn:{partition.name}:s3:::{bucket}/{k}" for k in keys]
    readers, unconditioned = cloudfront_readers(policy, key_arns)
    if unconditioned:
        msg = (
            f"bucket {bucket}'s policy lets CloudFront read without an AWS:SourceArn: any "
            "distribution, of any account, could serve these documents"
        )
        return Check(name, Status.FAIL, msg, fix)
    if dist is not None and dist.arn in readers:
        msg = f"bucket {bucket}'s policy lets distribution {dist.id} read {keys[0].split('/.')[0]}/"
        return Check(name, Status.PASS, msg)
    if dist is None and readers:
        msg = (
            f"bucket {bucket}'s policy lets {', '.join(sorted(readers))} read these documents; "
            "which distribution serves the domain is not known (see shared/distribution)"
        )
        return Check(name, Status.WARN, msg, fix)
    where = f" (it names {', '.join(sorted(readers))})" if readers else ""
    msg = f"bucket {bucket}'s policy does not let the distribution read {', '.join(keys)}{where}"
    return Check(name, Status.FAIL, msg, fix)


def object_exists(s3: Any, bucket: str, key: str) -> bool:
    """Whether ``key`` exists (False when it cannot be told)."""
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True


# --- Managed: the certificate, the zone, the domain --------------------------------------


def _covers(name: str, domain: str) -> bool:
    if name.startswith("*."):
        head, _, rest = domain.partition(".")
        return bool(head) and rest == name[2:]
    return name == domain


def check_certificate(acm: Any, certificate_arn: str, domain: str) -> Check:
    """The ACM certificate (us-east-1) is issued and covers the domain."""
    name = "managed/certificate"
    try:
        cert = acm.describe_certificate(CertificateArn=certificate_arn)["Certificate"]
    except ClientError as err:
        if code(err) == "ResourceNotFoundException":
            msg = f"certificate {certificate_arn} does not exist in us-east-1"
            fix = f"request or import a certificate for {domain} in us-east-1 and use its ARN"
            return Check(name, Status.FAIL, msg, fix)
        if denied(err):
            msg = "cannot read the certificate (acm:DescribeCertificate denied)"
            return Check(name, Status.WARN, msg, "run preflight with acm:DescribeCertificate")
        raise
    names = {cert.get("DomainName", ""), *cert.get("SubjectAlternativeNames", [])}
    if not any(_covers(n, domain) for n in names):
        msg = f"certificate {certificate_arn} is for {sorted(names)}, not {domain}"
        return Check(name, Status.FAIL, msg, f"use a certificate for {domain}")
    status = cert.get("Status", "")
    if status != "ISSUED":
        msg = f"certificate {certificate_arn} is {status}, not ISSUED: CloudFront refuses it"
        fix = "complete its validation (the DNS record ACM asks for)"
        return Check(name, Status.FAIL, msg, fix)
    return Check(name, Status.PASS, f"certificate for {domain} is issued (us-east-1)")


def check_hosted_zone(route53: Any, zone_id: str, domain: str) -> Check:
    """The hosted zone exists, is public, holds the domain, and no other record takes it."""
    name = "managed/hosted-zone"
    try:
        zone = route53.get_hosted_zone(Id=zone_id)["HostedZone"]
    except ClientError as err:
        if code(err) == "NoSuchHostedZone" or absent(err):
            msg = f"hosted zone {zone_id} (cloudFront.hostedZoneId) does not exist"
            fix = (
                f"give the id of the public zone that holds {domain} (aws route53 "
                "list-hosted-zones), or create it (aws route53 create-hosted-zone --name <zone> "
                "--caller-reference <any unique string>), or leave hostedZoneId out and point "
                f"{domain} at the distribution yourself"
            )
            return Check(name, Status.FAIL, msg, fix)
        if denied(err):
            msg = "cannot read the hosted zone (route53:GetHostedZone denied)"
            return Check(name, Status.WARN, msg, "run preflight with route53:GetHostedZone")
        raise
    zone_name = zone["Name"].rstrip(".")
    if not (domain == zone_name or domain.endswith(f".{zone_name}")):
        msg = f"hosted zone {zone_id} is {zone_name}, which does not hold {domain}"
        return Check(name, Status.FAIL, msg, f"use the zone of {domain}")
    if zone.get("Config", {}).get("PrivateZone"):
        msg = f"hosted zone {zone_id} is private: STS resolves the issuer on the internet"
        return Check(name, Status.FAIL, msg, f"use the public zone of {domain}")
    taken = _record_of(route53, zone_id, domain)
    if taken is not None and not taken.get("AliasTarget", {}).get("DNSName", "").rstrip(
        "."
    ).endswith(".cloudfront.net"):
        msg = (
            f"{domain} already has a {taken['Type']} record in {zone_name} that is no alias to "
            "CloudFront: creating the alias fails"
        )
        return Check(name, Status.FAIL, msg, "remove that record, or choose another domain")
    return Check(name, Status.PASS, f"hosted zone {zone_name} holds {domain}")


def _record_of(route53: Any, zone_id: str, domain: str) -> dict[str, Any] | None:
    got = route53.list_resource_record_sets(
        HostedZoneId=zone_id, StartRecordName=domain, MaxItems="4"
    )
    for record in got.get("ResourceRecordSets", []):
        if record["Name"].rstrip(".") == domain and record["Type"] in {"A", "AAAA", "CNAME"}:
            return dict(record)
    return None


def check_domain_free(cloudfront: Any, domain: str, owner_tag: str) -> Check:
    """No distribution but this XR's holds the domain (CloudFront: one per alias)."""
    name = "managed/domain"
    for dist in distributions_for(cloudfront, domain):
        tags = cloudfront.list_tags_for_resource(Resource=dist.arn).get("Tags", {})
        owner = tag_map(tags.get("Items")).get(CLUSTER_TAG)
        if owner != owner_tag:
            msg = (
                f"distribution {dist.id} already serves {domain}"
                f"{f' for {owner}' if owner else ''}: CloudFront refuses a second one "
                "(CNAMEAlreadyExists)"
            )
            return Check(name, Status.FAIL, msg, "choose another domain, or remove that alias")
        return Check(name, Status.PASS, f"distribution {dist.id} serves {domain} and is ours")
    return Check(name, Status.PASS, f"no distribution serves {domain} yet; the function creates it")


# --- live ----------------------------------------------------------------------------

Fetch = Callable[[str], tuple[int, bytes]]


def https_fetch(endpoint: str | None = None) -> Fetch:
    """GET a URL (to ``endpoint`` instead of the URL's host, keeping the Host header)."""

    def fetch(url: str) -> tuple[int, bytes]:
        parts = urlsplit(url)
        target = f"{endpoint.rstrip('/')}{parts.path}" if endpoint else url
        req = urllib.request.Request(target, headers={"Host": parts.netloc})  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310  # https, or the test's loopback
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()
        except (urllib.error.URLError, OSError) as err:
            return 0, str(getattr(err, "reason", err)).encode()

    return fetch


def check_live(fetch: Fetch, issuer_url: str) -> Check:
    """The discovery URL answers with the issuer's document, and its JWKS with keys."""
    name = "issuer/live"
    url = f"{issuer_url}/.well-known/openid-configuration"
    status, body = fetch(url)
    if status != 200:
        what = f"HTTP {status}" if status else body.decode(errors="replace")
        msg = f"{url} answers {what}: STS cannot fetch the issuer"
        fix = (
            "check the DNS record of the domain, the distribution (deployed, alias, origin) and "
            "the bucket policy; the documents appear once the function wrote them"
        )
        return Check(name, Status.FAIL, msg, fix)
    try:
        doc = json.loads(body)
    except ValueError:
        return Check(name, Status.FAIL, f"{url} answers 200 but not JSON")
    if not isinstance(doc, dict) or doc.get("issuer") != issuer_url:
        got = doc.get("issuer") if isinstance(doc, dict) else doc
        msg = f"{url} names issuer {got!r}, not {issuer_url}"
        return Check(name, Status.FAIL, msg, "the distribution serves another path or bucket")
    jwks_status, _ = fetch(str(doc.get("jwks_uri", "")))
    if jwks_status != 200:
        msg = f"{doc.get('jwks_uri')} answers HTTP {jwks_status}"
        return Check(name, Status.FAIL, msg, "check that keys.json is served next to the document")
    return Check(name, Status.PASS, f"{url} and its JWKS answer, naming {issuer_url}")
