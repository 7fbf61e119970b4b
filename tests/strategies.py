"""Hypothesis strategies and helpers shared by the property, fault, secret and soak tests.

Everything here builds plain dicts (XRs, step inputs, CAPI objects) that the tests
turn into RunFunctionRequests, directly or through ``function_tools.in_memory_crossplane.InMemoryCrossplane``.

Example counts come from the hypothesis profile named by ``HYPOTHESIS_PROFILE``:
``fast`` (the default run, a few seconds per test) or ``soak`` (``make soak``).
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from function import accept, compat, fn, policies
from function_tools.in_memory_crossplane import set_control_plane
from tests.kube_schema import validate, validate_values
from tests.scenarios import example

# cel-python (tests/kube_schema.py) sets the recursion limit to 2500 whenever it builds an
# environment; set it first, so hypothesis does not see it change inside a test.
sys.setrecursionlimit(2500)

# --- profiles -----------------------------------------------------------------

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "fast", max_examples=40, deadline=None, suppress_health_check=_HEALTH, print_blob=True
)
settings.register_profile(
    "soak", max_examples=2000, deadline=None, suppress_health_check=_HEALTH, print_blob=True
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "fast")
SOAK = PROFILE == "soak"


def profile(fast: int, soak: int) -> settings:
    """Settings of the active profile with this test's example count."""
    return settings(settings.get_profile(PROFILE), max_examples=soak if SOAK else fast)


# --- figures: what the tests exercised, printed at the end of the run -----------------

FIGURES: dict[str, Counter[str]] = defaultdict(Counter)


def figure(group: str, key: str, n: int = 1) -> None:
    """Count ``n`` more ``key`` under ``group`` (tests/soak/conftest.py prints them)."""
    FIGURES[group][key] += n


# --- a time bound on every call -----------------------------------------------

CALL_BOUND_S = 5.0  # a call takes milliseconds; anything near this is a hang


class CallTimeoutError(BaseException):
    """Raised inside a call that overran its bound (BaseException: no handler eats it)."""


@contextmanager
def time_bound(seconds: float = CALL_BOUND_S) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (SIGALRM; main thread only) and check its time."""
    use_alarm = threading.current_thread() is threading.main_thread()
    old: Any = None
    if use_alarm:

        def on_alarm(signum: int, frame: Any) -> None:
            msg = f"call did not return within {seconds}s"
            raise CallTimeoutError(msg)

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    elapsed = time.monotonic() - start
    if elapsed > seconds:
        msg = f"call took {elapsed:.2f}s (bound {seconds}s)"
        raise CallTimeoutError(msg)


@dataclass
class CountingRunner:
    """A InMemoryCrossplane runner: ``fn.run`` under a time bound, counting calls. Exceptions propagate."""

    calls: int = 0
    bound: float = CALL_BOUND_S
    inner: Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse] = fn.run
    last_request: fnv1.RunFunctionRequest | None = None

    def __call__(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        self.calls += 1
        self.last_request = fnv1.RunFunctionRequest.FromString(req.SerializeToString())
        with time_bound(self.bound):
            return self.inner(req)


def run_bounded(req: fnv1.RunFunctionRequest, now: float | None = None) -> fnv1.RunFunctionResponse:
    """``fn.run`` under the per-call time bound (``now``: the call's clock, default the wall's)."""
    with time_bound():
        return fn.run(req, now=now)


# --- names and values -----------------------------------------------------------

ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@st.composite
def dns_labels(draw: st.DrawFn, max_size: int = 63, *, long_bias: bool = True) -> str:
    """A Kubernetes name (DNS-1123 label), often close to ``max_size`` and hyphen-heavy."""
    if long_bias:
        size = draw(
            st.one_of(st.integers(1, 8), st.integers(max(1, max_size - 12), max_size))
        )
    else:
        size = draw(st.integers(1, min(12, max_size)))
    if size == 1:
        return draw(st.sampled_from(ALNUM))
    first = draw(st.sampled_from(ALNUM))
    last = draw(st.sampled_from(ALNUM))
    # Hyphens often, so truncation lands on them and '--' appears.
    middle = draw(st.text(alphabet=ALNUM + "-----", min_size=size - 2, max_size=size - 2))
    return first + middle + last


# Prefixes and suffixes S3 reserves (checked independently of function/spec.py).
S3_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
S3_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", "--x-s3", "--table-s3")


def s3_bucket_problems(name: str) -> list[str]:
    """Why S3 would refuse ``name`` as a bucket (or the issuer's TLS host would break)."""
    out = []
    if not 3 <= len(name) <= 63:
        out.append(f"length {len(name)} not in 3..63")
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*[a-z0-9]", name):
        out.append("characters")
    if "." in name:
        out.append("a dot breaks the virtual-hosted issuer's TLS certificate")
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        out.append("IP-address form")
    if name.startswith(S3_RESERVED_PREFIXES):
        out.append("reserved prefix")
    if name.endswith(S3_RESERVED_SUFFIXES):
        out.append("reserved suffix")
    return out


@st.composite
def bucket_names(draw: st.DrawFn) -> str:
    """A bucket name S3 accepts (and without dots)."""
    name = draw(dns_labels(max_size=63).filter(lambda n: len(n) >= 3))
    if s3_bucket_problems(name):
        name = "b" + name[1:]
    if s3_bucket_problems(name):
        return "bucket-" + hashlib.sha256(name.encode()).hexdigest()[:10]
    return name


@st.composite
def name_prefixes(draw: st.DrawFn) -> str:
    """An Input namePrefix (<= 20, lower-case, digits, '-'), never an S3-reserved prefix."""
    if draw(st.booleans()):
        return ""
    p = draw(dns_labels(max_size=19))
    p = p if draw(st.booleans()) else p + "-"
    if p.startswith(("xn-", "sthree", "amzn")):
        p = "p" + p[1:]
    return p[:20]


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**31), 2**31),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=12),
)


