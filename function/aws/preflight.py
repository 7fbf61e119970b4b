"""Account preflight: will what the function composes work in this AWS account?

Each check is a small function taking boto3 clients and plain values, and
returning :class:`Check` results (name, pass/warn/fail, what was found, how to
fix it). :func:`run` strings them together for one :class:`~function.aws.inputs.Target`.

Phases: ``before`` checks that nothing stands in the way of creating the
resources (account-level S3 Block Public Access, a bucket name taken by someone
else, an IAM OIDC provider or role that already exists and is not ours, the OIDC
provider quota, missing security-group ports). ``after`` also checks what the
function created: the public discovery documents, the JWKS against the
cluster's key, each role's trust policy and attached policies. ``auto`` is
``after`` when the issuer bucket exists, reporting resources not created yet as
warnings rather than failures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any
from urllib.parse import unquote

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from function.addons import csi, external_dns, lbc, security_groups, vpc_cni
from function.addons.security_groups import PortNeed
from function.aws.inputs import CLUSTER_TAG, EXTERNAL_RESOURCE_GC, Target
from function.names import IAM_PATH, Partition
from function.oidc import KeyProblemError, jwks_document
from function.policies import (
    DISCOVERY_KEY,
    JWKS_KEY,
    MANAGED_POLICIES,
    STS_AUDIENCE,
    managed_policy_arn,
    trust_policy,
)
from function.spec import ClusterPluginSpec, ExternalDNSSpec, IRSAMode, SecurityGroupMode

OIDC_PROVIDER_QUOTA = 100
OIDC_PROVIDER_WARN_AT = 90
WEB_IDENTITY = "sts:AssumeRoleWithWebIdentity"
OPEN_BPA = (
    "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=false,RestrictPublicBuckets=false"
)


class Status(StrEnum):
    """The outcome of one check."""

    PASS = "pass"  # noqa: S105  # not a password
    WARN = "warn"
    FAIL = "fail"


class Phase(StrEnum):
    """Which resources are expected to exist already."""

    BEFORE = "before"
    AFTER = "after"
    AUTO = "auto"


@dataclass(frozen=True)
class Check:
    """One check: its name, outcome, what was found, and how to fix it."""

    name: str
    status: Status
    message: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        """The check as a JSON-ready dict."""
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Clients:
    """The boto3 clients preflight uses (see ``function.aws.clients.make_clients``)."""

    sts: Any
    s3: Any
    s3control: Any
    # Unsigned S3 client: reads the discovery documents the way STS does, anonymously.
    s3_anonymous: Any
    iam: Any
    ec2: Any
    route53: Any = None


@dataclass
class Report:
    """Every check of one preflight run, and what it was run against."""

    target: Target
    phase: Phase
    account: str | None = None
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Whether any check failed."""
        return any(c.status is Status.FAIL for c in self.checks)

    def summary(self) -> dict[str, int]:
        """How many checks passed, warned and failed."""
        return {s.value: sum(1 for c in self.checks if c.status is s) for s in Status}

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        t = self.target
        irsa = t.spec.irsa.mode
        return {
            "cluster": t.owner_tag,
            "region": t.region,
            "account": self.account,
            "phase": self.phase.value,
            "irsaMode": irsa.value,
            "bucket": t.names.bucket if irsa is IRSAMode.SELF_HOSTED else None,
            "issuerURL": t.issuer_url if irsa is not IRSAMode.DISABLED else None,
            "checks": [c.to_dict() for c in self.checks],
            "summary": self.summary(),
        }


class BucketState(Enum):
    """What HeadBucket (and the bucket's tag) said about the issuer bucket."""

    FREE = "free"
    OURS = "ours"
    TAKEN = "taken"
    UNKNOWN = "unknown"


