"""The check framework of ``aws preflight``: outcomes, the clients, AWS error helpers.

Each check is a small function taking boto3 clients and plain values, and
returning :class:`Check` results (name, pass/warn/fail, what was found, how to
fix it); ``function_tools/aws/preflight.py`` strings them together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from function.names import CLUSTER_TAG


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
    """The boto3 clients preflight uses (see ``function_tools.aws.clients.make_clients``)."""

    sts: Any
    s3: Any
    s3control: Any
    # Unsigned S3 client: reads the discovery documents the way STS does, anonymously.
    s3_anonymous: Any
    iam: Any
    ec2: Any
    route53: Any = None
    # Global CloudFront, and ACM in us-east-1 (where CloudFront's certificates live).
    cloudfront: Any = None
    acm: Any = None
    # EKS: the cluster's Pod Identity associations (spec.irsa.mode PodIdentity).
    eks: Any = None


def code(err: ClientError) -> str:
    """The AWS error code."""
    return str(err.response.get("Error", {}).get("Code", ""))


def http_status(err: ClientError) -> int:
    """The HTTP status of the failed call."""
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def denied(err: ClientError) -> bool:
    """Whether the call was refused for want of a permission."""
    codes = {"AccessDenied", "AccessDeniedException", "403", "Forbidden"}
    return code(err) in codes or http_status(err) == 403


def absent(err: ClientError, *codes: str) -> bool:
    """Whether the call failed because its object does not exist."""
    return code(err) in {"404", "NotFound", *codes} or http_status(err) == 404


def not_found(err: ClientError) -> Check:
    """A FAIL for an AWS "not found" answer no check expected, naming what AWS did not find."""
    error = err.response.get("Error", {})
    named = [f"{k} {v}" for k, v in error.items() if k not in {"Code", "Message"} and v]
    what = f" ({', '.join(named)})" if named else ""
    msg = (
        f"{err.operation_name} answered {code(err)}: {error.get('Message', '')}{what}; the "
        "checks after it were not run"
    )
    fix = (
        "create what it names, or correct its name in the XR or the step input; if something "
        "was deleted while preflight ran, run it again"
    )
    return Check("aws/not-found", Status.FAIL, msg, fix)


def missing(*, strict: bool) -> Status:
    """Something the function should have created is absent: fail only in phase ``after``."""
    return Status.FAIL if strict else Status.WARN


def tag_map(tag_list: Iterable[dict[str, str]] | None) -> dict[str, str]:
    """AWS's [{Key, Value}] tags as a map."""
    return {t["Key"]: t["Value"] for t in tag_list or () if "Key" in t}


def owner_phrase(owner: str | None) -> str:
    """Whose an existing object is, by its cluster tag, for messages."""
    return f"belongs to {owner} (tag {CLUSTER_TAG})" if owner else f"has no {CLUSTER_TAG} tag"


def plural(items: list[str], word: str) -> str:
    """``word`` (plural when several) and the items."""
    return f"{word}{'s' if len(items) > 1 else ''} {', '.join(items)}"


RENAME_FIX = (
    "choose other names: set spec.irsa.bucketName, or a namePrefix in the step input "
    "(the bucket is <namePrefix>irsa-<namespace>-<cluster>-<hash>, roles are "
    "<namePrefix><namespace>-<cluster>-<addon>-<hash>)"
)


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
