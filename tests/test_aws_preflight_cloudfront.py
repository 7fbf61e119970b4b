"""``aws preflight`` for an issuer behind CloudFront, against moto (CloudFront, Route 53, ACM).

Shared: the platform team's bucket, distribution and bucket policy are set up as docs/issuer.md
says, then each misconfiguration is planted and must be reported with its fix.
Managed: the certificate, the hosted zone, a domain some other distribution holds.
``--live`` is shown against an HTTP server on loopback standing in for the distribution.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from function.addons.oidc_issuer import discovery_document, jwks_document
from function.names import CLUSTER_TAG, PARTITIONS
from function.policies import shared_bucket_policy
from function_tools.aws import cloudfront_checks as cf
from function_tools.aws import preflight as pf
from function_tools.aws.checks import Check, Clients, Phase, Status
from function_tools.aws.target import Target
from function_tools.commands.aws import aws
from function_tools.input_files import load_documents
from tests import aws_helpers as h

SHARED = "cloudfront-shared"
MANAGED = "cloudfront-managed"
BUCKET = "acme-oidc-issuers"
DOMAIN = "oidc.example.com"
ISSUER = "https://oidc.example.com/team-c/api"


@pytest.fixture(scope="module")
def server() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


def public_key(example: str) -> bytes:
    docs = load_documents([h.EXAMPLES / example / "required"])
    secret = next(d for d in docs if d.get("kind") == "Secret")
    return base64.b64decode(secret["data"]["tls.crt"])


def certificate(acm: Any, domain: str) -> str:
    """An ACM certificate for ``domain``, imported (so ISSUED at once)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(domain)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    return str(
        acm.import_certificate(
            Certificate=cert.public_bytes(serialization.Encoding.PEM),
            PrivateKey=key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            ),
        )["CertificateArn"]
    )


@dataclass
class Platform:
    """What the platform team set up once for a Shared distribution."""

    distribution: h.Distribution


def platform_bucket(s3: Any, region: str = "us-east-1") -> None:
    """docs/issuer.md's private bucket: ACLs off, all four Block Public Access flags."""
    create: dict[str, Any] = {"Bucket": BUCKET}
    if region != "us-east-1":
        create["CreateBucketConfiguration"] = {"LocationConstraint": region}
    s3.create_bucket(**create)
    s3.put_bucket_ownership_controls(
        Bucket=BUCKET, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    )
    s3.put_public_access_block(
        Bucket=BUCKET,
        PublicAccessBlockConfiguration=dict.fromkeys(cf.ALL_FOUR, True),
    )


def platform_setup(clients: Clients) -> Platform:
    """docs/issuer.md's steps: private bucket, OAC, distribution, the bucket policy."""
    platform_bucket(clients.s3)
    dist = h.create_distribution(
        clients,
        domain=DOMAIN,
        bucket=BUCKET,
        region="us-east-1",
        certificate=certificate(clients.acm, DOMAIN),
        tags={"team": "platform"},
        oac_name="oidc-issuers",
    )
    policy = shared_bucket_policy(BUCKET, dist.arn, PARTITIONS["aws"])
    clients.s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))
    return Platform(dist)


@dataclass
class InMemoryCrossplane:
    server: h.MotoServer
    clients: Clients
    target: Target

    def run(self, phase: Phase = Phase.AUTO, **kw: Any) -> pf.Report:
        return pf.run(self.target, self.clients, phase, **kw)


def _world(server: h.MotoServer, example: str, mutate_xr: Any = None) -> InMemoryCrossplane:
    server.reset()
    clients = h.make_clients(server.endpoint)
    network = h.make_network(clients.ec2)
    return InMemoryCrossplane(server, clients, h.target_of(example, network.groups, mutate_xr=mutate_xr))


def checks(report: pf.Report) -> dict[str, Check]:
    return {c.name: c for c in report.checks}


def problems(report: pf.Report) -> dict[str, str]:
    return {c.name: f"{c.status.value}: {c.message}" for c in report.checks if c.status is not Status.PASS}


