"""A moto server for the ``aws`` command tests, and the AWS world the function composes.

The server runs in a child process on 127.0.0.1, on a port the OS picks (it
binds port 0 and prints the port it got); tests talk to it with real boto3
clients, dummy credentials and ``endpoint_url``. Nothing here reaches AWS.

moto 5.2 gets a few things wrong that these tests depend on. The child process
patches exactly these, and nothing else (see ``_patch_moto``); the parent is
untouched:

1. An unsigned ``GET /<bucket>/.well-known/openid-configuration`` is routed to
   moto's Cognito emulation (its JWKS discovery URL has the same shape), so an
   anonymous read of our discovery document never reaches S3. Cognito pool ids
   always contain ``_`` and bucket names never do: such paths go to S3.
2. Bucket policies: moto ignores condition operators it does not know
   (``Bool``), so the bucket policy's ``Deny`` of plain-HTTP access (condition
   ``aws:SecureTransport = false``) denies everything. Every real client (STS,
   the provider) uses TLS, so that statement is left out of moto's evaluation.
3. IAM enforcement (only when a test turns it on), S3 action names: moto
   authorises PutBucketOwnershipControls and PutBucketPublicAccessBlock as
   ``s3:CreateBucket``, their Get (and GetBucketEncryption, GetObjectLock-,
   GetBucketReplication, GetBucketRequestPayment) as ``s3:ListBucket``, and
   HeadBucket as the non-existent ``s3:HeadBucket``. They get their real IAM
   action names, so the provider policy is checked against the real names.
4. IAM enforcement, resources: moto passes ``"*"`` as the resource of every IAM
   call that does not name an existing role, and of every EC2 call, so any
   resource-scoped statement denies them. The resource ARN AWS evaluates is
   supplied for the calls the function's resources need: CreateRole,
   CreatePolicy and the OIDC-provider calls (ARN from the request), policy
   calls by PolicyArn, and the EC2 rule and tag calls (security-group or
   security-group-rule ARN; for CreateTags/DeleteTags, the first resource).
5. Speed, not behaviour: instead of all ~1,300 AWS-managed policies (re-loaded
   into every IAM backend after each reset, about a second), only those the
   tests attach are loaded: the function's three add-on policies, at the ARNs
   ``function.policies`` names, and AdministratorAccess. Whether those ARNs
   exist in AWS is checked against moto's full copy of AWS's list in
   ``test_managed_policy_arns_exist_in_aws``.
6. Route 53 hosted zone ids: moto draws 22 upper-case letters and digits, so most do
   not start with ``Z`` as every AWS id does (and as ``spec.dns.externalDNS.hostedZoneIDs``
   must). They get AWS's shape: ``Z`` and 20 more.
7. IAM enforcement, CloudFront and Route 53: as in 4, moto passes ``"*"`` as the
   resource; the ARN AWS evaluates is supplied (a distribution or origin access
   control by its id, ``distribution/*`` for CreateDistribution, the ARN a tagging
   call names; a hosted zone or change by its id). CreateDistributionWithTags is no IAM
   action: AWS authorises it as cloudfront:CreateDistribution and cloudfront:TagResource,
   and so does the test server.
8. CloudFront origins: moto forgets an origin's ``OriginAccessControlId``; the test server
   keeps it, as CloudFront does.
9. IAM enforcement, signatures of CloudFront and Route 53 calls without a body (GET,
   DELETE): moto recomputes the signature over the parameters it parsed from the URI as
   if they were the body, and refuses every such call (SignatureDoesNotMatch). The body
   that was signed, empty, is used.

moto still does NOT evaluate Condition blocks of identity policies (no request
context is passed), so ``iam:PolicyARN`` on AttachRolePolicy is only checked
statically (tests/test_aws_provider_policy.py).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import yaml

from function.addons.oidc_issuer import discovery_document, jwks_document
from function.graph import CONTROL_PLANE, NODE, PortNeed
from function.names import CLOUDFRONT_HOSTED_ZONE_ID, CLUSTER_TAG, IAM_PATH
from function.policies import (
    DISCOVERY_KEY,
    JWKS_KEY,
    STS_AUDIENCE,
    bucket_policy,
    cloudfront_bucket_policy,
    external_dns_policy,
    lbc_policy,
    managed_policy_arn,
    trust_policy,
)
from function_tools.aws.checks import Clients
from function_tools.aws.issuer_checks import provider_arn_for
from function_tools.aws.role_checks import AddonRole, addon_roles, expected_policy_arn
from function_tools.aws.target import Target, build_target
from function_tools.input_files import load_documents

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
EXAMPLE = EXAMPLES / "selfhosted-full"
ACCOUNT = "123456789012"  # moto's default account
ADMIN = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
TLS_ONLY = {"Bool": {"aws:SecureTransport": "false"}}
MANAGED_ENV = "CLUSTERPLUGIN_TEST_MANAGED_POLICIES"
ADMINISTRATOR_ACCESS = "arn:aws:iam::aws:policy/AdministratorAccess"
# What EKS nodes' roles hold (CAPA's node group role): eks-auth:AssumeRoleForPodIdentity for
# the Pod Identity agent; and a node policy without it.
EKS_WORKER_NODE_POLICY = "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy"


# --- the server (child process) ------------------------------------------------------------


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _patch_dispatch() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    original = DomainDispatcherApplication.get_service_from_unsigned_path

    def unsigned(path_info: str) -> tuple[str | None, str | None]:
        first = path_info.strip("/").split("/")[0]
        if "_" not in first:  # a bucket, not a Cognito user pool id
            return None, None
        return original(path_info)

    DomainDispatcherApplication.get_service_from_unsigned_path = staticmethod(unsigned)


def _patch_bucket_policy() -> None:
    from moto.iam.access_control import IAMPolicy, PermissionResult
    from moto.s3.models import FakeBucket

    def get_permission(self: Any, action: str, resource: str) -> Any:
        if self.policy is None:
            return PermissionResult.NEUTRAL
        doc = json.loads(self.policy.decode())
        doc["Statement"] = [s for s in _as_list(doc["Statement"]) if s.get("Condition") != TLS_ONLY]
        return IAMPolicy(json.dumps(doc)).is_action_permitted(action, resource)

    FakeBucket.get_permission = get_permission


def _patch_s3_action_names() -> None:
    from moto.s3 import responses as s3r

    bucket = s3r.ACTION_MAP["BUCKET"]
    bucket["HEAD"]["DEFAULT"] = "ListBucket"
    bucket["GET"].update(
        {
            "ownershipControls": "GetBucketOwnershipControls",
            "publicAccessBlock": "GetBucketPublicAccessBlock",
            "encryption": "GetEncryptionConfiguration",
            "object-lock": "GetBucketObjectLockConfiguration",
            "replication": "GetReplicationConfiguration",
            "requestPayment": "GetBucketRequestPayment",
        }
    )
    for method in ("PUT", "DELETE"):
        bucket[method].update(
            {
                "ownershipControls": "PutBucketOwnershipControls",
                "publicAccessBlock": "PutBucketPublicAccessBlock",
            }
        )


def _patch_resources() -> None:
    from moto.ec2.responses import EC2Response
    from moto.iam.responses import IamResponse

    iam_original = IamResponse._determine_resource

    def iam_resource(self: Any) -> str:
        action = self._get_action()
        iam = f"arn:{self.partition}:iam::{self.current_account}"
        param = self._get_param
        if action == "CreateRole":
            return f"{iam}:role{param('Path') or '/'}{param('RoleName')}"
        if action == "CreatePolicy":
            return f"{iam}:policy{param('Path') or '/'}{param('PolicyName')}"
        if action == "CreateOpenIDConnectProvider":
            return f"{iam}:oidc-provider/{param('Url').removeprefix('https://')}"
        if param("OpenIDConnectProviderArn"):
            return param("OpenIDConnectProviderArn")
        if param("PolicyArn") and not param("RoleName"):
            return param("PolicyArn")
        return iam_original(self)

    rule_actions = {
        "AuthorizeSecurityGroupIngress",
        "RevokeSecurityGroupIngress",
        "ModifySecurityGroupRules",
    }

    def ec2_resource(self: Any) -> str:
        action = self._get_action()
        arn = f"arn:{self.partition}:ec2:{self.region}:{self.current_account}"
        if action in rule_actions and self._get_param("GroupId"):
            return f"{arn}:security-group/{self._get_param('GroupId')}"
        if action in {"CreateTags", "DeleteTags"}:
            ids = self._get_param("Resources") or [""]
            rid = ids[0]
            if rid.startswith("sgr-"):
                return f"{arn}:security-group-rule/{rid}"
            if rid.startswith("sg-"):
                return f"{arn}:security-group/{rid}"
        return "*"

    IamResponse._determine_resource = iam_resource
    EC2Response._determine_resource = ec2_resource


def _patch_cloudfront_and_route53() -> None:
    from moto.cloudfront import models
    from moto.cloudfront.responses import CloudFrontResponse
    from moto.iam.access_control import IAMRequest
    from moto.route53.responses import Route53

    def cloudfront_resource(self: Any) -> str:
        action = self._get_action()  # also matches the URI: fills uri_match
        arn = f"arn:{self.partition}:cloudfront::{self.current_account}"
        ident = (getattr(self, "uri_match", None) or {}).get("Id")
        if action in {"TagResource", "UntagResource", "ListTagsForResource"}:
            return str(self.querystring.get("Resource", ["*"])[0])
        if action.startswith("CreateDistribution"):
            return f"{arn}:distribution/*"
        if "Distribution" in action and ident:
            return f"{arn}:distribution/{ident}"
        if "OriginAccessControl" in action and ident:
            return f"{arn}:origin-access-control/{ident}"
        return "*"

    authorize = CloudFrontResponse._authenticate_and_authorize_normal_action

    def cloudfront_authorize(self: Any, resource: str = "*") -> None:
        if self._get_action() != "CreateDistributionWithTags":
            authorize(self, resource)
            return
        for action in ("CreateDistribution", "TagResource"):
            self._get_action = lambda action=action: action  # the name IAM checks
            try:
                authorize(self, resource)
            finally:
                del self._get_action

    def route53_resource(self: Any) -> str:
        action = self._get_action()
        ident = str((getattr(self, "uri_match", None) or {}).get("Id", ""))
        ident = ident.removeprefix("/hostedzone/").removeprefix("/change/")
        if action == "GetChange" and ident:
            return f"arn:{self.partition}:route53:::change/{ident}"
        if ident and action != "ListHostedZones":
            return f"arn:{self.partition}:route53:::hostedzone/{ident}"
        return "*"

    origin_init = models.Origin.__init__

    def origin(self: Any, config: dict[str, Any]) -> None:
        origin_init(self, config)
        self.origin_access_control_id = config.get("OriginAccessControlId", "")

    models.Origin.__init__ = origin
    create_request = IAMRequest._create_aws_request

    def signed_request(self: Any) -> Any:
        if self._service in {"cloudfront", "route53"} and not self._body:
            self._data = {}
        return create_request(self)

    IAMRequest._create_aws_request = signed_request
    CloudFrontResponse._determine_resource = cloudfront_resource
    CloudFrontResponse._authenticate_and_authorize_normal_action = cloudfront_authorize
    Route53._determine_resource = route53_resource


def _patch_managed_policies() -> None:
    """Load only the AWS-managed policies the tests attach, at the paths the function names them.

    moto would load all ~1,300 of them into every IAM backend (about a second
    after every reset). Whether those paths are AWS's real ones is checked
    against moto's copy of AWS's list in ``test_managed_policy_arns_exist_in_aws``.
    """
    from moto.iam.aws_managed_policies import aws_managed_policies_data
    from moto.iam.models import AWSManagedPolicy, IAMBackend

    arns = [a for a in os.environ.get(MANAGED_ENV, "").split(",") if a]
    data = json.loads(aws_managed_policies_data)

    def init(self: Any) -> list[Any]:
        out = []
        for arn in arns:
            path, _, name = arn.split(":policy", 1)[1].rpartition("/")
            entry = dict(data[name], Path=f"{path}/")
            out.append(AWSManagedPolicy.from_data(name, self.account_id, self.region_name, entry))
        return out

    IAMBackend._init_aws_policies = init


def _patch_zone_ids() -> None:
    import random
    import string

    from moto.route53 import models

    def zone_id(*_: Any, **__: Any) -> str:
        return "Z" + "".join(random.choices(string.ascii_uppercase + string.digits, k=20))

    models.create_route53_zone_id = zone_id


def _patch_moto() -> None:
    _patch_zone_ids()
    _patch_dispatch()
    _patch_bucket_policy()
    _patch_s3_action_names()
    _patch_resources()
    _patch_cloudfront_and_route53()
    _patch_managed_policies()


def serve() -> None:
    """Child process: run moto on 127.0.0.1:<free port>, print the port, stop at stdin EOF."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _patch_moto()
    server = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
    server.start()
    print(server.get_host_and_port()[1], flush=True)
    sys.stdin.read()  # the parent closes stdin (or dies): stop
    server.stop()


