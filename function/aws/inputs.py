"""What ``aws preflight`` checks against: the XR, the step input and required fixtures.

The same facts the function reads from Crossplane (DESIGN section 3) are read
here from YAML files: the XR, the optional step ``Input`` (for ``namePrefix``)
and, with ``--required``, the Cluster API objects and the ``<cluster>-sa``
Secret. Only the public key (``tls.crt``) of that Secret is ever decoded.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import resource

from function.fn import cluster_namespace
from function.names import Names, Partition, partition_of
from function.spec import ClusterPluginSpec, InvalidInputError, IRSAMode, parse_input, parse_spec

CLUSTER_TAG = "clusterplugin.dev/cluster"
YAML_SUFFIXES = (".yaml", ".yml", ".json")
EKS_KINDS = frozenset({"AWSManagedControlPlane", "AWSManagedCluster"})


class InputError(ValueError):
    """The files given to ``aws preflight`` cannot be used (bad XR, no namespace...)."""


def load_documents(path: Path) -> list[dict[str, Any]]:
    """Every YAML/JSON object in ``path`` (multi-document files allowed)."""
    try:
        docs = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as err:
        msg = f"{path}: {err}"
        raise InputError(msg) from err
    return [d for d in docs if isinstance(d, dict)]


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for p in paths:
        if p.is_dir():
            yield from sorted(f for f in p.iterdir() if f.is_file() and f.suffix in YAML_SUFFIXES)
        else:
            yield p


def load_all(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """All objects in the given files and directories (directories: *.yaml, *.yml, *.json)."""
    out: list[dict[str, Any]] = []
    for f in _files(paths):
        out += load_documents(f)
    return out


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _str(obj: Any, *path: str) -> str | None:
    v = _get(obj, *path)
    return v if isinstance(v, str) and v else None


def xr_namespace(xr: dict[str, Any], spec: ClusterPluginSpec) -> str:
    """The cluster's namespace, by the function's own rule (``fn.cluster_namespace``)."""
    return cluster_namespace(resource.dict_to_struct(xr), spec)[0]


def find(
    docs: Iterable[dict[str, Any]], kind: str, namespace: str, name: str | None = None
) -> dict[str, Any] | None:
    """The first object of ``kind`` in ``namespace`` (and named ``name``, if given)."""
    for d in docs:
        if d.get("kind") != kind:
            continue
        ns = _str(d, "metadata", "namespace")
        if ns is not None and ns != namespace:
            continue
        if name is not None and _str(d, "metadata", "name") != name:
            continue
        return d
    return None


def public_key_from_secret(secret: dict[str, Any]) -> bytes:
    """The PEM public key in ``data["tls.crt"]`` of CAPI's ``<cluster>-sa`` Secret."""
    encoded = _str(secret, "data", "tls.crt")
    if encoded is None:
        # stringData is what a hand-written fixture may use; tls.key is never read.
        plain = _str(secret, "stringData", "tls.crt")
        if plain is not None:
            return plain.encode()
        msg = "the Secret has no data key tls.crt"
        raise InputError(msg)
    try:
        pem = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as err:
        msg = "data[tls.crt] is not valid base64"
        raise InputError(msg) from err
    if b"-----BEGIN " not in pem:
        msg = "data[tls.crt] is not PEM"
        raise InputError(msg)
    return pem