# Field names as a schema could have them. (The API server prunes unknown fields of an XR
# spec, so keys with spaces or newlines never reach the function as field names; inside Helm
# values any key goes.)
FIELD_NAMES = st.from_regex(r"\A[A-Za-z][A-Za-z0-9._-]{0,10}\Z")


def json_values(max_leaves: int = 6, keys: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[Any]:
    """Any JSON value (what a Kubernetes object can hold: no NaN, no infinities)."""
    key_st = keys if keys is not None else st.text(min_size=1, max_size=8)
    return st.recursive(
        JSON_SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(key_st, inner, max_size=3),
        ),
        max_leaves=max_leaves,
    )


ODD_VALUES = st.one_of(
    json_values(4),
    st.sampled_from(
        ["True", "False", "Unknown", "", "true", "yes", "0.0.0.0/0", "-1", "sg-", "us-east-1", "x" * 300]
    ),
)

CHART_VERSIONS = st.one_of(
    st.sampled_from(["1.22.4", "v3.32.1", "2.64.0", "4.4.1", "3.5.0", "0.0.1", "10.20.30-rc.1"]),
    st.builds(lambda a, b, c: f"{a}.{b}.{c}", *(st.integers(0, 99),) * 3),
)
# The examples' clusters (every drawn cluster is made from them) run Kubernetes 1.33.
CLUSTER_MINOR = (1, 33)
# A pin the add-on documents for other minors only is refused (tests/test_refusals.py); a version
# the compatibility table does not know is not judged.
ADDON_CHARTS = {
    "vpcCni": "aws-vpc-cni",
    "calico": "tigera-operator",
    "ebs": "aws-ebs-csi-driver",
    "efs": "aws-efs-csi-driver",
    "lbc": "aws-load-balancer-controller",
    "loadBalancerController": "aws-load-balancer-controller",
}


def _runs_on_the_cluster(chart: str) -> Callable[[str], bool]:
    def ok(version: str) -> bool:
        documented = compat.supported(chart, version)
        return documented is None or CLUSTER_MINOR in documented

    return ok


def chart_versions(key: str) -> st.SearchStrategy[str]:
    """Versions a valid spec may pin for the add-on (or Input chart) ``key``."""
    chart = ADDON_CHARTS.get(key)
    if chart == "aws-load-balancer-controller":
        # Its IAM policy goes with its chart version: only the versions the function has a
        # policy for are accepted.
        return st.sampled_from([v for v in policies.lbc_chart_versions() if _runs_on_the_cluster(chart)(v)])
    return CHART_VERSIONS if chart is None else CHART_VERSIONS.filter(_runs_on_the_cluster(chart))


REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2", "cn-north-1", "us-gov-west-1"]
PARTITION = {"cn-north-1": "aws-cn", "us-gov-west-1": "aws-us-gov"}

# User Helm values that every chart accepts (three charts validate values strictly).
SAFE_VALUES: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "ebs": st.sampled_from(
        [
            {},
            {"controller": {"replicaCount": 3}},
            {"node": {"tolerateAllTaints": True}},
            {"controller": {"replicaCount": 1}, "node": {"tolerateAllTaints": False}},
        ]
    ),
}


def _free_values() -> st.SearchStrategy[dict[str, Any]]:
    # Keys the function never owns, any JSON below them.
    return st.dictionaries(
        st.sampled_from(["extraEnv", "resources", "nodeSelector", "tolerations", "podLabels"]),
        json_values(4),
        max_size=2,
    )


@st.composite
def addon(draw: st.DrawFn, key: str) -> dict[str, Any]:
    """One add-on block: optional version and values."""
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["version"] = draw(chart_versions(key))
    values = draw(SAFE_VALUES.get(key, _free_values()))
    if values or draw(st.booleans()):
        out["values"] = values
    return out


@st.composite
def external_irsa(draw: st.DrawFn) -> dict[str, Any]:
    """IRSA mode External with an issuer and the matching provider ARN."""
    region = draw(st.sampled_from(REGIONS))
    partition = PARTITION.get(region, "aws")
    host = draw(
        st.sampled_from(
            [
                f"oidc.eks.{region}.amazonaws.com/id/" + "0123456789ABCDEF" * 2,
                "issuer.example.com",
                "issuer.example.com/tenants/a",
            ]
        )
    )
    account = draw(st.from_regex(r"\A\d{12}\Z"))
    trailing = draw(st.sampled_from(["", "/"]))
    return {
        "mode": "External",
        "issuerURL": f"https://{host}{trailing}",
        "oidcProviderARN": f"arn:{partition}:iam::{account}:oidc-provider/{host}",
    }


@st.composite
def irsa_blocks(draw: st.DrawFn) -> dict[str, Any] | None:
    """The spec.irsa block (None: defaulted)."""
    mode = draw(st.sampled_from(["default", "SelfHosted", "External", "PodIdentity", "Disabled"]))
    if mode == "default":
        return None
    if mode == "External":
        # Left out, the issuer is the EKS control plane's (tests/test_property.py cases()).
        return {"mode": "External"} if draw(st.integers(0, 2)) == 0 else draw(external_irsa())
    out: dict[str, Any] = {"mode": mode}
    if mode == "SelfHosted":
        if draw(st.integers(0, 3)) == 0:
            out["bucketName"] = draw(bucket_names())
        if draw(st.booleans()):
            out["podIdentityWebhook"] = {
                "install": draw(st.booleans()),
                "certManager": draw(st.sampled_from(["Install", "Existing"])),
            }
        hosting = draw(hosting_blocks())
        if hosting is not None:
            out["hosting"] = hosting
            if hosting.get("cloudFront", {}).get("distribution") == "Shared":
                out.pop("bucketName", None)  # the documents go to the platform team's bucket
    return out


CERTIFICATE = "arn:aws:acm:us-east-1:111122223333:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


@st.composite
def hosting_blocks(draw: st.DrawFn) -> dict[str, Any] | None:
    """spec.irsa.hosting (None: left out; the rest of the time mostly S3Public)."""
    kind = draw(st.sampled_from(["none", "none", "S3Public", "Shared", "Managed"]))
    if kind == "none":
        return None
    if kind == "S3Public":
        return {"type": "S3Public"}
    cloud_front: dict[str, Any] = {
        "distribution": kind,
        "domain": draw(st.sampled_from(["oidc.example.com", "issuers.eu.example.org"])),
    }
    if kind == "Shared":
        cloud_front["bucketName"] = draw(st.sampled_from(["acme-oidc", "platform-issuers-1"]))
        if draw(st.booleans()):
            cloud_front["bucketRegion"] = draw(st.sampled_from(["us-east-1", "eu-west-1"]))
    else:
        cloud_front["certificateArn"] = CERTIFICATE
        if draw(st.booleans()):
            cloud_front["hostedZoneId"] = "Z0123456789ABC"
        if draw(st.booleans()):
            cloud_front["pathPrefix"] = draw(st.sampled_from(["issuers", "k8s/prod_1", "a.b/c~d"]))
        if draw(st.booleans()):
            cloud_front["priceClass"] = draw(st.sampled_from(["PriceClass_100", "PriceClass_All"]))
    return {"type": "CloudFront", "cloudFront": cloud_front}