def function_managed_policies() -> list[str]:
    """The AWS-managed policy ARNs the function attaches (partition aws)."""
    from function.names import PARTITIONS
    from function.registry import MANAGED_POLICIES

    return [managed_policy_arn(a, PARTITIONS["aws"]) for a in MANAGED_POLICIES]


def missing_managed_policies() -> list[str]:
    """ARNs the function attaches that are not in moto's copy of AWS's managed-policy list."""
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    data = json.loads(aws_managed_policies_data)
    known = {f"arn:aws:iam::aws:policy{d['Path']}{name}" for name, d in data.items()}
    return [a for a in function_managed_policies() if a not in known]


class MotoServer:
    """A moto server child process, bound to 127.0.0.1 on a port the OS chose."""

    def __init__(self, extra_env: dict[str, str] | None = None) -> None:
        """``extra_env``: more of moto's settings (e.g. its request recorder's file)."""
        env = {
            **os.environ,
            "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
            MANAGED_ENV: ",".join(
                [*function_managed_policies(), ADMINISTRATOR_ACCESS, EKS_WORKER_NODE_POLICY]
            ),
            "PYTHONPATH": str(REPO),
            **(extra_env or {}),
        }
        env.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)  # enforcement is switched on per test
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from tests.aws_helpers import serve; serve()"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.isdigit():
            self.stop()
            msg = f"moto server did not start (got {line!r})"
            raise RuntimeError(msg)
        self.endpoint = f"http://127.0.0.1:{line}"

    def _post(self, path: str, data: bytes = b"") -> dict[str, Any]:
        req = urllib.request.Request(  # noqa: S310  # http://127.0.0.1 only
            f"{self.endpoint}{path}",
            data=data,
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310  # http://127.0.0.1 only
            return json.loads(resp.read() or b"{}")

    def reset(self) -> None:
        """Forget every resource and turn IAM enforcement off."""
        self._post("/moto-api/reset-auth", b"inf")
        self._post("/moto-api/reset")

    def enforce_iam(self) -> None:
        """From now on every request is authorised against its caller's IAM policies."""
        self._post("/moto-api/reset-auth", b"0")

    def stop(self) -> None:
        """Stop the child process."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# --- clients --------------------------------------------------------------------------------


_SESSION: list[Any] = []


def make_clients(
    endpoint: str, creds: dict[str, str] | None = None, region: str = "us-east-1"
) -> Clients:
    """Preflight's clients (through the real factory) against moto, sharing one boto3 Session."""
    import boto3

    from function_tools.aws.clients import make_clients as factory

    if not _SESSION:
        # Service models (EC2's is large) are parsed once per Session.
        _SESSION.append(boto3.Session(region_name=region))
    creds = creds or ADMIN
    return factory(
        region=region,
        endpoint_url=endpoint,
        access_key_id=creds["aws_access_key_id"],
        secret_access_key=creds["aws_secret_access_key"],
        session=_SESSION[0],
    )


# --- the example and the world the function composes for it --------------------------------------


def example_xr() -> dict[str, Any]:
    return load_documents([EXAMPLE / "xr.yaml"])[0]


def example_required(sg_ids: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The example's required objects, with the AWSCluster's group ids replaced by moto's."""
    docs = load_documents([EXAMPLE / "required"])
    if sg_ids:
        for d in docs:
            if d.get("kind") == "AWSCluster":
                groups = d["status"]["networkStatus"]["securityGroups"]
                for role, gid in sg_ids.items():
                    groups[role]["id"] = gid
    return docs


def example_public_key() -> bytes:
    secret = next(d for d in load_documents([EXAMPLE / "required"]) if d.get("kind") == "Secret")
    return base64.b64decode(secret["data"]["tls.crt"])


def write_required(dirpath: Path, docs: list[dict[str, Any]]) -> Path:
    dirpath.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(docs):
        (dirpath / f"{i:02d}-{d['kind'].lower()}.yaml").write_text(yaml.safe_dump(d))
    return dirpath


def other_public_key() -> bytes:
    """A fresh RSA key that is not the example's."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


@dataclass
class Network:
    """A VPC with the two CAPA role groups (moto picks the ids)."""

    vpc: str
    groups: dict[str, str]


def make_network(ec2: Any) -> Network:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    groups = {
        role: ec2.create_security_group(GroupName=f"demo-{role}", Description=role, VpcId=vpc)[
            "GroupId"
        ]
        for role in (CONTROL_PLANE, NODE)
    }
    return Network(vpc, groups)


def ingress_permission(need: PortNeed, source_id: str) -> dict[str, Any]:
    perm: dict[str, Any] = {
        "IpProtocol": need.protocol,
        "UserIdGroupPairs": [{"GroupId": source_id}],
    }
    if need.protocol in {"tcp", "udp"}:
        perm |= {"FromPort": need.from_port, "ToPort": need.to_port}
    return perm


def open_ports(
    ec2: Any, target: Target, groups: dict[str, str], *, skip: set[str] = frozenset()
) -> None:
    """Authorise every port the wanted add-ons need (what a correct AWSCluster makes CAPA do)."""
    for need in target.accepted.port_needs:
        if need.purpose in skip:
            continue
        for t in need.targets:
            for s in need.sources:
                ec2.authorize_security_group_ingress(
                    GroupId=groups[t], IpPermissions=[ingress_permission(need, groups[s])]
                )


@dataclass
class Distribution:
    """A CloudFront distribution moto made."""

    id: str
    arn: str
    domain_name: str
    oac_id: str


@dataclass
class Composed:
    """What ``compose`` created."""

    provider_arn: str
    roles: dict[str, str] = field(default_factory=dict)  # addon -> role name
    lbc_policy_arn: str = ""
    # addon -> ARN of the function's own (customer-managed) policy
    policy_arns: dict[str, str] = field(default_factory=dict)
    # Managed hosting: the distribution.
    distribution: Distribution | None = None


def _tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def compose(
    clients: Clients,
    target: Target,
    *,
    public_pem: bytes,
    trust_overrides: dict[str, str] | None = None,
    extra_attachments: dict[str, list[str]] | None = None,
) -> Composed:
    """Create, with ``clients``, exactly what the function composes for ``target``.

    The same calls the provider makes for the composed managed resources, with
    the documents from ``function.policies`` and ``function.addons.oidc_issuer``.
    ``trust_overrides`` replaces an add-on's trust policy (to plant a fault);
    ``extra_attachments`` attaches more policies to an add-on's role.
    """
    iam = clients.iam
    p = target.partition
    cluster_tag = {CLUSTER_TAG: target.owner_tag}
    cloudfront = target.names.cloudfront
    managed = None
    if cloudfront is None:
        bucket = target.names.bucket
        _create_bucket(clients, target, bucket, public=True)
        clients.s3.put_bucket_policy(Bucket=bucket, Policy=bucket_policy(bucket, p))
    elif not cloudfront.shared:
        bucket = target.names.bucket
        _create_bucket(clients, target, bucket, public=False)
        managed = compose_managed_distribution(clients, target)
        keys = (target.names.issuer_key(DISCOVERY_KEY), target.names.issuer_key(JWKS_KEY))
        clients.s3.put_bucket_policy(
            Bucket=bucket, Policy=cloudfront_bucket_policy(bucket, keys, managed.arn, p)
        )
    put_documents(clients.s3, target, public_pem)
    provider = iam.create_open_id_connect_provider(
        Url=target.issuer_url, ClientIDList=[STS_AUDIENCE], Tags=_tag_list(cluster_tag)
    )["OpenIDConnectProviderArn"]
    account = clients.sts.get_caller_identity()["Account"]
    assert provider == provider_arn_for(p, account, target.issuer_host_path)
    out = Composed(provider, distribution=managed)
    for addon in addon_roles(target.spec):
        out.roles[addon.addon] = _compose_role(
            clients=clients,
            target=target,
            addon=addon,
            provider=provider,
            account=account,
            trust_overrides=trust_overrides or {},
            extra_attachments=extra_attachments or {},
        )
        if not addon.managed_policy:
            out.policy_arns[addon.addon] = expected_policy_arn(target, account, addon)
        if addon.addon == "lbc":
            out.lbc_policy_arn = expected_policy_arn(target, account, addon)
    return out


def _create_bucket(clients: Clients, target: Target, bucket: str, *, public: bool) -> None:
    """The XR's own bucket: tagged, ACLs off, Block Public Access as the hosting wants it."""
    s3 = clients.s3
    create: dict[str, Any] = {"Bucket": bucket}
    if target.region != "us-east-1":
        create["CreateBucketConfiguration"] = {"LocationConstraint": target.region}
    s3.create_bucket(**create)
    s3.put_bucket_tagging(
        Bucket=bucket, Tagging={"TagSet": _tag_list({CLUSTER_TAG: target.owner_tag})}
    )
    s3.put_bucket_ownership_controls(
        Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    )
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": not public,
            "RestrictPublicBuckets": not public,
        },
    )


