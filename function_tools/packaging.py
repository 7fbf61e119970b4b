"""Where the packages are published, and the names Crossplane derives from that.

A release is published under one registry path (``REGISTRY``, e.g. ``ghcr.io/acme``) at
one version: the function package at ``REGISTRY/function-cluster-plugin:vVERSION`` and
the Configurations beside it. Crossplane installs a Configuration's missing dependency
as an object named after the dependency's repository path, so the name the Compositions
call the function by follows from ``REGISTRY`` (``ghcr.io/acme`` ->
``acme-function-cluster-plugin``). :class:`PackageSource` computes both from one place,
so a Configuration's ``dependsOn`` and its Composition's ``functionRef`` always agree.

The naming rule, as read in Crossplane's source (core v2.4.0, crossplane-runtime v2.4.0,
go-containerregistry v0.21.8):

- the resolver creates a missing dependency with
  ``xpkg.ToDNSLabel(ref.Context().RepositoryStr())``
  (internal/controller/pkg/resolver/reconciler.go, ``NewPackage``), ``ref`` being
  ``name.ParseReference`` of the dependency's package;
- ``RepositoryStr`` is the reference without its registry host (the first path component
  when it is ``localhost`` or holds a ``.`` or ``:``), with ``library/`` before a
  one-component Docker Hub path (go-containerregistry pkg/name/repository.go);
- ``ToDNSLabel`` keeps ``[a-z0-9]``, turns ``. / : -`` into ``-`` except at the first,
  the last and the 63rd character, stops after the 63rd, and trims ``-`` at both ends
  (crossplane-runtime pkg/xpkg/name.go).

Crossplane also parses a package's own source with strict validation (the registry must
be explicit: core's revision/dependency.go), and ``crossplane xpkg push`` wants a
semantic-version tag: both are checked here before anything is built.

The function never imports this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from function.__version__ import __version__

FUNCTION_PACKAGE = "function-cluster-plugin"
# The project's own home: what the committed apis/ files name (make generate). Nothing is
# published there yet; `make release REGISTRY=...` writes the packages for another.
HOME_REGISTRY = "xpkg.crossplane.io/function-cluster-plugin"
# Where `make release` puts the packages unless told otherwise: a registry on loopback.
LOCAL_REGISTRY = "localhost:5000/function-cluster-plugin"
# The providers the Compositions compose for, at the versions whose CRDs the tests
# validate against (tests/fixtures/crds/PROVENANCE.md), pinned exactly.
PROVIDER_REGISTRY = "xpkg.crossplane.io/crossplane-contrib"
PROVIDERS = (
    ("provider-helm", "v1.4.0"),
    ("provider-aws-s3", "v2.6.0"),
    ("provider-aws-iam", "v2.6.0"),
    ("provider-aws-ec2", "v2.6.0"),
    # The issuer behind CloudFront (spec.irsa.hosting): distributions, origin access
    # controls, and the optional Route 53 alias record.
    ("provider-aws-cloudfront", "v2.6.0"),
    ("provider-aws-route53", "v2.6.0"),
    # EKS: Pod Identity associations (irsa.mode PodIdentity).
    ("provider-aws-eks", "v2.6.0"),
)

DOCKER_HUB = "index.docker.io"
DNS_LABEL_MAX = 63
# A registry host[:port], and one path component as the OCI distribution spec has it
# (stricter than go-containerregistry's character set, as registries are). A tag is a
# semantic version without "+" (OCI tags cannot carry it).
_DNS_LABEL = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"
_HOST = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*(:\d{{1,5}})?$")
_COMPONENT = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$")
_VERSION = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")


class SourceError(ValueError):
    """A registry or version the packages cannot be published under; says which and why."""


def dns_label(text: str) -> str:
    """``xpkg.ToDNSLabel``: the object name Crossplane makes of a repository path."""
    out = []
    last = len(text) - 1
    for i, ch in enumerate(text):
        if ch.isascii() and (ch.islower() or ch.isdigit()):
            out.append(ch)
        if ch in "./:-" and i not in (0, DNS_LABEL_MAX - 1, last):
            out.append("-")
        if i == DNS_LABEL_MAX - 1:
            break
    return "".join(out).strip("-")


def split_reference(package: str) -> tuple[str, str]:
    """(registry host, repository path) of a package reference without tag or digest.

    As go-containerregistry's ``name.NewRepository`` reads it: the first component is the
    host when it is ``localhost`` or holds a ``.`` or ``:``, else the host is Docker Hub
    (``docker.io`` is Docker Hub too), where a one-component path gets ``library/``.
    """
    first, sep, rest = package.partition("/")
    if sep and (first == "localhost" or "." in first or ":" in first):
        host, path = first, rest
    else:
        host, path = DOCKER_HUB, package
    if host == "docker.io":
        host = DOCKER_HUB
    if host == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    return host, path


def object_name(package: str) -> str:
    """The name Crossplane gives a package it installs as a dependency."""
    return dns_label(split_reference(package)[1])


@dataclass(frozen=True)
class PackageSource:
    """The registry path and version one release is published under."""

    registry: str
    version: str

    def __post_init__(self) -> None:
        check_version(self.version)
        check_registry(self.registry)

    @property
    def tag(self) -> str:
        """The OCI tag of every package of the release (and the dependency version)."""
        return f"v{self.version}"

    @property
    def function_package(self) -> str:
        """The function package's reference without tag: what a Configuration depends on."""
        return f"{self.registry}/{FUNCTION_PACKAGE}"

    @property
    def function_name(self) -> str:
        """The Function's object name: the Compositions' ``functionRef.name``."""
        return object_name(self.function_package)

    def package(self, name: str) -> str:
        """The reference without tag of the release's package ``name``."""
        return f"{self.registry}/{name}"