def irsa_checks(report: pf.Report) -> dict[str, Check]:
    """The issuer's checks (not the roles', the ports' or the deletion's)."""
    return {n: c for n, c in checks(report).items() if not n.startswith(("role/", "security-groups/", "deletion/"))}


# --- Shared ----------------------------------------------------------------------------------


def test_a_shared_distribution_set_up_as_documented_passes(server: h.MotoServer) -> None:
    w = _world(server, SHARED)
    platform_setup(w.clients)
    before = w.run()
    assert before.phase is Phase.BEFORE
    assert {n: c for n, c in problems(before).items() if not n.startswith(("role/", "security-groups/", "deletion/"))} == {}
    h.compose(w.clients, w.target, public_pem=public_key(SHARED))
    after = w.run(Phase.AFTER)
    assert list(irsa_checks(after)) == [
        "credentials",
        "issuer/api-server",
        "account/s3-block-public-access",
        "shared/bucket",
        "shared/bucket-ownership",
        "shared/bucket/public-access-block",
        "shared/distribution",
        "shared/bucket-policy",
        "issuer/discovery",
        "issuer/jwks",
        "oidc-provider",
        "oidc-provider/quota",
    ]
    assert {n: c.message for n, c in irsa_checks(after).items() if c.status is not Status.PASS} == {}
    assert checks(after)["issuer/discovery"].message == f"the discovery document is in place and names {ISSUER}"
    assert after.to_dict()["bucket"] == BUCKET and after.to_dict()["issuerURL"] == ISSUER
    # Block Public Access on the account is no obstacle any more.
    w.clients.s3control.put_public_access_block(
        AccountId=h.ACCOUNT, PublicAccessBlockConfiguration=dict.fromkeys(cf.ALL_FOUR, True)
    )
    assert checks(w.run())["account/s3-block-public-access"].status is Status.PASS


def _bucket_in_eu(w: InMemoryCrossplane, p: Platform) -> None:
    s3 = w.clients.s3
    policy = s3.get_bucket_policy(Bucket=BUCKET)["Policy"]
    s3.delete_bucket_policy(Bucket=BUCKET)
    s3.delete_bucket(Bucket=BUCKET)
    platform_bucket(s3, "eu-west-1")
    s3.put_bucket_policy(Bucket=BUCKET, Policy=policy)


def _ownership(w: InMemoryCrossplane, _: Platform) -> None:
    w.clients.s3.put_bucket_ownership_controls(
        Bucket=BUCKET, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]}
    )


def _bpa(w: InMemoryCrossplane, _: Platform) -> None:
    w.clients.s3.put_public_access_block(
        Bucket=BUCKET,
        PublicAccessBlockConfiguration={**dict.fromkeys(cf.ALL_FOUR, True), "RestrictPublicBuckets": False},
    )


def _no_policy(w: InMemoryCrossplane, _: Platform) -> None:
    w.clients.s3.delete_bucket_policy(Bucket=BUCKET)


def _policy_of_another_distribution(w: InMemoryCrossplane, _: Platform) -> None:
    other = "arn:aws:cloudfront::123456789012:distribution/EOTHER0000000"
    w.clients.s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(shared_bucket_policy(BUCKET, other, PARTITIONS["aws"])))


def _policy_without_source(w: InMemoryCrossplane, p: Platform) -> None:
    policy = shared_bucket_policy(BUCKET, p.distribution.arn, PARTITIONS["aws"])
    del policy["Statement"][0]["Condition"]  # type: ignore[index]
    w.clients.s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))


def _policy_for_root_keys_only(w: InMemoryCrossplane, p: Platform) -> None:
    policy = shared_bucket_policy(BUCKET, p.distribution.arn, PARTITIONS["aws"])
    policy["Statement"][0]["Resource"] = [f"arn:aws:s3:::{BUCKET}/keys.json"]  # type: ignore[index]
    w.clients.s3.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))