def put_documents(s3: Any, target: Target, public_pem: bytes) -> None:
    """The two discovery documents, where the function's Objects put them."""
    names = target.names
    documents = {
        DISCOVERY_KEY: discovery_document(target.issuer_url),
        JWKS_KEY: jwks_document(public_pem),
    }
    for key, body in documents.items():
        s3.put_object(
            Bucket=names.issuer_bucket,
            Key=names.issuer_key(key),
            Body=body.encode(),
            ContentType="application/json",
            CacheControl="max-age=300",
            Tagging=urlencode({CLUSTER_TAG: target.owner_tag}),
        )


def distribution_config(
    *, domain: str, bucket: str, region: str, oac_id: str, certificate: str, reference: str
) -> dict[str, Any]:
    """A DistributionConfig as the provider sends the function's Distribution (or a platform's)."""
    methods = {"Quantity": 2, "Items": ["GET", "HEAD"]}
    return {
        "CallerReference": reference,
        "Aliases": {"Quantity": 1, "Items": [domain]},
        "Origins": {
            "Quantity": 1,
            "Items": [
                {
                    "Id": "irsa-bucket",
                    "DomainName": f"{bucket}.s3.{region}.amazonaws.com",
                    "OriginAccessControlId": oac_id,
                    "S3OriginConfig": {"OriginAccessIdentity": ""},
                }
            ],
        },
        "DefaultCacheBehavior": {
            "TargetOriginId": "irsa-bucket",
            "ViewerProtocolPolicy": "https-only",
            "CachePolicyId": "4135ea2d-6df8-44a3-9df3-4b5a84be39ad",
            "AllowedMethods": {**methods, "CachedMethods": methods},
        },
        "Comment": "IRSA issuers",
        "Enabled": True,
        "PriceClass": "PriceClass_100",
        "ViewerCertificate": {
            "ACMCertificateArn": certificate,
            "SSLSupportMethod": "sni-only",
            "MinimumProtocolVersion": "TLSv1.2_2021",
        },
    }


