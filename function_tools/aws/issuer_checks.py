"""``aws preflight``: the issuer's checks.

Account Block Public Access, the bucket, the two discovery documents, the IAM OIDC
provider and its quota; External: the given provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from botocore.exceptions import ClientError

from function.addons.irsa import issuer_mismatch
from function.addons.oidc_issuer import KeyProblemError, jwks_document
from function.cluster import KUBEADM_CONTROL_PLANE, control_plane_name
from function.names import CLUSTER_TAG, Partition
from function.policies import DISCOVERY_KEY, JWKS_KEY, STS_AUDIENCE
from function.spec_base import IRSAMode
from function_tools.aws.checks import (
    RENAME_FIX,
    Check,
    Status,
    absent,
    code,
    denied,
    http_status,
    missing,
    owner_phrase,
    plural,
    tag_map,
)
from function_tools.aws.target import Target

OIDC_PROVIDER_QUOTA = 100
OIDC_PROVIDER_WARN_AT = 90
OPEN_BPA = (
    "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=false,RestrictPublicBuckets=false"
)


class BucketState(Enum):
    """What HeadBucket (and the bucket's tag) said about the issuer bucket."""

    FREE = "free"
    OURS = "ours"
    TAKEN = "taken"
    UNKNOWN = "unknown"


def check_account_public_access_block(s3control: Any, account: str) -> Check:
    """Account-level S3 Block Public Access must not block the public bucket policy."""
    name = "account/s3-block-public-access"
    try:
        got = s3control.get_public_access_block(AccountId=account)
    except ClientError as err:
        if code(err) == "NoSuchPublicAccessBlockConfiguration":
            return Check(name, Status.PASS, "no account-level S3 Block Public Access configuration")
        if denied(err):
            return Check(
                name,
                Status.WARN,
                "cannot read the account-level S3 Block Public Access settings (AccessDenied)",
                "run preflight with s3:GetAccountPublicAccessBlock, or look in the S3 console",
            )
        raise
    conf = got["PublicAccessBlockConfiguration"]
    if not (conf.get("BlockPublicPolicy") or conf.get("RestrictPublicBuckets")):
        return Check(
            name,
            Status.PASS,
            "the account-level Block Public Access allows public bucket policies "
            "(BlockPublicPolicy and RestrictPublicBuckets are false)",
        )
    why = []
    if conf.get("BlockPublicPolicy"):
        why.append(
            "BlockPublicPolicy=true: S3 rejects the bucket policy that lets STS read the "
            "discovery documents"
        )
    if conf.get("RestrictPublicBuckets"):
        why.append("RestrictPublicBuckets=true: S3 ignores that public grant, STS cannot read them")
    return Check(
        name,
        Status.FAIL,
        f"account {account}: " + "; ".join(why) + " (no bucket setting overrides the account's)",
        "where Block Public Access must stay on, set spec.irsa.hosting.type: CloudFront (the "
        "documents in a private bucket behind CloudFront; docs/issuer.md). Otherwise "
        f"aws s3control put-public-access-block --account-id {account} "
        f"--public-access-block-configuration {OPEN_BPA} (public ACLs stay blocked; the bucket "
        "policy exposes only the two discovery documents), or use spec.irsa.mode: External "
        "with an issuer hosted elsewhere (e.g. an EKS cluster's).",
    )


# --- the issuer bucket and its documents ------------------------------------------------


def _head_bucket_failed(
    err: ClientError, bucket: str, *, must_exist: bool
) -> tuple[Check, BucketState]:
    name = "bucket"
    if absent(err, "NoSuchBucket"):
        if must_exist:
            fix = (
                "check the irsa-bucket managed resource (kubectl describe) and the provider's "
                "permissions (function-cluster-plugin aws provider-policy)"
            )
            return Check(
                name, Status.FAIL, f"bucket {bucket} does not exist", fix
            ), BucketState.FREE
        return Check(name, Status.PASS, f"bucket name {bucket} is free"), BucketState.FREE
    if denied(err):
        msg = (
            f"bucket {bucket} already exists and is owned by another AWS account "
            "(HeadBucket: 403 Forbidden); bucket names are global"
        )
        return Check(name, Status.FAIL, msg, RENAME_FIX), BucketState.TAKEN
    msg = f"HeadBucket {bucket} failed: {code(err) or http_status(err)}"
    return Check(name, Status.WARN, msg), BucketState.UNKNOWN


def check_bucket(
    s3: Any, bucket: str, region: str, owner_tag: str, *, must_exist: bool = False
) -> tuple[Check, BucketState]:
    """The derived bucket name is free, or already ours (tag ``clusterplugin.dev/cluster``)."""
    name = "bucket"
    try:
        head = s3.head_bucket(Bucket=bucket)
    except ClientError as err:
        return _head_bucket_failed(err, bucket, must_exist=must_exist)
    headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    actual_region = head.get("BucketRegion") or headers.get("x-amz-bucket-region")
    try:
        tags = tag_map(s3.get_bucket_tagging(Bucket=bucket).get("TagSet"))
    except ClientError as err:
        if code(err) != "NoSuchTagSet":
            raise
        tags = {}
    owner = tags.get(CLUSTER_TAG)
    if owner != owner_tag:
        msg = (
            f"bucket {bucket} exists in this account and {owner_phrase(owner)}, not {owner_tag}: "
            "Crossplane would take it over and replace its policy and documents"
        )
        fix = (
            f"{RENAME_FIX}; or, if it is this cluster's leftover, tag it {CLUSTER_TAG}={owner_tag}"
        )
        return Check(name, Status.FAIL, msg, fix), BucketState.TAKEN
    if actual_region and actual_region != region:
        msg = f"bucket {bucket} is ours but lives in {actual_region}; the issuer URL names {region}"
        fix = f"set spec.region to {actual_region}, or delete the bucket so it is made in {region}"
        return Check(name, Status.FAIL, msg, fix), BucketState.OURS
    msg = f"bucket {bucket} exists and is ours ({CLUSTER_TAG}={owner_tag})"
    return Check(name, Status.PASS, msg), BucketState.OURS


def check_bucket_public_access_block(s3: Any, bucket: str, *, strict: bool) -> Check:
    """The bucket's own Block Public Access must allow its (public) bucket policy."""
    name = "bucket/public-access-block"
    try:
        conf = s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"]
    except ClientError as err:
        if code(err) != "NoSuchPublicAccessBlockConfiguration":
            raise
        return Check(
            name,
            missing(strict=strict),
            f"bucket {bucket} has no public access block yet (the function sets one)",
            "check the irsa-bucket-public-access managed resource",
        )
    blocking = [k for k in ("BlockPublicPolicy", "RestrictPublicBuckets") if conf.get(k)]
    if blocking:
        return Check(
            name,
            Status.FAIL,
            f"bucket {bucket} sets {', '.join(f'{k}=true' for k in blocking)}: "
            "the discovery documents cannot be public",
            f"aws s3api put-public-access-block --bucket {bucket} "
            f"--public-access-block-configuration {OPEN_BPA} (what the function sets; "
            "something else changed it)",
        )
    return Check(name, Status.PASS, f"bucket {bucket} allows its public policy; ACLs stay blocked")


@dataclass(frozen=True)
class PrivateReader:
    """Reads a private bucket's documents with the caller's credentials (behind CloudFront)."""

    s3: Any

    def get_object(self, **kw: Any) -> Any:
        """GetObject, signed."""
        return self.s3.get_object(**kw)


@dataclass(frozen=True)
class _Fetched:
    doc: Any = None
    problem: Check | None = None
    absent: bool = False


def _fetch_public(s3_anonymous: Any, bucket: str, key: str, name: str) -> _Fetched:
    """Anonymous GetObject of ``key``, parsed as JSON (a private bucket: a signed one)."""
    private = isinstance(s3_anonymous, PrivateReader)
    try:
        body = s3_anonymous.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as err:
        if absent(err, "NoSuchKey"):
            return _Fetched(absent=True)
        if denied(err) and private:
            msg = f"s3://{bucket}/{key} cannot be read with these credentials (GetObject denied)"
            fix = "run preflight with s3:GetObject on the two documents"
            return _Fetched(problem=Check(name, Status.WARN, msg, fix))
        if denied(err):
            msg = (
                f"s3://{bucket}/{key} is not publicly readable (anonymous GetObject: "
                "AccessDenied); STS cannot validate service-account tokens"
            )
            fix = (
                "check the bucket policy (irsa-bucket-policy allows s3:GetObject to * on the two "
                "discovery keys) and Block Public Access on the bucket and the account "
                "(BlockPublicPolicy and RestrictPublicBuckets must be false)"
            )
            return _Fetched(problem=Check(name, Status.FAIL, msg, fix))
        msg = f"GetObject s3://{bucket}/{key}: {code(err)}"
        return _Fetched(problem=Check(name, Status.FAIL, msg))
    try:
        return _Fetched(doc=json.loads(body))
    except ValueError:
        return _Fetched(problem=Check(name, Status.FAIL, f"s3://{bucket}/{key} is not JSON"))


def check_discovery(
    s3_anonymous: Any,
    bucket: str,
    issuer_url: str,
    *,
    strict: bool,
    key: str = DISCOVERY_KEY,
) -> Check:
    """The OpenID discovery document is public and names the issuer and its JWKS.

    Behind CloudFront the bucket is private: the reader is then a ``PrivateReader``
    and ``key`` carries the issuer's path.
    """
    name = "issuer/discovery"
    fetched = _fetch_public(s3_anonymous, bucket, key, name)
    if fetched.absent:
        return Check(
            name,
            missing(strict=strict),
            f"s3://{bucket}/{key} does not exist yet (the function publishes it once "
            "the bucket is ready and the <cluster>-sa Secret exists)",
            "check the irsa-discovery managed resource and the ClusterPlugin's status.plugins",
        )
    if fetched.problem is not None:
        return fetched.problem
    doc = fetched.doc if isinstance(fetched.doc, dict) else {}
    expected = {"issuer": issuer_url, "jwks_uri": f"{issuer_url}/keys.json"}
    found = [
        f"{key} is {doc.get(key)!r}, expected {want!r}"
        for key, want in expected.items()
        if doc.get(key) != want
    ]
    if found:
        return Check(
            name,
            Status.FAIL,
            f"s3://{bucket}/{key}: " + "; ".join(found),
            "the function rewrites the document on its next reconcile; a lasting difference "
            "means another writer owns the object",
        )
    how = "is in place" if isinstance(s3_anonymous, PrivateReader) else "is public"
    return Check(name, Status.PASS, f"the discovery document {how} and names {issuer_url}")


def jwks_problem(actual: Any, expected_json: str, source: str) -> str | None:
    """How the published JWKS differs from the one built from the cluster's key, or None."""
    want = json.loads(expected_json)["keys"][0]
    keys = actual.get("keys") if isinstance(actual, dict) else None
    if not isinstance(keys, list) or not keys:
        return "keys.json holds no keys"
    kids = [str(k.get("kid")) for k in keys if isinstance(k, dict)]
    if want in keys:
        if len(keys) == 1:
            return None
        others = [k for k in kids if k != want["kid"]]
        return (
            f"keys.json holds {len(keys)} keys: besides kid {want['kid']} from {source} it "
            f"also trusts {plural(others, 'kid')}"
        )
    if want["kid"] in kids:
        return f"keys.json has kid {want['kid']} but its key material differs from {source}"
    return (
        f"keys.json publishes {plural(kids, 'kid')}, expected kid {want['kid']} (from {source}): "
        "it was built from a different key"
    )


def check_jwks(
    s3_anonymous: Any,
    bucket: str,
    public_pem: bytes | None,
    *,
    key_source: str,
    key_problem: str | None,
    strict: bool,
    key: str = JWKS_KEY,
) -> Check:
    """The JWKS is public and holds exactly the cluster's service-account public key."""
    name = "issuer/jwks"
    fetched = _fetch_public(s3_anonymous, bucket, key, name)
    if fetched.absent:
        return Check(
            name,
            missing(strict=strict),
            f"s3://{bucket}/{key} does not exist yet (the function publishes it once the "
            "<cluster>-sa Secret exists)",
            "check the irsa-jwks managed resource and the ClusterPlugin's status.plugins",
        )
    if fetched.problem is not None:
        return fetched.problem
    how = "is in place" if isinstance(s3_anonymous, PrivateReader) else "is public"
    if public_pem is None:
        why = f" ({key_problem})" if key_problem else ""
        return Check(
            name,
            Status.WARN,
            f"keys.json {how}, but was not compared with the cluster's key{why}",
            "pass --sa-public-key FILE, or the <cluster>-sa Secret with --required",
        )
    try:
        expected = jwks_document(public_pem)
    except KeyProblemError as err:
        return Check(name, Status.FAIL, f"{key_source}: {err}", "give the cluster's public key")
    diff = jwks_problem(fetched.doc, expected, key_source)
    if diff:
        return Check(
            name,
            Status.FAIL,
            diff,
            f"the function rebuilds keys.json from {key_source or 'the <cluster>-sa Secret'} on "
            "its next reconcile; if this persists, another writer owns the object, or that key "
            "is not the one the kube-apiserver signs with. Until they match, STS rejects tokens.",
        )
    return Check(name, Status.PASS, f"keys.json {how} and matches the key from {key_source}")


# --- the IAM OIDC provider -----------------------------------------------------------------


def _provider_arns(iam: Any) -> list[str]:
    providers = iam.list_open_id_connect_providers().get("OpenIDConnectProviderList", [])
    return [p["Arn"] for p in providers]


def _add_client_id(provider_arn: str) -> str:
    return (
        "aws iam add-client-id-to-open-id-connect-provider --open-id-connect-provider-arn "
        f"{provider_arn} --client-id {STS_AUDIENCE}"
    )


def check_oidc_provider(
    iam: Any, provider_arn: str, owner_tag: str, *, after: bool, strict: bool
) -> list[Check]:
    """The IAM OIDC provider for the issuer is absent or ours; and the account's quota."""
    name = "oidc-provider"
    arns = _provider_arns(iam)
    exists = provider_arn in arns
    if not exists and after:
        check = Check(
            name,
            missing(strict=strict),
            f"no IAM OIDC provider {provider_arn} yet (the function creates it once both "
            "discovery documents are public)",
            "check the irsa-oidc-provider managed resource and the ClusterPlugin's status.plugins",
        )
    elif not exists:
        check = Check(
            name, Status.PASS, f"no IAM OIDC provider yet; the function creates {provider_arn}"
        )
    else:
        got = iam.get_open_id_connect_provider(OpenIDConnectProviderArn=provider_arn)
        owner = tag_map(got.get("Tags")).get(CLUSTER_TAG)
        clients = got.get("ClientIDList", [])
        if owner != owner_tag:
            check = Check(
                name,
                Status.FAIL,
                f"IAM OIDC provider {provider_arn} already exists and {owner_phrase(owner)}, "
                f"not {owner_tag}: creating it fails with EntityAlreadyExists",
                "if it is a leftover, delete it (aws iam delete-open-id-connect-provider "
                f"--open-id-connect-provider-arn {provider_arn}); otherwise {RENAME_FIX}",
            )
        elif STS_AUDIENCE not in clients:
            msg = f"IAM OIDC provider {provider_arn} has client ids {clients}, not {STS_AUDIENCE}"
            check = Check(name, Status.FAIL, msg, _add_client_id(provider_arn))
        else:
            check = Check(name, Status.PASS, f"IAM OIDC provider {provider_arn} exists and is ours")
    return [check, _quota(len(arns), creating=not exists)]


def _quota(count: int, *, creating: bool) -> Check:
    name = "oidc-provider/quota"
    fix = (
        "delete unused IAM OIDC providers (aws iam list-open-id-connect-providers), or ask for "
        "more in Service Quotas (IAM: OpenId connect providers per account)"
    )
    if creating and count >= OIDC_PROVIDER_QUOTA:
        msg = (
            f"the account has {count} IAM OIDC providers; the default quota is "
            f"{OIDC_PROVIDER_QUOTA}, so creating another fails with LimitExceeded"
        )
        return Check(name, Status.FAIL, msg, fix)
    if count >= OIDC_PROVIDER_WARN_AT:
        msg = f"the account has {count} of {OIDC_PROVIDER_QUOTA} IAM OIDC providers"
        return Check(name, Status.WARN, msg, fix)
    return Check(name, Status.PASS, f"{count} of {OIDC_PROVIDER_QUOTA} IAM OIDC providers in use")


def check_external_oidc_provider(
    iam: Any, provider_arn: str, issuer_host_path: str, account: str
) -> Check:
    """External IRSA: the given provider exists in this account, for the given issuer."""
    name = "oidc-provider"
    parts = provider_arn.split(":")
    if len(parts) > 4 and parts[4] != account:
        return Check(
            name,
            Status.FAIL,
            f"spec.irsa.oidcProviderARN is in account {parts[4]}, the credentials in {account}",
            "roles and their OIDC provider must be in one account: create an IAM OIDC provider "
            "for the issuer in this account and use its ARN",
        )
    try:
        got = iam.get_open_id_connect_provider(OpenIDConnectProviderArn=provider_arn)
    except ClientError as err:
        if code(err) != "NoSuchEntity":
            raise
        return Check(
            name,
            Status.FAIL,
            f"spec.irsa.oidcProviderARN {provider_arn} does not exist",
            f"aws iam create-open-id-connect-provider --url https://{issuer_host_path} "
            f"--client-id-list {STS_AUDIENCE}",
        )
    url = str(got.get("Url", "")).removeprefix("https://")
    if url != issuer_host_path:
        msg = f"{provider_arn} is for {url}; spec.irsa.issuerURL is https://{issuer_host_path}"
        return Check(name, Status.FAIL, msg, "set issuerURL and oidcProviderARN to one issuer")
    if STS_AUDIENCE not in got.get("ClientIDList", []):
        msg = f"IAM OIDC provider {provider_arn} does not list the client id {STS_AUDIENCE}"
        return Check(name, Status.FAIL, msg, _add_client_id(provider_arn))
    return Check(name, Status.PASS, f"IAM OIDC provider {provider_arn} exists for the issuer")


def provider_arn_for(partition: Partition, account: str, issuer_host_path: str) -> str:
    """The ARN of the IAM OIDC provider for a self-hosted issuer."""
    return f"arn:{partition.name}:iam::{account}:oidc-provider/{issuer_host_path}"


API_SERVER_ISSUER = "issuer/api-server"


def check_api_server_issuer(target: Target) -> Check | None:
    """The KubeadmControlPlane's --service-account-issuer is the issuer the roles trust.

    No AWS call: the control plane given with --required against the issuer the function
    trusts. None where no issuer is trusted or EKS signs with its own.
    """
    spec, facts = target.spec, target.facts
    if spec.irsa.mode not in (IRSAMode.SELF_HOSTED, IRSAMode.EXTERNAL) or facts.eks:
        return None
    if facts.control_plane_kind != KUBEADM_CONTROL_PLANE or not facts.control_plane_found:
        msg = "not checked: the KubeadmControlPlane was not given"
        fix = (
            "pass it with --required (or the cluster template's, generated): the API server must "
            f"sign with {target.issuer_url}"
        )
        return Check(API_SERVER_ISSUER, Status.WARN, msg, fix)
    where = control_plane_name(facts)
    found = issuer_mismatch(facts.service_account_issuer, target.issuer_url, where, spec.irsa.mode)
    if found is not None:
        return Check(API_SERVER_ISSUER, Status.FAIL, found[0], found[1])
    msg = f"KubeadmControlPlane {where} signs with {target.issuer_url}, the issuer the roles trust"
    return Check(API_SERVER_ISSUER, Status.PASS, msg)