def _update_origin(w: InMemoryCrossplane, p: Platform, **origin: Any) -> None:
    cfront = w.clients.cloudfront
    got = cfront.get_distribution_config(Id=p.distribution.id)
    config = got["DistributionConfig"]
    config["Origins"]["Items"][0].update(origin)
    cfront.update_distribution(Id=p.distribution.id, IfMatch=got["ETag"], DistributionConfig=config)


def _website_origin(w: InMemoryCrossplane, p: Platform) -> None:
    _update_origin(w, p, DomainName=f"{BUCKET}.s3-website-us-east-1.amazonaws.com")


def _no_oac(w: InMemoryCrossplane, p: Platform) -> None:
    _update_origin(w, p, OriginAccessControlId="")


def _no_distribution(w: InMemoryCrossplane, p: Platform) -> None:
    cfront = w.clients.cloudfront
    got = cfront.get_distribution_config(Id=p.distribution.id)
    config = {**got["DistributionConfig"], "Aliases": {"Quantity": 1, "Items": ["other.example.com"]}}
    cfront.update_distribution(Id=p.distribution.id, IfMatch=got["ETag"], DistributionConfig=config)


MISCONFIGURED = {
    "bucket-elsewhere": (_bucket_in_eu, "shared/bucket", "is in eu-west-1, not us-east-1", "bucketRegion: eu-west-1"),
    "ownership": (_ownership, "shared/bucket-ownership", "not BucketOwnerEnforced", "ObjectOwnership=BucketOwnerEnforced"),
    "public-access-block": (_bpa, "shared/bucket/public-access-block", "leaves RestrictPublicBuckets off", "RestrictPublicBuckets=true"),
    "no-policy": (_no_policy, "shared/bucket-policy", "has no policy", '"AWS:SourceArn":"arn:aws:cloudfront::123456789012:distribution/'),
    "another-distribution": (_policy_of_another_distribution, "shared/bucket-policy", "names arn:aws:cloudfront::123456789012:distribution/EOTHER0000000", "aws shared-bucket-policy"),
    "no-source-arn": (_policy_without_source, "shared/bucket-policy", "without an AWS:SourceArn", "aws shared-bucket-policy"),
    "other-keys": (_policy_for_root_keys_only, "shared/bucket-policy", "does not let the distribution read team-c/api/", "/*/keys.json"),
    "website-origin": (_website_origin, "shared/distribution", "not from the bucket's REST endpoint", "REST endpoint"),
    "no-oac": (_no_oac, "shared/distribution", "has no origin access control", "origin access control (s3, always, sigv4)"),
    "no-distribution": (_no_distribution, "shared/distribution", f"no CloudFront distribution in this account serves {DOMAIN}", "docs/issuer.md"),
}


@pytest.mark.parametrize("fault", sorted(MISCONFIGURED))
def test_a_misconfigured_shared_distribution_is_reported_with_its_fix(server: h.MotoServer, fault: str) -> None:
    plant, name, message, fix = MISCONFIGURED[fault]
    w = _world(server, SHARED)
    platform = platform_setup(w.clients)
    plant(w, platform)
    report = w.run()
    check = checks(report)[name]
    assert check.status is Status.FAIL, check
    assert message in check.message
    assert fix in check.fix
    assert report.failed
    # One fault, one failure among the issuer's checks.
    failed = [n for n, c in irsa_checks(report).items() if c.status is Status.FAIL]
    assert failed == [name], problems(report)


def test_cli_text_of_a_misconfigured_shared_bucket(server: h.MotoServer, tmp_path: Path) -> None:
    w = _world(server, SHARED)
    platform = platform_setup(w.clients)
    _ownership(w, platform)
    _no_policy(w, platform)
    r = _cli(w, tmp_path, SHARED)
    assert r.exit_code == 1, r.output
    assert "FAIL  shared/bucket-ownership" in r.output
    assert "FAIL  shared/bucket-policy" in r.output
    assert f"bucket {BUCKET}  issuer {ISSUER}" in r.output
    (tmp_path / "preflight.txt").write_text(r.output)