@st.composite
def specs(draw: st.DrawFn, cluster_name: str) -> dict[str, Any]:
    """A valid XR spec for ``cluster_name``."""
    spec: dict[str, Any] = {"clusterName": cluster_name}
    if draw(st.booleans()):
        spec["region"] = draw(st.sampled_from(REGIONS))
    cni = draw(st.sampled_from(["none", "amazonVPC", "calico"]))
    if cni == "amazonVPC":
        spec["networking"] = {"amazonVPC": draw(addon("vpcCni"))}
    elif cni == "calico":
        calico = draw(addon("calico"))
        if draw(st.booleans()):
            calico["encapsulation"] = draw(st.sampled_from(["IPIP", "VXLAN", "None"]))
        if draw(st.integers(0, 3)) == 0:
            calico["cidr"] = draw(st.sampled_from(["192.168.0.0/16", "10.244.0.0/16", "100.64.0.0/10"]))
        spec["networking"] = {"calico": calico}
    storage: dict[str, Any] = {}
    if draw(st.booleans()):
        ebs = draw(addon("ebs"))
        if draw(st.booleans()):
            ebs["defaultStorageClass"] = draw(st.booleans())
        storage["ebs"] = ebs
    if draw(st.booleans()):
        efs = draw(addon("efs"))
        if draw(st.booleans()):
            efs["fileSystemId"] = "fs-" + draw(st.text(alphabet="0123456789abcdef", min_size=8, max_size=17))
        storage["efs"] = efs
    if storage:
        spec["storage"] = storage
    if draw(st.booleans()):
        spec["ingress"] = {"awsLoadBalancerController": draw(addon("lbc"))}
    irsa = draw(irsa_blocks())
    if irsa is not None:
        spec["irsa"] = irsa
    if draw(st.booleans()):
        spec["securityGroups"] = {"manage": draw(st.sampled_from(["Auto", "Always", "Never"]))}
    # Crossplane's own machinery fields are not the function's to judge.
    if draw(st.booleans()):
        spec["crossplane"] = {"compositionRef": {"name": "clusterplugins.clusterplugin.dev"}}
    if draw(st.booleans()):
        spec["resourceRefs"] = [{"apiVersion": "v1", "kind": "X", "name": "y"}]
    return spec