def create_distribution(
    clients: Clients,
    *,
    domain: str,
    bucket: str,
    region: str,
    certificate: str,
    tags: dict[str, str],
    oac_name: str,
) -> Distribution:
    """An origin access control and a distribution with tags (CreateDistributionWithTags)."""
    cf = clients.cloudfront
    oac = cf.create_origin_access_control(
        OriginAccessControlConfig={
            "Name": oac_name,
            "Description": "IRSA issuer",
            "SigningProtocol": "sigv4",
            "SigningBehavior": "always",
            "OriginAccessControlOriginType": "s3",
        }
    )["OriginAccessControl"]["Id"]
    config = distribution_config(
        domain=domain,
        bucket=bucket,
        region=region,
        oac_id=oac,
        certificate=certificate,
        reference=oac_name,
    )
    made = cf.create_distribution_with_tags(
        DistributionConfigWithTags={
            "DistributionConfig": config,
            "Tags": {"Items": _tag_list(tags)},
        }
    )["Distribution"]
    return Distribution(made["Id"], made["ARN"], made["DomainName"], oac)


def compose_managed_distribution(clients: Clients, target: Target) -> Distribution:
    """A Managed hosting's OAC, distribution and (with hostedZoneId) its alias record."""
    cloud_front = target.spec.irsa.cloud_front
    assert cloud_front is not None
    made = create_distribution(
        clients,
        domain=cloud_front.domain,
        bucket=target.names.bucket,
        region=target.region,
        certificate=cloud_front.certificate_arn,
        tags={CLUSTER_TAG: target.owner_tag},
        oac_name=target.names.origin_access_control,
    )
    if cloud_front.hosted_zone_id:
        clients.route53.change_resource_record_sets(
            HostedZoneId=cloud_front.hosted_zone_id,
            ChangeBatch={
                "Changes": [
                    {
                        "Action": "CREATE",
                        "ResourceRecordSet": {
                            "Name": cloud_front.domain,
                            "Type": "A",
                            "AliasTarget": {
                                "HostedZoneId": CLOUDFRONT_HOSTED_ZONE_ID,
                                "DNSName": made.domain_name,
                                "EvaluateTargetHealth": False,
                            },
                        },
                    }
                ]
            },
        )
    return made