def _code(err: ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


def _http_status(err: ClientError) -> int:
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _denied(err: ClientError) -> bool:
    codes = {"AccessDenied", "AccessDeniedException", "403", "Forbidden"}
    return _code(err) in codes or _http_status(err) == 403


def _absent(err: ClientError, *codes: str) -> bool:
    return _code(err) in {"404", "NotFound", *codes} or _http_status(err) == 404


def _missing(*, strict: bool) -> Status:
    """Something the function should have created is absent: fail only in phase ``after``."""
    return Status.FAIL if strict else Status.WARN


def _tags(tag_list: Iterable[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tag_list or () if "Key" in t}


def _owner_phrase(owner: str | None) -> str:
    return f"belongs to {owner} (tag {CLUSTER_TAG})" if owner else f"has no {CLUSTER_TAG} tag"


def _plural(items: list[str], word: str) -> str:
    return f"{word}{'s' if len(items) > 1 else ''} {', '.join(items)}"


RENAME_FIX = (
    "choose other names: set spec.irsa.bucketName, or a namePrefix in the step input "
    "(the bucket is <namePrefix>irsa-<namespace>-<cluster>-<hash>, roles are "
    "<namePrefix><namespace>-<cluster>-<addon>-<hash>)"
)


# --- credentials and account ---------------------------------------------------------


def check_credentials(sts: Any) -> tuple[Check, str | None]:
    """Whose credentials these are (sts:GetCallerIdentity needs no permission)."""
    try:
        ident = sts.get_caller_identity()
    except (ClientError, BotoCoreError) as err:
        fix = "configure AWS credentials (--profile, AWS_PROFILE, or AWS_ACCESS_KEY_ID and friends)"
        if isinstance(err, EndpointConnectionError):
            fix = "check the network path to AWS (or --endpoint-url)"
        return Check("credentials", Status.FAIL, f"sts:GetCallerIdentity failed: {err}", fix), None
    account = str(ident["Account"])
    msg = f"account {account} as {ident.get('Arn', '?')}"
    return Check("credentials", Status.PASS, msg), account


def check_account_public_access_block(s3control: Any, account: str) -> Check:
    """Account-level S3 Block Public Access must not block the public bucket policy."""
    name = "account/s3-block-public-access"
    try:
        got = s3control.get_public_access_block(AccountId=account)
    except ClientError as err:
        if _code(err) == "NoSuchPublicAccessBlockConfiguration":
            return Check(name, Status.PASS, "no account-level S3 Block Public Access configuration")
        if _denied(err):
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
        f"aws s3control put-public-access-block --account-id {account} "
        f"--public-access-block-configuration {OPEN_BPA} (public ACLs stay blocked; the bucket "
        "policy exposes only the two discovery documents). Where that is not allowed, use "
        "spec.irsa.mode: External with an issuer hosted elsewhere (e.g. an EKS cluster's).",
    )


# --- the issuer bucket and its documents ------------------------------------------------


def _head_bucket_failed(
    err: ClientError, bucket: str, *, must_exist: bool
) -> tuple[Check, BucketState]:
    name = "bucket"
    if _absent(err, "NoSuchBucket"):
        if must_exist:
            fix = (
                "check the irsa-bucket managed resource (kubectl describe) and the provider's "
                "permissions (function-cluster-plugin aws provider-policy)"
            )
            return Check(
                name, Status.FAIL, f"bucket {bucket} does not exist", fix
            ), BucketState.FREE
        return Check(name, Status.PASS, f"bucket name {bucket} is free"), BucketState.FREE
    if _denied(err):
        msg = (
            f"bucket {bucket} already exists and is owned by another AWS account "
            "(HeadBucket: 403 Forbidden); bucket names are global"
        )
        return Check(name, Status.FAIL, msg, RENAME_FIX), BucketState.TAKEN
    msg = f"HeadBucket {bucket} failed: {_code(err) or _http_status(err)}"
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
        tags = _tags(s3.get_bucket_tagging(Bucket=bucket).get("TagSet"))
    except ClientError as err:
        if _code(err) != "NoSuchTagSet":
            raise
        tags = {}
    owner = tags.get(CLUSTER_TAG)
    if owner != owner_tag:
        msg = (
            f"bucket {bucket} exists in this account and {_owner_phrase(owner)}, not {owner_tag}: "
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
        if _code(err) != "NoSuchPublicAccessBlockConfiguration":
            raise
        return Check(
            name,
            _missing(strict=strict),
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
class _Fetched:
    doc: Any = None
    problem: Check | None = None
    absent: bool = False


def _fetch_public(s3_anonymous: Any, bucket: str, key: str, name: str) -> _Fetched:
    """Anonymous GetObject of ``key``, parsed as JSON."""
    try:
        body = s3_anonymous.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as err:
        if _absent(err, "NoSuchKey"):
            return _Fetched(absent=True)
        if _denied(err):
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
        msg = f"anonymous GetObject s3://{bucket}/{key}: {_code(err)}"
        return _Fetched(problem=Check(name, Status.FAIL, msg))
    try:
        return _Fetched(doc=json.loads(body))
    except ValueError:
        return _Fetched(problem=Check(name, Status.FAIL, f"s3://{bucket}/{key} is not JSON"))


def check_discovery(s3_anonymous: Any, bucket: str, issuer_url: str, *, strict: bool) -> Check:
    """The OpenID discovery document is public and names the issuer and its JWKS."""
    name = "issuer/discovery"
    fetched = _fetch_public(s3_anonymous, bucket, DISCOVERY_KEY, name)
    if fetched.absent:
        return Check(
            name,
            _missing(strict=strict),
            f"s3://{bucket}/{DISCOVERY_KEY} does not exist yet (the function publishes it once "
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
            f"s3://{bucket}/{DISCOVERY_KEY}: " + "; ".join(found),
            "the function rewrites the document on its next reconcile; a lasting difference "
            "means another writer owns the object",
        )
    return Check(name, Status.PASS, f"the discovery document is public and names {issuer_url}")


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
            f"also trusts {_plural(others, 'kid')}"
        )
    if want["kid"] in kids:
        return f"keys.json has kid {want['kid']} but its key material differs from {source}"
    return (
        f"keys.json publishes {_plural(kids, 'kid')}, expected kid {want['kid']} (from {source}): "
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
) -> Check:
    """The JWKS is public and holds exactly the cluster's service-account public key."""
    name = "issuer/jwks"
    fetched = _fetch_public(s3_anonymous, bucket, JWKS_KEY, name)
    if fetched.absent:
        return Check(
            name,
            _missing(strict=strict),
            f"s3://{bucket}/{JWKS_KEY} does not exist yet (the function publishes it once the "
            "<cluster>-sa Secret exists)",
            "check the irsa-jwks managed resource and the ClusterPlugin's status.plugins",
        )
    if fetched.problem is not None:
        return fetched.problem
    if public_pem is None:
        why = f" ({key_problem})" if key_problem else ""
        return Check(
            name,
            Status.WARN,
            f"keys.json is public, but was not compared with the cluster's key{why}",
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
    return Check(name, Status.PASS, f"keys.json is public and matches the key from {key_source}")


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
            _missing(strict=strict),
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
        owner = _tags(got.get("Tags")).get(CLUSTER_TAG)
        clients = got.get("ClientIDList", [])
        if owner != owner_tag:
            check = Check(
                name,
                Status.FAIL,
                f"IAM OIDC provider {provider_arn} already exists and {_owner_phrase(owner)}, "
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
        if _code(err) != "NoSuchEntity":
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


# --- add-on roles --------------------------------------------------------------------------


@dataclass(frozen=True)
class AddonRole:
    """An add-on's IRSA role: the Names key and the service account it trusts."""

    addon: str
    namespace: str
    service_account: str


def addon_roles(spec: ClusterPluginSpec) -> list[AddonRole]:
    """The roles the function composes for ``spec`` (none when IRSA is Disabled)."""
    if spec.irsa.mode is IRSAMode.DISABLED:
        return []
    out = []
    if spec.networking.amazon_vpc is not None:
        out.append(AddonRole(vpc_cni.PLUGIN, vpc_cni.NAMESPACE, vpc_cni.SERVICE_ACCOUNT))
    if spec.storage.ebs is not None:
        out.append(AddonRole("ebs-csi", csi.NAMESPACE, csi.EBS_SA))
    if spec.storage.efs is not None:
        out.append(AddonRole("efs-csi", csi.NAMESPACE, csi.EFS_SA))
    if spec.ingress.aws_load_balancer_controller is not None:
        out.append(AddonRole(lbc.IAM_NAME, lbc.NAMESPACE, lbc.SERVICE_ACCOUNT))
    if spec.dns.external_dns is not None:
        out.append(
            AddonRole(external_dns.IAM_NAME, external_dns.NAMESPACE, external_dns.SERVICE_ACCOUNT)
        )
    return out


def expected_policy_arn(target: Target, account: str, addon: str) -> str:
    """The one policy an add-on's role should have attached."""
    if addon in MANAGED_POLICIES:
        return managed_policy_arn(addon, target.partition)
    name = target.names.policy(addon)
    return f"arn:{target.partition.name}:iam::{account}:policy{IAM_PATH}{name}"


def _as_list(v: Any) -> list[Any]:
    if v is None:
        return []
    return v if isinstance(v, list) else [v]


def _document(doc: Any) -> dict[str, Any]:
    if isinstance(doc, str):
        doc = json.loads(unquote(doc))
    return doc if isinstance(doc, dict) else {}


def _claim_problems(conditions: dict[str, Any], claim: str, want_key: str, want: str) -> list[str]:
    """What is wrong with the condition(s) on one token claim (``sub`` or ``aud``)."""
    hits = [
        (op, key, _as_list(val))
        for op, kv in conditions.items()
        if isinstance(kv, dict)
        for key, val in kv.items()
        if key.rsplit(":", 1)[-1] == claim
    ]
    if not hits:
        return [f"trust policy has no {claim} condition, expected {want_key} = {want}"]
    problems = []
    for op, key, vals in hits:
        issuer = key.rsplit(":", 1)[0]
        if key != want_key:
            expected_issuer = want_key.rsplit(":", 1)[0]
            problems.append(
                f"trust policy {claim} is keyed on {issuer}, expected {expected_issuer}"
            )
        if op != "StringEquals":
            problems.append(f"trust policy {claim} is matched with {op}, expected StringEquals")
        if vals != [want]:
            problems.append(f"trust policy {claim} is {', '.join(map(str, vals))}, expected {want}")
    return problems


def trust_policy_problems(
    document: Any,
    *,
    provider_arn: str,
    issuer_host_path: str,
    namespace: str,
    service_account: str,
) -> list[str]:
    """How a role's trust policy differs, in meaning, from the one the function writes."""
    statements = [s for s in _as_list(_document(document).get("Statement")) if isinstance(s, dict)]
    web = [
        s
        for s in statements
        if s.get("Effect") == "Allow" and WEB_IDENTITY in _as_list(s.get("Action"))
    ]
    if not web:
        return [f"trust policy has no Allow statement for {WEB_IDENTITY}"]
    problems: list[str] = []
    if len(statements) != 1:
        problems.append(f"trust policy has {len(statements)} statements, expected exactly 1")
    st = web[0]
    extra_actions = [str(a) for a in _as_list(st.get("Action")) if a != WEB_IDENTITY]
    if extra_actions:
        problems.append(f"trust policy also allows {', '.join(extra_actions)}")
    principal = st.get("Principal")
    federated = _as_list(principal.get("Federated")) if isinstance(principal, dict) else []
    if federated != [provider_arn]:
        got = ", ".join(map(str, federated)) or repr(principal)
        problems.append(f"trust policy Federated principal is {got}, expected {provider_arn}")
    conditions = st.get("Condition")
    conditions = conditions if isinstance(conditions, dict) else {}
    sub = f"system:serviceaccount:{namespace}:{service_account}"
    problems += _claim_problems(conditions, "sub", f"{issuer_host_path}:sub", sub)
    problems += _claim_problems(conditions, "aud", f"{issuer_host_path}:aud", STS_AUDIENCE)
    return problems


def _attached(iam: Any, role: str) -> tuple[list[str], list[str]]:
    arns: list[str] = []
    for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=role):
        arns += [p["PolicyArn"] for p in page.get("AttachedPolicies", [])]
    inline: list[str] = []
    for page in iam.get_paginator("list_role_policies").paginate(RoleName=role):
        inline += page.get("PolicyNames", [])
    return arns, inline


@dataclass(frozen=True)
class RoleExpectation:
    """What one add-on role should look like."""

    role_name: str
    addon: AddonRole
    owner_tag: str
    provider_arn: str
    issuer_host_path: str
    policy_arn: str


def check_role(iam: Any, want: RoleExpectation, *, after: bool, strict: bool) -> list[Check]:
    """An add-on role is absent or ours; when present, its trust policy and policies."""
    name = f"role/{want.addon.addon}"
    role_name = want.role_name
    try:
        role = iam.get_role(RoleName=role_name)["Role"]
    except ClientError as err:
        if _code(err) != "NoSuchEntity":
            raise
        if not after:
            return [
                Check(name, Status.PASS, f"role name {role_name} is free; the function creates it")
            ]
        msg = f"role {role_name} does not exist yet (made once the OIDC provider is ready)"
        fix = f"check the {want.addon.addon} role managed resource and status.plugins"
        return [Check(name, _missing(strict=strict), msg, fix)]
    owner = _tags(role.get("Tags")).get(CLUSTER_TAG)
    if owner != want.owner_tag:
        msg = (
            f"role {role_name} already exists and {_owner_phrase(owner)}, not {want.owner_tag}: "
            "Crossplane would take it over and replace its trust policy"
        )
        return [Check(name, Status.FAIL, msg, RENAME_FIX)]
    problems = []
    if role.get("Path") != IAM_PATH:
        problems.append(
            f"role path is {role.get('Path')}, expected {IAM_PATH} (the provider policy's scope)"
        )
    sa = want.addon
    problems += trust_policy_problems(
        role.get("AssumeRolePolicyDocument"),
        provider_arn=want.provider_arn,
        issuer_host_path=want.issuer_host_path,
        namespace=sa.namespace,
        service_account=sa.service_account,
    )
    if problems:
        doc = trust_policy(
            want.provider_arn, want.issuer_host_path, sa.namespace, sa.service_account
        )
        trust = Check(
            name,
            Status.FAIL,
            f"role {role_name}: " + "; ".join(problems),
            f"aws iam update-assume-role-policy --role-name {role_name} --policy-document '{doc}' "
            "(Crossplane reverts manual drift, so a lasting difference means another "
            "controller or person manages this role)",
        )
    else:
        trust = Check(
            name,
            Status.PASS,
            f"role {role_name} trusts only system:serviceaccount:{sa.namespace}:"
            f"{sa.service_account}, audience {STS_AUDIENCE}, via {want.provider_arn}",
        )
    return [trust, _check_role_policies(iam, want, strict=strict)]


def _check_role_policies(iam: Any, want: RoleExpectation, *, strict: bool) -> Check:
    name = f"role/{want.addon.addon}/policies"
    role = want.role_name
    attached, inline = _attached(iam, role)
    extra = [a for a in attached if a != want.policy_arn]
    problems = []
    fixes = []
    if extra:
        problems.append(f"unexpected attached {_plural(extra, 'policy')}")
        fixes += [f"aws iam detach-role-policy --role-name {role} --policy-arn {a}" for a in extra]
    if inline:
        problems.append(f"unexpected inline {_plural(inline, 'policy')}")
        fixes += [
            f"aws iam delete-role-policy --role-name {role} --policy-name {p}" for p in inline
        ]
    missing = want.policy_arn not in attached
    if missing:
        problems.append(f"{want.policy_arn} is not attached")
        fixes.append(f"check the {want.addon.addon} role's attachment managed resource")
    if not problems:
        return Check(name, Status.PASS, f"role {role} has exactly {want.policy_arn} attached")
    status = Status.FAIL if (extra or inline) else _missing(strict=strict)
    return Check(name, status, f"role {role}: " + "; ".join(problems), "; ".join(fixes))


# --- external-dns hosted zones ---------------------------------------------------------------


def _zone_kind(private: bool) -> str:  # noqa: FBT001  # Route 53's Config.PrivateZone
    return "private" if private else "public"


def check_hosted_zone(
    route53: Any, zone_id: str, spec: ExternalDNSSpec, account: str
) -> tuple[Check, str | None]:
    """One listed hosted zone exists in this account, and is of the type spec.zoneType says.

    Returns the check and, when the zone was read, its name.
    """
    name = f"dns/zone/{zone_id}"
    try:
        zone = route53.get_hosted_zone(Id=zone_id)["HostedZone"]
    except ClientError as err:
        if _code(err) in {"NoSuchHostedZone", "InvalidInput"} or _absent(err):
            return Check(
                name,
                Status.FAIL,
                f"hosted zone {zone_id} (spec.dns.externalDNS.hostedZoneIDs) does not exist in "
                f"account {account}: the role would grant changes to a zone that is not there, "
                "and external-dns would manage no record in it",
                "list the zones' ids with aws route53 list-hosted-zones --query "
                "'HostedZones[].[Id,Name,Config.PrivateZone]' and give each without /hostedzone/; "
                "a zone of another account cannot be used (the role lives in this one)",
            ), None
        if _denied(err):
            return Check(
                name,
                Status.WARN,
                f"cannot read hosted zone {zone_id} (AccessDenied)",
                "run preflight with route53:GetHostedZone",
            ), None
        raise
    zone_name = str(zone.get("Name", ""))
    kind = _zone_kind(bool(zone.get("Config", {}).get("PrivateZone")))
    want = spec.zone_type.value if spec.zone_type is not None else None
    if want is not None and kind != want:
        return Check(
            name,
            Status.FAIL,
            f"hosted zone {zone_id} ({zone_name}) is {kind}, but spec.dns.externalDNS.zoneType is "
            f"{want}: external-dns (--aws-zone-type={want}) would ignore it",
            f"list the {want} zone of that name instead (a public and a private zone may share "
            f"it: aws route53 list-hosted-zones-by-name --dns-name {zone_name}), or change "
            "zoneType",
        ), zone_name
    return Check(name, Status.PASS, f"{kind} hosted zone {zone_name} ({zone_id}) exists"), zone_name


def _related(domain: str, zone: str) -> bool:
    """Whether a domain filter and a zone name overlap (one is the other or below it)."""
    return domain == zone or zone.endswith(f".{domain}") or domain.endswith(f".{zone}")


def check_domain_filters(spec: ExternalDNSSpec, zone_names: list[str]) -> Check:
    """Each domain filter lies in (or above) one of the listed zones."""
    name = "dns/domain-filters"
    zones = [z.rstrip(".").lower() for z in zone_names]
    stray = [
        f for f in spec.domain_filters if not any(_related(f.removeprefix("."), z) for z in zones)
    ]
    if stray:
        return Check(
            name,
            Status.WARN,
            f"{_plural(stray, 'domain filter')} lie in none of the listed zones "
            f"({', '.join(zones)}): external-dns manages no record for "
            f"{'them' if len(stray) > 1 else 'it'}",
            "add the zone that holds them to spec.dns.externalDNS.hostedZoneIDs, or correct "
            "spec.dns.externalDNS.domainFilters",
        )
    if not spec.domain_filters:
        return Check(name, Status.PASS, "no domain filters: every name in the listed zones")
    return Check(name, Status.PASS, "every domain filter lies in a listed zone")


def check_hosted_zones(route53: Any, spec: ExternalDNSSpec, account: str) -> list[Check]:
    """external-dns's zones: each exists and is public or private as expected; the filters fit."""
    checks: list[Check] = []
    names: list[str] = []
    for zone_id in spec.hosted_zone_ids:
        check, zone_name = check_hosted_zone(route53, zone_id, spec, account)
        checks.append(check)
        if zone_name is not None:
            names.append(zone_name)
    # Only when every zone was read: a missing one is already a failure of its own.
    if len(names) == len(spec.hosted_zone_ids):
        checks.append(check_domain_filters(spec, names))
    return checks


# --- the cluster's deletion ------------------------------------------------------------------


def check_external_resource_gc(target: Target) -> Check | None:
    """CAPA's external resource GC is on when a controller creates load balancers (DESIGN 9).

    When the cluster is deleted, the load balancers of ``LoadBalancer`` Services and
    Ingresses (made by the load balancer controller and the CCM) are not CAPA's: unless
    its garbage collection removes them they stay, cost money and block the VPC's deletion.
    """
    spec = target.spec
    makers = [
        what
        for what, wanted in (
            ("the AWS Load Balancer Controller", spec.ingress.aws_load_balancer_controller),
            ("the cloud controller manager", spec.cloud_provider.aws),
        )
        if wanted is not None
    ]
    if not makers:
        return None
    name = "deletion/external-resource-gc"
    kind = "AWSManagedControlPlane" if target.eks else "AWSCluster"
    if target.external_resource_gc is None:
        msg = f"no {kind} given: cannot tell whether CAPA's external resource GC is on"
        return Check(name, Status.WARN, msg, f"pass the cluster's {kind} with --required")
    if target.external_resource_gc.lower() == "false":
        return Check(
            name,
            Status.WARN,
            f"{kind} {target.namespace}/{target.awscluster_name} turns CAPA's external resource "
            f'GC off ({EXTERNAL_RESOURCE_GC}: "false"): when the cluster is deleted, the load '
            f"balancers {' and '.join(makers)} made stay behind, cost money and block the "
            "deletion of the VPC",
            f"remove the {EXTERNAL_RESOURCE_GC} annotation (CAPA's default is on), or delete "
            "every LoadBalancer Service and Ingress before deleting the cluster",
        )
    return Check(
        name,
        Status.PASS,
        "CAPA's external resource GC removes the load balancers "
        f"{' and '.join(makers)} made when the cluster is deleted",
    )


# --- security groups -------------------------------------------------------------------------


def _covers(rule: dict[str, Any], need: PortNeed, source_id: str) -> bool:
    """Whether one EC2 ingress rule lets ``need`` in from the group ``source_id``."""
    protocol = str(rule.get("IpProtocol", ""))
    if protocol not in {"-1", need.protocol}:
        return False
    if need.protocol in {"tcp", "udp"} and protocol != "-1":
        lo, hi = rule.get("FromPort", -1), rule.get("ToPort", -1)
        if not (lo <= need.from_port and hi >= need.to_port):
            return False
    ref = rule.get("ReferencedGroupInfo") or {}
    return ref.get("GroupId") == source_id or rule.get("CidrIpv4") == "0.0.0.0/0"


def _rules_by_group(ec2: Any, group_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {g: [] for g in group_ids}
    pages = ec2.get_paginator("describe_security_group_rules").paginate(
        Filters=[{"Name": "group-id", "Values": group_ids}]
    )
    for page in pages:
        for rule in page.get("SecurityGroupRules", []):
            if not rule.get("IsEgress") and rule.get("GroupId") in out:
                out[rule["GroupId"]].append(rule)
    return out


def _composes_onto(target: Target, role: str) -> bool:
    mode = target.spec.security_groups.manage
    if target.eks or mode is SecurityGroupMode.NEVER:
        return False
    return mode is SecurityGroupMode.ALWAYS or role in target.sg_overrides


def _json(v: Any) -> str:
    return json.dumps(v, separators=(", ", ": "))


def _capa_fix(target: Target, wanted: tuple[PortNeed, ...], need: PortNeed) -> str:
    where = f"AWSCluster {target.namespace}/{target.awscluster_name}"
    own = (
        "; or list your own groups in spec.network.securityGroupOverrides (the function then "
        "composes the rules)"
    )
    if need.capa_list == "cniIngressRules":
        # Setting cniIngressRules replaces CAPA's default Calico rules: give the whole list.
        entries = [n.capa_entry() for n in wanted if n.capa_list == "cniIngressRules"]
        return (
            f"set {where} spec.network.cni.cniIngressRules to {_json(entries)} (CAPA revokes "
            f"rules it did not create on its own groups){own}"
        )
    return f"add {_json(need.capa_entry())} to {where} spec.network.additionalNodeIngressRules{own}"


@dataclass(frozen=True)
class _SGContext:
    target: Target
    wanted: tuple[PortNeed, ...]
    groups: dict[str, str]
    rules: dict[str, list[dict[str, Any]]]
    after: bool
    strict: bool


def _check_need(ctx: _SGContext, need: PortNeed) -> Check:
    name = f"security-groups/{need.purpose}"
    groups = ctx.groups
    unknown = sorted({r for r in (*need.targets, *need.sources) if r not in groups})
    if unknown:
        msg = f"the AWSCluster reports no {' or '.join(unknown)} security group yet"
        return Check(name, Status.WARN, msg, "re-run once CAPA has made the security groups")
    gaps = [
        (t, s)
        for t in need.targets
        for s in need.sources
        if not any(_covers(r, need, groups[s]) for r in ctx.rules.get(groups[t], []))
    ]
    if not gaps:
        where = ", ".join(groups[t] for t in need.targets)
        return Check(name, Status.PASS, f"{need.description}: open on {where}")
    where = ", ".join(f"{groups[t]} ({t}) from {groups[s]} ({s})" for t, s in gaps)
    if all(_composes_onto(ctx.target, t) for t, _ in gaps):
        if not ctx.after:
            return Check(name, Status.PASS, f"{need.description}: the function composes {where}")
        msg = f"{need.description}: missing on {where}; the function composes these rules"
        fix = f"check the sg-{need.purpose}-* managed resources"
        return Check(name, _missing(strict=ctx.strict), msg, fix)
    if need.protocol in {"tcp", "udp"}:
        what = f"{need.description} ({need.protocol} {need.from_port}-{need.to_port})"
    else:
        what = f"{need.description} (protocol {need.protocol})"
    msg = f"{what} is not open on {where}"
    return Check(name, Status.FAIL, msg, _capa_fix(ctx.target, ctx.wanted, need))


def check_security_groups(ec2: Any, target: Target, *, after: bool, strict: bool) -> list[Check]:
    """Each port an add-on needs is open between the cluster's security groups."""
    wanted = security_groups.needs(target.spec)
    if not wanted:
        return []
    name = "security-groups"
    if target.eks:
        return [
            Check(name, Status.PASS, "EKS manages the cluster security group: nothing to check")
        ]
    if not target.infrastructure_found:
        purposes = ", ".join(n.purpose for n in wanted)
        msg = f"no AWSCluster given: cannot check the ports for {purposes}"
        fix = "pass the cluster's AWSCluster (kubectl get awscluster -o yaml) with --required"
        return [Check(name, Status.WARN, msg, fix)]
    groups = {**target.sg_managed, **target.sg_overrides}
    roles = (security_groups.CONTROL_PLANE, security_groups.NODE)
    ids = sorted({groups[r] for r in roles if r in groups})
    rules = _rules_by_group(ec2, ids) if ids else {}
    ctx = _SGContext(target, wanted, groups, rules, after, strict)
    return [_check_need(ctx, need) for need in wanted]


# --- the whole run -------------------------------------------------------------------------


def provider_arn_for(partition: Partition, account: str, issuer_host_path: str) -> str:
    """The ARN of the IAM OIDC provider for a self-hosted issuer."""
    return f"arn:{partition.name}:iam::{account}:oidc-provider/{issuer_host_path}"


def _self_hosted(report: Report, clients: Clients, account: str, phase: Phase) -> bool:
    """The issuer checks; returns whether the run is in phase ``after``."""
    target = report.target
    strict = phase is Phase.AFTER
    bucket = target.names.bucket
    report.checks.append(check_account_public_access_block(clients.s3control, account))
    bucket_check, state = check_bucket(
        clients.s3, bucket, target.region, target.owner_tag, must_exist=strict
    )
    report.checks.append(bucket_check)
    after = strict or (phase is Phase.AUTO and state is BucketState.OURS)
    if after and state is BucketState.OURS:
        anon = clients.s3_anonymous
        report.checks += [
            check_bucket_public_access_block(clients.s3, bucket, strict=strict),
            check_discovery(anon, bucket, target.issuer_url, strict=strict),
            check_jwks(
                anon,
                bucket,
                target.public_pem,
                key_source=target.key_source,
                key_problem=target.key_problem,
                strict=strict,
            ),
        ]
    provider = provider_arn_for(target.partition, account, target.issuer_host_path)
    report.checks += check_oidc_provider(
        clients.iam, provider, target.owner_tag, after=after, strict=strict
    )
    return after


def run(target: Target, clients: Clients, phase: Phase = Phase.AUTO) -> Report:
    """Every check that applies to ``target``, in the order the function creates things."""
    report = Report(target, Phase.AFTER if phase is Phase.AFTER else Phase.BEFORE)
    cred, account = check_credentials(clients.sts)
    report.checks.append(cred)
    if account is None:
        return report
    report.account = account
    spec = target.spec
    mode = spec.irsa.mode
    strict = phase is Phase.AFTER
    after = strict
    provider_arn = ""
    if not spec.wants_aws or mode is IRSAMode.DISABLED:
        why = "IRSA is Disabled" if mode is IRSAMode.DISABLED else "no add-on needs an IAM role"
        msg = f"{why}: no bucket, OIDC provider or roles are composed"
        report.checks.append(Check("irsa", Status.PASS, msg))
    elif mode is IRSAMode.SELF_HOSTED:
        after = _self_hosted(report, clients, account, phase)
        provider_arn = provider_arn_for(target.partition, account, target.issuer_host_path)
    else:
        provider_arn = spec.irsa.oidc_provider_arn
        report.checks.append(
            check_external_oidc_provider(
                clients.iam, provider_arn, target.issuer_host_path, account
            )
        )
    report.phase = Phase.AFTER if after else Phase.BEFORE
    if provider_arn:
        for addon in addon_roles(spec):
            want = RoleExpectation(
                role_name=target.names.role(addon.addon),
                addon=addon,
                owner_tag=target.owner_tag,
                provider_arn=provider_arn,
                issuer_host_path=target.issuer_host_path,
                policy_arn=expected_policy_arn(target, account, addon.addon),
            )
            report.checks += check_role(clients.iam, want, after=after, strict=strict)
    if spec.dns.external_dns is not None:
        report.checks += check_hosted_zones(clients.route53, spec.dns.external_dns, account)
    report.checks += check_security_groups(clients.ec2, target, after=after, strict=strict)
    gc = check_external_resource_gc(target)
    if gc is not None:
        report.checks.append(gc)
    return report