@st.composite
def step_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid step input (often defaulted)."""
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out = {"apiVersion": "fn.clusterplugin.dev/v1alpha1", "kind": "Input"}
    prefix = draw(name_prefixes())
    if prefix:
        out["namePrefix"] = prefix
    if draw(st.booleans()):
        waiting = draw(st.integers(1, 600))
        ready = draw(st.integers(waiting, 86400))
        as_text = draw(st.booleans())
        out["ttl"] = {
            "waiting": f"{waiting}s" if as_text else waiting,
            "ready": f"{ready // 60}m{ready % 60}s" if as_text and ready >= 60 else ready,
        }
    if draw(st.booleans()):
        out["awsProviderConfig"] = {
            "name": draw(dns_labels(max_size=30, long_bias=False)),
            "kind": draw(st.sampled_from(["ProviderConfig", "ClusterProviderConfig"])),
        }
    if draw(st.booleans()):
        chart = draw(st.sampled_from(["ebs", "efs", "vpcCni", "loadBalancerController", "calico"]))
        src: dict[str, Any] = {
            "repository": draw(
                st.sampled_from(
                    ["https://charts.example.com/", "oci://registry.example.com/charts", "http://mirror.local"]
                )
            ),
            "name": "chart-" + chart.lower(),
            "version": draw(chart_versions(chart)),
        }
        if draw(st.booleans()):
            src["pullSecretRef"] = {"name": "registry", "namespace": "crossplane-system"}
        out["charts"] = {chart: src}
    return out


# --- XRs ------------------------------------------------------------------------

XR_KINDS = ("namespaced", "legacy-claim", "legacy-xr")


def make_xr(xr_kind: str, namespace: str, spec: dict[str, Any], name: str = "xp") -> dict[str, Any]:
    """A ClusterPlugin (namespaced), or an XClusterPlugin made for a claim or on its own."""
    spec = copy.deepcopy(spec)
    if xr_kind == "namespaced":
        return {
            "apiVersion": "clusterplugin.dev/v1alpha1",
            "kind": "ClusterPlugin",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    meta: dict[str, Any] = {"name": f"{name}-x7k2p"}
    if xr_kind == "legacy-claim":
        meta["labels"] = {
            "crossplane.io/claim-name": name,
            "crossplane.io/claim-namespace": namespace,
            "crossplane.io/composite": f"{name}-x7k2p",
        }
        spec["claimRef"] = {
            "apiVersion": "clusterplugin.dev/v1alpha1",
            "kind": "ClusterPlugin",
            "name": name,
            "namespace": namespace,
        }
    else:
        spec["clusterNamespace"] = namespace
    return {"apiVersion": "clusterplugin.dev/v1alpha1", "kind": "XClusterPlugin", "metadata": meta, "spec": spec}


# --- CAPI objects ----------------------------------------------------------------

FLAVOURS = ("kubeadm", "kubeadm-v1beta1", "eks")
_BASE = {"kubeadm": "selfhosted-full", "kubeadm-v1beta1": "calico-legacy-claim", "eks": "external-eks"}
CP_KINDS = {"KubeadmControlPlane", "AWSManagedControlPlane"}
INFRA_KINDS = {"AWSCluster", "AWSManagedCluster"}
CAPI_LABEL = "cluster.x-k8s.io/cluster-name"
_REF_VERSIONS = {
    "KubeadmControlPlane": "controlplane.cluster.x-k8s.io/v1beta1",
    "AWSManagedControlPlane": "controlplane.cluster.x-k8s.io/v1beta2",
    "AWSCluster": "infrastructure.cluster.x-k8s.io/v1beta2",
    "AWSManagedCluster": "infrastructure.cluster.x-k8s.io/v1beta2",
}


@functools.cache
def _example_objects(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(example(name)[1])


def _sa_secret() -> dict[str, Any]:
    return next(o for o in _example_objects("selfhosted-full") if o["kind"] == "Secret")


def cluster_objects(flavour: str, cluster: str, namespace: str) -> list[dict[str, Any]]:
    """The Cluster, control plane, infrastructure object and ``<cluster>-sa`` of one cluster.

    Built from the examples' fixtures, renamed to ``namespace/cluster``.
    """
    objs = copy.deepcopy(list(_example_objects(_BASE[flavour])))
    if not any(o["kind"] == "Secret" for o in objs):
        objs.append(copy.deepcopy(_sa_secret()))
    cp_name = f"{cluster}-control-plane"
    for o in objs:
        meta = o["metadata"]
        meta["namespace"] = namespace
        kind = o["kind"]
        if kind == "Cluster":
            meta["name"] = cluster
            for ref_key, name in (("controlPlaneRef", cp_name), ("infrastructureRef", cluster)):
                ref = o["spec"][ref_key]
                ref["name"] = name
                if "namespace" in ref:
                    ref["namespace"] = namespace
        else:
            meta["name"] = {"Secret": f"{cluster}-sa"}.get(kind, cp_name if kind in CP_KINDS else cluster)
            meta.setdefault("labels", {})[CAPI_LABEL] = cluster
        if kind == "AWSManagedControlPlane":
            o["spec"]["eksClusterName"] = cluster
    return objs


def cluster_to(obj: dict[str, Any], version: str) -> None:
    """Reshape a CAPI Cluster to the v1beta1 or v1beta2 contract."""
    obj["apiVersion"] = f"cluster.x-k8s.io/{version}"
    ns = obj["metadata"]["namespace"]
    for key in ("controlPlaneRef", "infrastructureRef"):
        ref = obj["spec"][key]
        kind, name = ref["kind"], ref["name"]
        if version == "v1beta1":
            obj["spec"][key] = {"apiVersion": _REF_VERSIONS[kind], "kind": kind, "name": name, "namespace": ns}
        else:
            group = _REF_VERSIONS[kind].split("/")[0]
            obj["spec"][key] = {"apiGroup": group, "kind": kind, "name": name}
    status = obj.setdefault("status", {})
    if version == "v1beta1":
        status.pop("initialization", None)
        status.update(infrastructureReady=True, controlPlaneReady=True)
    else:
        status.pop("infrastructureReady", None)
        status.pop("controlPlaneReady", None)
        status["initialization"] = {"infrastructureProvisioned": True, "controlPlaneInitialized": True}


def control_plane_to(obj: dict[str, Any], version: str, *, initialized: bool, available: bool) -> None:
    """Reshape a KubeadmControlPlane to v1beta1 or v1beta2 status, in the given state."""
    if obj["kind"] == "KubeadmControlPlane":
        obj["apiVersion"] = f"controlplane.cluster.x-k8s.io/{version}"
        status = obj.setdefault("status", {})
        for key in ("initialization", "initialized", "ready", "conditions", "v1beta2"):
            status.pop(key, None)
    set_control_plane(obj, initialized=initialized, available=available)


@st.composite
def cluster_shapes(draw: st.DrawFn, flavour: str, cluster: str, namespace: str) -> list[dict[str, Any]]:
    """The cluster's objects with each one's contract version drawn independently."""
    objs = cluster_objects(flavour, cluster, namespace)
    for o in objs:
        if o["kind"] == "Cluster":
            cluster_to(o, draw(st.sampled_from(["v1beta1", "v1beta2"])))
        elif o["kind"] == "KubeadmControlPlane":
            control_plane_to(o, draw(st.sampled_from(["v1beta1", "v1beta2"])), initialized=True, available=True)
            if draw(st.integers(0, 4)) == 0:
                # A v1beta1 object that already carries the new-style conditions.
                o["status"]["v1beta2"] = {
                    "conditions": [{"type": "Available", "status": "True"}, {"type": "Initialized", "status": "True"}]
                }
    # A v1beta1 Cluster's ref names the version the control plane is read in: the InMemoryCrossplane,
    # like `crossplane render`, holds each object in one version only.
    cluster = next(o for o in objs if o["kind"] == "Cluster")
    ref = cluster["spec"]["controlPlaneRef"]
    control_plane = next(o for o in objs if o["kind"] == ref["kind"])
    if "apiVersion" in ref:
        ref["apiVersion"] = control_plane["apiVersion"]
    return objs


def cluster_api_input(objs: list[dict[str, Any]]) -> dict[str, str]:
    """``Input.clusterAPI`` asking for the Cluster and KubeadmControlPlane in the versions they are in.

    What a user whose CAPI serves only those versions configures: the InMemoryCrossplane hands an
    object over only in the exact version asked for.
    """
    fields = {"Cluster": "cluster", "KubeadmControlPlane": "kubeadmControlPlane"}
    return {fields[o["kind"]]: o["apiVersion"] for o in objs if o["kind"] in fields}


# --- generic JSON mutations of CAPI objects -------------------------------------

JsonPath = tuple[Any, ...]


def json_paths(obj: Any, prefix: JsonPath = ()) -> list[JsonPath]:
    """Every path below ``obj`` (dict keys and list indices), parents before children."""
    out: list[JsonPath] = []
    if isinstance(obj, dict):
        for k in sorted(obj):
            out.append((*prefix, k))
            out += json_paths(obj[k], (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.append((*prefix, i))
            out += json_paths(v, (*prefix, i))
    return out


def _mutable(path: JsonPath) -> bool:
    # Kubernetes guarantees metadata's shape, and the in-memory InMemoryCrossplane relies on it.
    return bool(path) and path[0] not in {"metadata", "apiVersion", "kind"}


@dataclass(frozen=True)
class Mutation:
    """One change to one CAPI object: delete or replace the node at a path."""

    obj_index: int
    path_index: int
    op: str  # "delete" | "replace" | "condition"
    value: Any = None

    def apply(self, objs: list[dict[str, Any]]) -> str:
        """Apply to ``objs`` in place; describe what was done."""
        obj = objs[self.obj_index % len(objs)]
        if self.op == "condition":
            # An earlier mutation may have replaced a list with null or a scalar.
            lists = [_get(obj, p, []) for p in (("status", "conditions"), ("status", "v1beta2", "conditions"))]
            conds = [c for lst in lists if isinstance(lst, list) for c in lst if isinstance(c, dict)]
            if not conds:
                return "no conditions"
            c = conds[self.path_index % len(conds)]
            c["status"] = self.value
            return f"{obj['kind']} condition {c.get('type')} status={self.value!r}"
        paths = [p for p in json_paths(obj) if _mutable(p)]
        if not paths:
            return "nothing to mutate"
        path = paths[self.path_index % len(paths)]
        parent = _get(obj, path[:-1], None)
        if self.op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(self.value)
        return f"{obj['kind']} {self.op} {'.'.join(map(str, path))}"


def _get(obj: Any, path: JsonPath, default: Any) -> Any:
    for p in path:
        try:
            obj = obj[p]
        except (KeyError, IndexError, TypeError):
            return default
    return obj


def mutations(max_size: int = 6) -> st.SearchStrategy[list[Mutation]]:
    """Lists of mutations: missing fields, odd types, odd condition statuses."""
    one = st.one_of(
        st.builds(Mutation, st.integers(0, 99), st.integers(0, 10**6), st.just("delete")),
        st.builds(Mutation, st.integers(0, 99), st.integers(0, 10**6), st.just("replace"), ODD_VALUES),
        st.builds(
            Mutation,
            st.integers(0, 99),
            st.integers(0, 99),
            st.just("condition"),
            st.sampled_from(["True", "False", "Unknown", "", "true", None, 1]),
        ),
    )
    return st.lists(one, min_size=1, max_size=max_size)


# --- checking a response ---------------------------------------------------------

STRICT_CHARTS = {
    "aws-ebs-csi-driver": "aws-ebs-csi-driver",
    "pod-identity-webhook": "amazon-eks-pod-identity-webhook",
    "cert-manager": "cert-manager",
}
EXTERNAL_NAME = "crossplane.io/external-name"
LIMITS = {"Release": 53, "Role": 64, "Bucket": 63, "Policy": 128}
IAM_NAME = re.compile(r"^[\w+=,.@-]+$")
HELM_RELEASE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# "spec." or "input." then a non-empty field path, ": ", and what is wrong.
FATAL_MESSAGE = re.compile(r"^(spec|input)\.[^:\s][^\n]*?: \S")


def name_problems(body: dict[str, Any]) -> list[str]:
    """Names past their limits, or in a form the target system refuses."""
    kind = body.get("kind", "")
    meta = body.get("metadata", {})
    ext = meta.get("annotations", {}).get(EXTERNAL_NAME)
    out = []
    if kind in LIMITS:
        if not ext:
            out.append(f"{kind} has no external name")
        elif len(ext) > LIMITS[kind]:
            out.append(f"{kind} external name {ext!r} has {len(ext)} > {LIMITS[kind]} characters")
    if kind == "Release" and ext and not HELM_RELEASE.match(ext):
        out.append(f"Release name {ext!r} is not a Helm release name")
    if kind in {"Role", "Policy"} and ext and not IAM_NAME.match(ext):
        out.append(f"{kind} name {ext!r} has characters IAM refuses")
    if kind == "Bucket" and ext:
        out += [f"bucket {ext!r}: {p}" for p in s3_bucket_problems(ext)]
    fp = body.get("spec", {}).get("forProvider", {})
    if isinstance(fp.get("bucket"), str):
        out += [f"{kind}.bucket {fp['bucket']!r}: {p}" for p in s3_bucket_problems(fp["bucket"])]
    if kind == "RolePolicyAttachment" and len(fp.get("role", "")) > 64:
        out.append(f"attachment role {fp['role']!r} longer than 64")
    if kind == "ProviderConfig":
        name = meta.get("name", "")
        if len(name) > 63 or not DNS_LABEL.match(name):
            out.append(f"helm ProviderConfig name {name!r} is not a 63-character DNS label")
    return out


@dataclass
class Checker:
    """Validates desired resources (CRD schema, chart values, names), each distinct body once."""

    seen: dict[str, list[str]] = field(default_factory=dict)
    validated: int = 0

    def body_errors(self, name: str, body: dict[str, Any]) -> list[str]:
        """Problems of one desired body."""
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if key not in self.seen:
            errs = validate(body) + name_problems(body)
            if body.get("kind") == "Release":
                chart = STRICT_CHARTS.get(body.get("metadata", {}).get("annotations", {}).get(EXTERNAL_NAME, ""))
                if chart:
                    errs += [f"values: {e}" for e in validate_values(chart, body["spec"]["forProvider"]["values"])]
            self.seen[key] = errs
            self.validated += 1
            if len(self.seen) > 50_000:
                self.seen.clear()
        return [f"{name}: {e}" for e in self.seen[key]]

    def response_errors(self, rsp: fnv1.RunFunctionResponse) -> list[str]:
        """Problems of every desired composed resource of a response."""
        out = []
        for name, r in sorted(rsp.desired.resources.items()):
            out += self.body_errors(name, resource.struct_to_dict(r.resource))
        return out


def fatal_results(rsp: fnv1.RunFunctionResponse) -> list[fnv1.Result]:
    """The FATAL results of a response."""
    return [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def same_bytes_again(
    req: fnv1.RunFunctionRequest, first: fnv1.RunFunctionResponse, now: float | None = None
) -> list[str]:
    """Run ``req`` again, fresh (re-parsed, parse cache cleared) and warm: byte-identical answers.

    ``now``: the clock ``first`` was answered at. A day-two answer carries times (a soak's end,
    when to call again): on the wall clock two runs a second apart may differ for that alone.
    """
    want = first.SerializeToString(deterministic=True)
    out = []
    fresh = fnv1.RunFunctionRequest.FromString(req.SerializeToString(deterministic=True))
    accept.cache_clear()  # the answer must not depend on the cache
    for label, r in (("fresh", fresh), ("warm", req)):
        got = run_bounded(r, now).SerializeToString(deterministic=True)
        if got != want:
            out.append(f"{label} rerun differs from the first answer")
    return out


def b64(text: str) -> str:
    """Base64 of UTF-8 text."""
    return base64.b64encode(text.encode()).decode()


# --- the real server, as a subprocess --------------------------------------------

RUN_FUNCTION = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
RUN_FUNCTION_BETA = "/apiextensions.fn.proto.v1beta1.FunctionRunnerService/RunFunction"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """A running ``function-cluster-plugin serve`` and where its output goes."""

    proc: subprocess.Popen[bytes]
    address: str
    log_path: Path

    def log(self) -> str:
        """Everything the server printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc.poll() is None