def test_cli_reports_a_shared_bucket_that_does_not_exist_yet(server: h.MotoServer, tmp_path: Path) -> None:
    """What a platform team meets first: AWS answers NoSuchBucket to every bucket call, and
    each becomes a FAIL naming the bucket and how to create it, never an abort."""
    w = _world(server, SHARED)
    r = _cli(w, tmp_path, SHARED)
    assert r.exit_code == 1, r.output
    assert "an AWS call failed" not in r.output
    report = checks(w.run())
    assert report["shared/bucket"].status is Status.FAIL
    assert report["shared/bucket"].message == f"the Shared distribution's bucket {BUCKET} does not exist"
    assert report["shared/bucket"].fix.startswith(f"create it: aws s3api create-bucket --bucket {BUCKET} --region us-east-1,")
    assert report["shared/bucket-policy"].message == f"bucket {BUCKET} does not exist"
    assert report["shared/bucket-policy"].fix.startswith("create the bucket (see shared/bucket), then: put this bucket policy")
    assert f"FAIL  shared/bucket                   the Shared distribution's bucket {BUCKET} does not exist" in r.output
    assert f"FAIL  shared/bucket-policy            bucket {BUCKET} does not exist" in r.output


class _Vanishing:
    """An S3 client whose bucket is deleted between HeadBucket and the next call, as when
    someone deletes it while preflight runs: AWS's own answer, from moto, to a call on it."""

    def __init__(self, s3: Any, bucket: str) -> None:
        self.s3, self.bucket = s3, bucket

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.s3, name)
        if name == "head_bucket":
            return call

        def after_deletion(**kw: Any) -> Any:
            self.s3.delete_bucket(Bucket=self.bucket)
            return call(**kw)

        return after_deletion


def test_a_bucket_deleted_while_the_shared_checks_run_is_a_finding(server: h.MotoServer) -> None:
    w = _world(server, SHARED)
    w.clients.s3.create_bucket(Bucket=BUCKET)
    clients = dataclasses.replace(w.clients, s3=_Vanishing(w.clients.s3, BUCKET))
    found = checks(pf.run(w.target, clients, Phase.AUTO))
    assert found["shared/bucket"].status is Status.PASS
    assert found["shared/bucket-ownership"].status is Status.FAIL
    assert found["shared/bucket-ownership"].message == f"bucket {BUCKET} does not exist"
    assert "deletion/external-resource-gc" in found  # the report went on to its end


def test_a_not_found_no_check_expects_ends_the_report_with_a_fail(server: h.MotoServer) -> None:
    """The issuer bucket vanishes between HeadBucket and GetBucketTagging: the checks so far
    and a FAIL naming the bucket, instead of an abort without any report."""
    server.reset()
    clients = h.make_clients(server.endpoint)
    target = h.target_of("selfhosted-full", h.make_network(clients.ec2).groups)
    bucket = target.names.bucket
    clients.s3.create_bucket(Bucket=bucket)
    report = pf.run(target, dataclasses.replace(clients, s3=_Vanishing(clients.s3, bucket)))
    assert [c.name for c in report.checks] == [
        "credentials",
        "issuer/api-server",
        "account/s3-block-public-access",
        "aws/not-found",
    ]
    last = report.checks[-1]
    assert last.status is Status.FAIL
    assert last.message == (
        "GetBucketTagging answered NoSuchBucket: The specified bucket does not exist "
        f"(BucketName {bucket}); the checks after it were not run"
    )
    assert report.failed


def _cli(w: InMemoryCrossplane, tmp_path: Path, example: str, *args: str) -> Any:
    return CliRunner().invoke(
        aws,
        [
            "preflight",
            str(h.EXAMPLES / example / "xr.yaml"),
            "--endpoint-url",
            w.server.endpoint,
            "--required",
            str(h.EXAMPLES / example / "required"),
            *args,
        ],
        env={
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        },
    )