def custom_policy(target: Target, addon: str) -> tuple[str, str]:
    """(document, description) of an add-on's customer-managed policy, as the function writes it."""
    if addon == "lbc":
        return (
            lbc_policy(target.partition),
            "AWS Load Balancer Controller v3.5.0 (upstream iam_policy.json)",
        )
    dns = target.spec.dns.external_dns
    assert addon == "external-dns" and dns is not None, addon
    return (
        external_dns_policy(tuple(dns.hosted_zone_ids), target.partition),
        "external-dns: records in the ClusterPlugin's hostedZoneIDs only",
    )


def _compose_role(
    *,
    clients: Clients,
    target: Target,
    addon: AddonRole,
    provider: str,
    account: str,
    trust_overrides: dict[str, str],
    extra_attachments: dict[str, list[str]],
) -> str:
    iam = clients.iam
    tags = _tag_list({CLUSTER_TAG: target.owner_tag, "clusterplugin.dev/addon": addon.addon})
    if not addon.managed_policy:
        document, description = custom_policy(target, addon.addon)
        iam.create_policy(
            PolicyName=target.names.policy(addon.addon),
            Path=IAM_PATH,
            PolicyDocument=document,
            Description=description,
            Tags=tags,
        )
    name = target.names.role(addon.addon)
    trust = trust_overrides.get(addon.addon) or trust_policy(
        provider, target.issuer_host_path, addon.namespace, addon.service_account
    )
    iam.create_role(
        RoleName=name,
        Path=IAM_PATH,
        AssumeRolePolicyDocument=trust,
        Description=f"IRSA role of {addon.namespace}/{addon.service_account}",
        Tags=tags,
    )
    for arn in [
        expected_policy_arn(target, account, addon),
        *extra_attachments.get(addon.addon, []),
    ]:
        iam.attach_role_policy(RoleName=name, PolicyArn=arn)
    return name


def example_target(sg_ids: dict[str, str] | None = None, **kw: Any) -> Target:
    return build_target(example_xr(), required=example_required(sg_ids), **kw)


def target_of(
    example: str,
    sg_ids: dict[str, str] | None = None,
    *,
    mutate_xr: Any = None,
    **kw: Any,
) -> Target:
    """The preflight target of ``examples/<example>`` (its XR changed by ``mutate_xr``)."""
    xr = load_documents([EXAMPLES / example / "xr.yaml"])[0]
    if mutate_xr is not None:
        mutate_xr(xr)
    docs = load_documents([EXAMPLES / example / "required"])
    if sg_ids:
        for d in docs:
            if d.get("kind") == "AWSCluster":
                groups = d["status"]["networkStatus"]["securityGroups"]
                for role, gid in sg_ids.items():
                    groups[role]["id"] = gid
    return build_target(xr, required=docs, **kw)