def _group_ids(infra: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    managed: dict[str, str] = {}
    groups = _get(infra, "status", "networkStatus", "securityGroups")
    if isinstance(groups, dict):
        for role, sg in groups.items():
            sg_id = _str(sg, "id")
            if sg_id:
                managed[role] = sg_id
    overrides: dict[str, str] = {}
    ov = _get(infra, "spec", "network", "securityGroupOverrides")
    if isinstance(ov, dict):
        overrides = {role: v for role, v in ov.items() if isinstance(v, str) and v}
    # A group named in securityGroupOverrides is the user's, not CAPA's.
    managed = {role: v for role, v in managed.items() if role not in overrides}
    return managed, overrides


@dataclass(frozen=True)
class Target:
    """Everything the function would compose for one ClusterPlugin, as preflight sees it."""

    spec: ClusterPluginSpec
    namespace: str
    region: str
    names: Names
    public_pem: bytes | None = None
    # Where the public key came from (a file, or Secret ns/name), for messages.
    key_source: str = ""
    key_problem: str | None = None
    infrastructure_found: bool = False
    eks: bool = False
    # role -> security-group id, as in function.cluster.ClusterFacts
    sg_managed: dict[str, str] = field(default_factory=dict)
    sg_overrides: dict[str, str] = field(default_factory=dict)
    awscluster_name: str = ""
    # CAPA's aws.cluster.x-k8s.io/external-resource-gc annotation on the AWSCluster or
    # AWSManagedControlPlane ("false" turns the garbage collection off); None: no such object.
    external_resource_gc: str | None = None

    @property
    def cluster(self) -> str:
        """The CAPI cluster name."""
        return self.spec.cluster_name

    @property
    def partition(self) -> Partition:
        """The region's partition."""
        return partition_of(self.region)

    @property
    def owner_tag(self) -> str:
        """The value of the ``clusterplugin.dev/cluster`` tag on everything composed."""
        return f"{self.namespace}/{self.cluster}"

    @property
    def issuer_url(self) -> str:
        """The issuer URL (SelfHosted: derived; External: given)."""
        if self.spec.irsa.mode is IRSAMode.EXTERNAL:
            return self.spec.irsa.issuer_url.rstrip("/")
        return self.names.issuer_url(self.region)

    @property
    def issuer_host_path(self) -> str:
        """The issuer without its scheme, as IAM condition keys and OIDC provider ARNs spell it."""
        return self.issuer_url.removeprefix("https://")


def build_target(
    xr: dict[str, Any],
    *,
    required: list[dict[str, Any]] | None = None,
    step_input: dict[str, Any] | None = None,
    region: str | None = None,
    public_key: bytes | None = None,
    public_key_source: str = "",
) -> Target:
    """The preflight target for an XR plus optional fixtures, flags and key.

    Args:
        xr: The ClusterPlugin (or legacy XClusterPlugin) object.
        required: Objects Crossplane would hand the function (Cluster API
            objects, the ``<cluster>-sa`` Secret).
        step_input: The step's ``Input`` object (for ``namePrefix``).
        region: A fallback when neither spec.region nor the AWSCluster has one.
        public_key: The service-account public key (PEM), overriding the Secret.
        public_key_source: Where ``public_key`` came from, for messages.

    Returns:
        The target.

    Raises:
        InputError: the XR or input is invalid, or namespace or region are unknown.
    """
    try:
        spec = parse_spec(_get(xr, "spec") or {})
        step = parse_input(step_input)
        namespace = xr_namespace(xr, spec)
    except InvalidInputError as err:
        raise InputError(str(err)) from err
    docs = required or []
    infra = find(docs, "AWSCluster", namespace, spec.cluster_name) or find(
        docs, "AWSCluster", namespace
    )
    managed_infra = find(docs, "AWSManagedCluster", namespace)
    control_plane = find(docs, "AWSManagedControlPlane", namespace)
    region = (
        spec.region
        or region
        or _str(infra, "spec", "region")
        or _str(control_plane, "spec", "region")
    )
    if not region:
        msg = "no region: set spec.region, pass --region, or give the AWSCluster with --required"
        raise InputError(msg)

    names = Names(step.name_prefix, namespace, spec.cluster_name, spec.irsa.bucket_name)
    key_problem = None
    key_source = public_key_source
    if public_key is None:
        secret = find(docs, "Secret", namespace, names.sa_secret)
        if secret is not None:
            key_source = f"Secret {namespace}/{names.sa_secret}"
            try:
                public_key = public_key_from_secret(secret)
            except InputError as err:
                key_problem = f"{key_source}: {err}"

    managed: dict[str, str] = {}
    overrides: dict[str, str] = {}
    if infra is not None:
        managed, overrides = _group_ids(infra)
    return Target(
        spec=spec,
        namespace=namespace,
        region=region,
        names=names,
        public_pem=public_key,
        key_source=key_source,
        key_problem=key_problem,
        infrastructure_found=infra is not None or managed_infra is not None,
        eks=managed_infra is not None or control_plane is not None,
        sg_managed=managed,
        sg_overrides=overrides,
        awscluster_name=_str(infra, "metadata", "name") or spec.cluster_name,
        external_resource_gc=_external_resource_gc(infra or control_plane),
    )


EXTERNAL_RESOURCE_GC = "aws.cluster.x-k8s.io/external-resource-gc"


def _external_resource_gc(obj: dict[str, Any] | None) -> str | None:
    if obj is None:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(EXTERNAL_RESOURCE_GC, ""))
