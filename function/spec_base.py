"""What every model of the ClusterPlugin spec and the step Input is built from.

Below the add-ons, which declare their own spec models (``function/addons/*``) on these
parts; the XR's frame and the parsing are ``function/spec.py``, the step Input
``function/step_input.py``. Shared here: the patterns, ``InvalidInputError``, strict
models, ``AddonSpec`` (a chart version and Helm values), ``IRSAMode`` (read by the
vocabulary) and the reader of a spec path.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
)

# Fields Crossplane itself writes into an XR's spec (v1 legacy XRs keep them at
# the top of spec, v2 XRs under spec.crossplane). They are not ours to judge.
CROSSPLANE_SPEC_FIELDS = frozenset(
    {
        "crossplane",
        "compositionRef",
        "compositionRevisionRef",
        "compositionRevisionSelector",
        "compositionSelector",
        "compositionUpdatePolicy",
        "compositeDeletePolicy",
        "claimRef",
        "environmentConfigRefs",
        "publishConnectionDetailsTo",
        "resourceRefs",
        "writeConnectionSecretToRef",
    }
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CHART_VERSION = re.compile(r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d+$")
FILE_SYSTEM_ID = re.compile(r"^fs-[0-9a-f]{8,40}$")
CIDR_V4 = re.compile(r"^(\d{1,3}\.){3}\d{1,3}/\d{1,2}$")
DURATION = re.compile(r"^(\d+h)?(\d+m)?(\d+s)?$")
# Route 53 hosted zone ids: "Z" and upper-case letters and digits, at most 32 characters
# (the API's HostedZone.Id length limit), e.g. Z0123456789ABC; without "/hostedzone/".
HOSTED_ZONE_ID = re.compile(r"^Z[A-Z0-9]{1,31}$")
# A domain external-dns may manage: lower-case DNS labels of at most 63 characters, no
# trailing dot; a leading dot limits it to subdomains (external-dns --domain-filter).
DNS_NAME_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DOMAIN_FILTER = re.compile(rf"^\.?({DNS_NAME_LABEL}\.)*{DNS_NAME_LABEL}$")
DOMAIN_FILTER_MAX = 253
# Zones one role may change: the policy lists each ARN and must fit a managed policy's
# 6,144 characters even for 32-character ids in aws-us-gov (about 70 characters each).
HOSTED_ZONES_MAX = 50


S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3", "--table-s3")


def cel_refuse_affixes(prefixes: tuple[str, ...], suffixes: tuple[str, ...] = ()) -> str:
    """A CEL rule (for the generated schemas) refusing a string with one of these affixes."""
    tests = [f"self.startsWith('{p}')" for p in prefixes]
    tests += [f"self.endsWith('{s}')" for s in suffixes]
    return f"!({' || '.join(tests)})"


def s3_bucket_name_problem(name: str) -> str | None:
    """Why S3 (or the issuer's HTTPS endpoint) would reject ``name``, or None."""
    if not 3 <= len(name) <= 63:
        return f"{name!r} must be 3 to 63 characters long"
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*[a-z0-9]", name):
        # S3 also allows dots, but a dotted bucket breaks the TLS certificate of
        # the virtual-hosted issuer URL, so STS could not fetch the documents.
        return (
            f"{name!r} may hold only lower-case letters, digits and '-' (no dots), "
            "starting and ending with a letter or digit"
        )
    if name.startswith(S3_RESERVED_PREFIXES) or name.endswith(S3_RESERVED_SUFFIXES):
        return f"{name!r} uses a prefix or suffix S3 reserves"
    return None


def check_hosted_zone_id(v: str) -> str:
    """``v`` if it is a Route 53 hosted zone id (external-dns's zones, a Managed issuer's zone)."""
    if not HOSTED_ZONE_ID.match(v):
        hint = " (give the id alone, without /hostedzone/)" if "hostedzone" in v else ""
        msg = (
            f"{v[:64]!r} is not a Route 53 hosted zone id: Z followed by upper-case letters "
            f"and digits, at most 32 characters, e.g. Z0123456789ABC{hint}"
        )
        raise ValueError(msg)
    return v



class InvalidInputError(ValueError):
    """Bad XR spec or step input: one FATAL result naming each bad field.

    ``field`` and ``message`` are the first problem (the metrics label the field);
    ``problems`` holds every one, and ``str()`` says them all: "<field>: <message>; ...".
    """

    def __init__(self, field: str, message: str, *more: tuple[str, str]) -> None:
        self.problems: tuple[tuple[str, str], ...] = ((field, message), *more)
        super().__init__("; ".join(f"{f}: {m}" for f, m in self.problems))
        self.field = field
        self.message = message

    @classmethod
    def of(cls, problems: Sequence[tuple[str, str]]) -> InvalidInputError:
        """One error for several (field, message) problems, in order; at least one."""
        (field, message), *more = problems
        return cls(field, message, *more)


def helm_values_object(v: Any) -> Any:
    """``v`` as Helm values: None is {}, anything but a mapping a ValueError."""
    # Helm values must be a map; a list or a string here is a user mistake
    # Helm would only report at install time, on the workload cluster.
    if v is None:
        return {}
    if not isinstance(v, dict):
        msg = f"must be an object of Helm values (got {type(v).__name__})"
        raise ValueError(msg)  # Pydantic wants ValueError here.
    return v


HelmValues = Annotated[dict[str, Any], BeforeValidator(helm_values_object)]


class StrictModel(BaseModel):
    """A model that refuses unknown keys and is frozen (hashable, safe to cache)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def check_chart_version(v: str | None) -> str | None:
    """``v`` if it is a chart version (or None)."""
    if v is not None and not CHART_VERSION.match(v):
        msg = f"{v!r} is not a chart version (e.g. 1.22.4 or v3.32.1)"
        raise ValueError(msg)
    return v


class AddonSpec(StrictModel):
    """Fields every add-on shares: a chart version override and extra values."""

    version: str | None = Field(
        default=None,
        description=(
            "Chart version to install instead of the Composition's default for this add-on "
            "(its step input's charts entry), e.g. 1.22.4 or v3.32.1. Unset: that default."
        ),
        json_schema_extra={"pattern": CHART_VERSION.pattern},
    )
    values: HelmValues = Field(
        default_factory=dict,
        description=(
            "Helm values merged over the ones the function computes, e.g. "
            "{resources: {requests: {cpu: 50m}}}. A key the function sets itself cannot be "
            "overridden: the ClusterPlugin is refused with an error naming it."
        ),
    )

    _version = field_validator("version")(check_chart_version)


class IRSAMode(StrEnum):
    """Where the OIDC issuer for IAM Roles for Service Accounts comes from."""

    SELF_HOSTED = "SelfHosted"
    EXTERNAL = "External"
    # EKS Pod Identity instead of IRSA: no issuer, an association per add-on role.
    POD_IDENTITY = "PodIdentity"
    DISABLED = "Disabled"



def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, or inside ``X | None``, ``list[X]``, ``Annotated``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = model_in(arg)
        if found is not None:
            return found
    return None


def field_named(model: type[BaseModel], key: str) -> tuple[str, type[BaseModel] | None] | None:
    """(attribute name, the model it holds) of ``model``'s field spelled ``key`` in the API."""
    for name, info in model.model_fields.items():
        if key in (info.alias, name):
            return name, model_in(info.annotation)
    return None


def model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model whose field is at ``loc`` (an error's location, API spelling)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, int) or part in {"function-after", "function-before"}:
            continue
        if model is None:
            return None
        found = field_named(model, str(part))
        if found is None:
            return None
        model = found[1]
    return model


def spec_getter(path: str) -> Callable[[Any], Any]:
    """A reader of the spec at ``path`` (API spelling, e.g. ``spec.storage.ebs``).

    An add-on names its place in the spec once, as the user spells it: the reader
    follows the model's aliases. The models live with the add-ons, so the path is
    resolved on the first read (an attrgetter from then on); the registry checks
    every add-on's path against the frame (``spec_attributes``) when it is imported.
    """
    head, *keys = path.split(".")
    if head != "spec" or not keys:
        msg = f"{path!r} is not a field of the ClusterPlugin spec"
        raise ValueError(msg)
    resolved: list[Callable[[Any], Any]] = []

    def read(spec: BaseModel) -> Any:
        if not resolved:
            resolved.append(operator.attrgetter(".".join(spec_attributes(type(spec), path))))
        return resolved[0](spec)

    return read


@functools.cache
def spec_attributes(root: type[BaseModel], path: str) -> tuple[str, ...]:
    """The attribute names along ``path`` (API spelling) from the frame ``root``."""
    model: type[BaseModel] | None = root
    head, *keys = path.split(".")
    attrs = []
    for key in keys:
        found = None if model is None else field_named(model, key)
        if head != "spec" or found is None:
            msg = f"{path!r} is not a field of the ClusterPlugin spec"
            raise ValueError(msg)
        attrs.append(found[0])
        model = found[1]
    return tuple(attrs)
