"""boto3 clients for preflight, for real AWS or an emulator behind ``--endpoint-url``.

boto3 is the optional ``aws`` extra: import this module only where it is needed.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import boto3
from botocore import UNSIGNED
from botocore.config import Config

from function.addons.oidc_issuer import CLOUDFRONT_CERTIFICATE_REGION as CLOUDFRONT_REGION
from function_tools.aws.preflight import Clients


def _is_local(endpoint_url: str) -> bool:
    host = urlsplit(endpoint_url).hostname or ""
    if host == "localhost":
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _strip_account_host_prefix(request: Any, **_: Any) -> None:
    """Undo ``<account-id>.`` in front of a local endpoint's host (S3 Control).

    botocore's endpoint rules put the account id in front of the host for S3
    Control, also for a custom endpoint; ``<account>.127.0.0.1`` resolves
    nowhere. ``Config(inject_host_prefix=False)`` does not help here, since the
    prefix comes from the endpoint ruleset, not from a host prefix.
    """
    parts = urlsplit(request.url)
    first, _, rest = parts.netloc.partition(".")
    if len(first) == 12 and first.isdigit() and rest:
        request.url = urlunsplit(parts._replace(netloc=rest))


def make_clients(
    *,
    profile: str | None = None,
    region: str,
    endpoint_url: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session: Any = None,
) -> Clients:
    """The clients preflight needs, from a profile (or the default chain) and a region.

    Args:
        profile: A named AWS profile; None uses the default credential chain.
        region: The region the issuer lives in (S3, EC2 and S3 Control calls).
        endpoint_url: An emulator or proxy to send every call to (path-style S3).
        access_key_id: Explicit credentials (tests); else the session's.
        secret_access_key: Explicit credentials (tests); else the session's.
        session: A boto3 Session to reuse (it caches the service models).

    Returns:
        The clients.
    """
    session = session or boto3.Session(profile_name=profile, region_name=region)
    creds: dict[str, str] = {}
    if access_key_id and secret_access_key:
        creds = {"aws_access_key_id": access_key_id, "aws_secret_access_key": secret_access_key}
    base = Config(
        retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=20
    )
    s3_config = base
    if endpoint_url:
        s3_config = base.merge(Config(s3={"addressing_style": "path"}))

    def client(service: str, config: Any = base) -> Any:
        return session.client(
            service, region_name=region, endpoint_url=endpoint_url, config=config, **creds
        )

    def global_client(service: str) -> Any:
        # CloudFront's API and the certificates it serves are in us-east-1 whatever the region.
        return session.client(
            service,
            region_name=CLOUDFRONT_REGION,
            endpoint_url=endpoint_url,
            config=base,
            **creds,
        )

    s3control = client("s3control")
    if endpoint_url and _is_local(endpoint_url):
        s3control.meta.events.register("before-sign.s3-control.*", _strip_account_host_prefix)
    # Unsigned: the read is anonymous, as STS's is; no credentials are attached.
    anonymous = session.client(
        "s3",
        region_name=region,
        endpoint_url=endpoint_url,
        config=s3_config.merge(Config(signature_version=UNSIGNED)),
    )
    return Clients(
        sts=client("sts"),
        s3=client("s3", s3_config),
        s3control=s3control,
        s3_anonymous=anonymous,
        iam=client("iam"),
        ec2=client("ec2"),
        # Route 53 is global; boto3 finds its endpoint (and partition) from the region.
        route53=client("route53"),
        cloudfront=global_client("cloudfront"),
        acm=global_client("acm"),
        eks=client("eks"),
    )