# --- --live ------------------------------------------------------------------------------------


class _Issuer(http.server.BaseHTTPRequestHandler):
    """Serves what a distribution would for one Host, from a dict of path -> (status, body)."""

    routes: ClassVar[dict[str, tuple[int, bytes]]] = {}
    hosts: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hosts.append(self.headers.get("Host", ""))
        status, body = self.routes.get(self.path, (403, b"<Error>AccessDenied</Error>"))
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def loopback_issuer() -> Iterator[tuple[str, type[_Issuer]]]:
    handler = type("Handler", (_Issuer,), {"routes": {}, "hosts": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


def test_live_fetches_the_issuer_as_sts_would(
    server: h.MotoServer, tmp_path: Path, loopback_issuer: tuple[str, type[_Issuer]]
) -> None:
    endpoint, handler = loopback_issuer
    w = _world(server, SHARED)
    platform_setup(w.clients)
    h.compose(w.clients, w.target, public_pem=public_key(SHARED))
    # Nothing served yet: the check fails with what to look at.
    r = _cli(w, tmp_path, SHARED, "--live", "--live-endpoint", endpoint)
    assert r.exit_code == 1, r.output
    assert "FAIL  issuer/live" in r.output and "answers HTTP 403" in r.output
    assert handler.hosts == [DOMAIN]  # the issuer's Host, as CloudFront routes by it
    handler.routes.update(
        {
            "/team-c/api/.well-known/openid-configuration": (200, discovery_document(ISSUER).encode()),
            "/team-c/api/keys.json": (200, jwks_document(public_key(SHARED)).encode()),
        }
    )
    r = _cli(w, tmp_path, SHARED, "--live", "--live-endpoint", endpoint, "-o", "json")
    live = next(c for c in json.loads(r.output)["checks"] if c["name"] == "issuer/live")
    assert live["status"] == "pass", live
    # Another issuer's document (a wrong path behind the distribution) is caught.
    handler.routes["/team-c/api/.well-known/openid-configuration"] = (
        200,
        discovery_document("https://oidc.example.com/team-b/web").encode(),
    )
    r = _cli(w, tmp_path, SHARED, "--live", "--live-endpoint", endpoint)
    assert "names issuer 'https://oidc.example.com/team-b/web'" in r.output


def test_live_reports_an_unreachable_issuer() -> None:
    check = cf.check_live(cf.https_fetch("http://127.0.0.1:9"), ISSUER)  # discard port: refused
    assert check.status is Status.FAIL
    assert "STS cannot fetch the issuer" in check.message


# --- Managed -----------------------------------------------------------------------------------


@dataclass
class ManagedWorld(InMemoryCrossplane):
    zone: str = ""
    certificate: str = ""


def _managed(server: h.MotoServer, *, cert_domain: str = "auth-oidc.example.com", zone: str = "example.com", private: bool = False, request: bool = False) -> ManagedWorld:
    server.reset()
    clients = h.make_clients(server.endpoint)
    network = h.make_network(clients.ec2)
    if request:
        cert = clients.acm.request_certificate(DomainName=cert_domain, ValidationMethod="DNS")["CertificateArn"]
    else:
        cert = certificate(clients.acm, cert_domain)
    kw: dict[str, Any] = {"Name": zone, "CallerReference": zone}
    if private:
        kw["VPC"] = {"VPCRegion": "eu-west-1", "VPCId": network.vpc}
        kw["HostedZoneConfig"] = {"PrivateZone": True}
    zone_id = clients.route53.create_hosted_zone(**kw)["HostedZone"]["Id"].removeprefix("/hostedzone/")

    def mutate(xr: dict[str, Any]) -> None:
        hosting = xr["spec"]["irsa"]["hosting"]["cloudFront"]
        hosting["certificateArn"] = cert
        hosting["hostedZoneId"] = zone_id

    target = h.target_of(MANAGED, network.groups, mutate_xr=mutate)
    return ManagedWorld(server, clients, target, zone_id, cert)


def test_a_managed_distribution_passes_before_and_after(server: h.MotoServer) -> None:
    w = _managed(server)
    before = w.run()
    assert before.phase is Phase.BEFORE
    assert {n: c.message for n, c in irsa_checks(before).items() if c.status is not Status.PASS} == {}
    assert list(irsa_checks(before)) == [
        "credentials",
        "issuer/api-server",
        "account/s3-block-public-access",
        "managed/certificate",
        "managed/hosted-zone",
        "managed/domain",
        "bucket",
        "oidc-provider",
        "oidc-provider/quota",
    ]
    h.compose(w.clients, w.target, public_pem=public_key(MANAGED))
    after = w.run(Phase.AFTER)
    assert {n: c.message for n, c in irsa_checks(after).items() if c.status is not Status.PASS} == {}
    assert "bucket/public-access-block" in checks(after) and "issuer/jwks" in checks(after)
    assert "and is ours" in checks(after)["managed/domain"].message


@pytest.mark.parametrize(
    ("setup", "name", "message"),
    [
        ({"cert_domain": "other.example.com"}, "managed/certificate", "not auth-oidc.example.com"),
        ({"cert_domain": "*.example.com"}, None, ""),  # a wildcard covers one label
        ({"request": True}, "managed/certificate", "is PENDING_VALIDATION, not ISSUED"),
        ({"zone": "example.org"}, "managed/hosted-zone", "which does not hold auth-oidc.example.com"),
        ({"private": True}, "managed/hosted-zone", "is private"),
    ],
    ids=["certificate-domain", "wildcard", "certificate-pending", "zone-of-another-domain", "private-zone"],
)
def test_a_managed_setup_problem_is_reported(server: h.MotoServer, setup: dict[str, Any], name: str | None, message: str) -> None:
    w = _managed(server, **setup)
    report = w.run()
    failed = {n: c for n, c in irsa_checks(report).items() if c.status is Status.FAIL}
    if name is None:
        assert failed == {}
        return
    assert list(failed) == [name], problems(report)
    assert message in failed[name].message and failed[name].fix


def test_a_missing_certificate_and_a_taken_domain_are_reported(server: h.MotoServer) -> None:
    w = _managed(server)
    # Someone else's distribution holds the alias; an A record that is no alias takes the name.
    h.create_distribution(
        w.clients,
        domain="auth-oidc.example.com",
        bucket="someone-elses",
        region="us-east-1",
        certificate=w.certificate,
        tags={CLUSTER_TAG: "team-z/other"},
        oac_name="other",
    )
    w.clients.route53.change_resource_record_sets(
        HostedZoneId=w.zone,
        ChangeBatch={"Changes": [{"Action": "CREATE", "ResourceRecordSet": {
            "Name": "auth-oidc.example.com", "Type": "A", "TTL": 60, "ResourceRecords": [{"Value": "192.0.2.1"}]}}]},
    )
    w.clients.acm.delete_certificate(CertificateArn=w.certificate)
    failed = {n: c.message for n, c in irsa_checks(w.run()).items() if c.status is Status.FAIL}
    assert set(failed) == {"managed/certificate", "managed/hosted-zone", "managed/domain"}
    assert "does not exist in us-east-1" in failed["managed/certificate"]
    assert "already has a A record" in failed["managed/hosted-zone"]
    assert "for team-z/other: CloudFront refuses a second one" in failed["managed/domain"]


# --- S3Public, with Block Public Access on ---------------------------------------------------


def test_block_public_access_on_points_at_cloudfront_hosting(server: h.MotoServer) -> None:
    w = _world(server, "selfhosted-full")
    w.clients.s3control.put_public_access_block(
        AccountId=h.ACCOUNT, PublicAccessBlockConfiguration=dict.fromkeys(cf.ALL_FOUR, True)
    )
    check = checks(w.run())["account/s3-block-public-access"]
    assert check.status is Status.FAIL
    assert "set spec.irsa.hosting.type: CloudFront" in check.fix