def _command() -> list[str]:
    script = Path(sys.executable).with_name("function-cluster-plugin")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "function_tools.cli"]


@contextmanager
def serve(*args: str, startup_s: float = 30.0) -> Iterator[Served]:
    """Run ``function-cluster-plugin serve --address 127.0.0.1:<port> ARGS``; stop it after."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "serve.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [*_command(), "serve", "--address", address, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        served = Served(proc, address, log_path)
        try:
            deadline = time.monotonic() + startup_s
            while True:
                if proc.poll() is not None:
                    msg = f"serve exited with {proc.returncode}: {served.log()}"
                    raise RuntimeError(msg)
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield served
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


def converged_request(name: str = "selfhosted-full", steps: int = 8) -> fnv1.RunFunctionRequest:
    """A realistic request: the scenario ``name`` after ``steps`` reconciles, requirements filled."""
    from tests.scenarios import by_name  # keep import cycles out

    world = by_name(name).world(staged=False)
    world.run(steps)
    req = world.request()
    world._fill(req, fn.run(req))
    return req


def tagged_requests(calls: int, junk: int) -> list[bytes]:
    """``calls`` requests that each take a few ms and log their tag when the function runs."""
    make = tagged_request(junk)
    return [make(i) for i in range(calls)]


def tagged_request(junk: int) -> Callable[[int], bytes]:
    """What makes request ``i`` of ``tagged_requests`` (one at a time: a burst of unknown length)."""
    req = converged_request("selfhosted-full", 8)
    for i in range(junk):
        req.observed.resources[f"junk-{i}"].resource.update(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"j{i}"}, "data": {"k": "v" * 40}}
        )
    # Stale recorded plugin phases: every call emits transition results, logged with its tag.
    req.observed.composite.resource.fields["status"].struct_value.Clear()

    def make(i: int) -> bytes:
        req.meta.tag = f"call-{i}"
        return req.SerializeToString()

    return make