def check_version(version: str) -> None:
    """Refuse a VERSION ``crossplane xpkg push`` and a dependency constraint cannot use."""
    if not _VERSION.match(version):
        hint = " (without the v: the tag is v<VERSION>)" if version.startswith("v") else ""
        msg = (
            f"VERSION {version!r}: want a semantic version MAJOR.MINOR.PATCH[-PRERELEASE], "
            f"e.g. 0.2.0{hint}"
        )
        raise SourceError(msg)


def check_registry(registry: str) -> None:
    """Refuse a REGISTRY Crossplane could not name the packages under."""
    want = (
        "want HOST[:PORT]/PATH, the registry host and the path the packages go under, "
        "e.g. ghcr.io/acme or localhost:5000/function-cluster-plugin"
    )
    host, sep, path = registry.partition("/")
    if not sep or not path:
        msg = f"REGISTRY {registry!r}: no path after the registry host; {want}"
        raise SourceError(msg)
    if not (host == "localhost" or "." in host or ":" in host):
        # Crossplane has no default registry and parses sources strictly: the host must be
        # explicit, or the first path component would be taken for Docker Hub's.
        msg = (
            f"REGISTRY {registry!r}: {host!r} is not a registry host (a host has a '.' or a "
            f"':' or is localhost); {want}"
        )
        raise SourceError(msg)
    if not _HOST.match(host):
        msg = (
            f"REGISTRY {registry!r}: {host!r} is not a registry host[:port] (lowercase DNS "
            f"name or IPv4 address); {want}"
        )
        raise SourceError(msg)
    bad = [part for part in path.split("/") if not _COMPONENT.match(part)]
    if bad:
        msg = (
            f"REGISTRY {registry!r}: path component {bad[0]!r} is not lowercase letters and "
            f"digits joined by '.', '_', '__' or '-'; {want}"
        )
        raise SourceError(msg)


# What the committed apis/ files name (make generate).
HOME_SOURCE = PackageSource(HOME_REGISTRY, __version__)
