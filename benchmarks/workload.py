"""The requests the benchmarks send, built with function_tools.in_memory_crossplane.

Everything here is deterministic: the same code always builds byte-identical
requests. ``InMemoryCrossplane`` plays the example until it converges; the observed state it
reports is then made realistic in size (what upjet, provider-helm and the API
server add to a composed resource: metadata, finalizers, owner references,
``status.atProvider`` echoing ``spec.forProvider`` plus ids, ARNs and
``tagsAll``, conditions with timestamps), roughly 3 KB per managed resource.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function_tools.in_memory_crossplane import InMemoryCrossplane
from function_tools.input_files import step_from_composition
from function_tools.resolve import MAX_REQUIREMENT_ITERATIONS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "selfhosted-full"
COMPOSITION = ROOT / "apis" / "v2" / "composition.yaml"
TIMESTAMP = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:07:31Z"


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@functools.lru_cache(maxsize=1)
def _example() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    xr = _load(EXAMPLE / "xr.yaml")
    required = [_load(p) for p in sorted((EXAMPLE / "required").glob("*.yaml"))]
    return xr, required


def example() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(XR, required Cluster API objects) of examples/selfhosted-full (fresh copies)."""
    return copy.deepcopy(_example())


@functools.lru_cache(maxsize=1)
def _step_input() -> dict[str, Any]:
    docs = list(yaml.safe_load_all(COMPOSITION.read_text()))
    return step_from_composition([d for d in docs if d], str(COMPOSITION))[1]


def step_input() -> dict[str, Any]:
    """The step input of the shipped v2 Composition (every field spelled out)."""
    return copy.deepcopy(_step_input())


# --- which plugins -----------------------------------------------------------------

# status.plugins[] entries: 1 = vpc-cni without IRSA; 2 = + the SelfHosted issuer
# ("irsa"); 3..5 = + EBS, EFS, the load balancer controller (5 = the example).
PLUGIN_SETS: dict[int, dict[str, Any]] = {
    1: {"networking": {"amazonVPC": {}}, "irsa": {"mode": "Disabled"}},
    2: {"networking": {"amazonVPC": {}}, "irsa": {"mode": "SelfHosted"}},
    3: {
        "networking": {"amazonVPC": {}},
        "storage": {"ebs": {"defaultStorageClass": True}},
        "irsa": {"mode": "SelfHosted"},
    },
    4: {
        "networking": {"amazonVPC": {}},
        "storage": {
            "ebs": {"defaultStorageClass": True},
            "efs": {"fileSystemId": "fs-0123456789abcdef0"},
        },
        "irsa": {"mode": "SelfHosted"},
    },
    5: {},  # the example as shipped
}


def xr_with_plugins(n: int) -> dict[str, Any]:
    """The example XR reduced to ``n`` entries of status.plugins[]."""
    xr, _ = example()
    if n == 5:
        return xr
    spec = xr["spec"]
    for key in ("networking", "storage", "ingress", "irsa"):
        spec.pop(key, None)
    spec.update(copy.deepcopy(PLUGIN_SETS[n]))
    return xr


# --- realistic observed objects ------------------------------------------------------


def _uid(*parts: str) -> str:
    return str(uuid.UUID(bytes=hashlib.sha256("/".join(parts).encode()).digest()[:16], version=4))


def _rv(*parts: str) -> str:
    return str(int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:7], 16))


_UPJET_META = (
    '{"e2bfb730-ecaa-11e6-8f88-34363bc7c4c0":{"create":1800000000000,'
    '"delete":3600000000000,"update":1800000000000},"schema_version":"0"}'
)


def _conditions(*, ready: bool, upjet: bool) -> list[dict[str, Any]]:
    conds: list[dict[str, Any]] = [
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "reason": "Available" if ready else "Creating",
            "lastTransitionTime": LATER,
            "observedGeneration": 2,
        },
        {
            "type": "Synced",
            "status": "True",
            "reason": "ReconcileSuccess",
            "lastTransitionTime": TIMESTAMP,
            "observedGeneration": 2,
        },
    ]
    if upjet:
        conds.append(
            {
                "type": "LastAsyncOperation",
                "status": "True",
                "reason": "Success",
                "lastTransitionTime": LATER,
                "observedGeneration": 2,
            }
        )
    return conds


def _kind_extras(kind: str, fp: dict[str, Any], ext: str) -> dict[str, Any]:
    """What upjet's atProvider adds to the echo of forProvider, per kind."""
    if kind == "Role":
        return {
            "createDate": LATER,
            "maxSessionDuration": 3600,
            "uniqueId": "AROA" + hashlib.sha256(ext.encode()).hexdigest()[:17].upper(),
            "roleLastUsed": [{"lastUsedDate": "", "region": ""}],
            "managedPolicyArns": [],
            "forceDetachPolicies": False,
            "inlinePolicy": [{"name": "", "policy": ""}],
        }
    if kind == "Policy":
        return {
            "policyId": "ANPA" + hashlib.sha256(ext.encode()).hexdigest()[:17].upper(),
            "attachmentCount": 1,
        }
    if kind == "Bucket":
        return {
            "bucketDomainName": f"{ext}.s3.amazonaws.com",
            "bucketRegionalDomainName": f"{ext}.s3.{fp.get('region', 'us-east-1')}.amazonaws.com",
            "hostedZoneId": "Z3AQBSTGFYJSTF",
            "objectLockEnabled": False,
            "forceDestroy": False,
            "requestPayer": "BucketOwner",
            "accelerationStatus": "",
            "serverSideEncryptionConfiguration": [
                {
                    "rule": [
                        {
                            "applyServerSideEncryptionByDefault": [{"sseAlgorithm": "AES256"}],
                            "bucketKeyEnabled": False,
                        }
                    ]
                }
            ],
            "versioning": [{"enabled": False, "mfaDelete": False}],
        }
    if kind == "Object":
        return {
            "etag": hashlib.md5(
                str(fp.get("content", "")).encode(), usedforsecurity=False
            ).hexdigest(),
            "versionId": "",
            "serverSideEncryption": "AES256",
            "storageClass": "STANDARD",
            "forceDestroy": False,
            "bucketKeyEnabled": False,
            "contentEncoding": "",
            "contentLanguage": "",
            "objectLockLegalHoldStatus": "",
            "websiteRedirect": "",
        }
    if kind == "OpenIDConnectProvider":
        return {"thumbprintList": ["9e99a48a9960b14926bb7f3b02e22da2b0ab7280"]}
    return {}


def realistic(obj: dict[str, Any], name: str, xr: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (as the in-memory Crossplane observes it) with what a real cluster adds."""
    o = copy.deepcopy(obj)
    kind = o.get("kind", "")
    api = o.get("apiVersion", "")
    xr_meta = xr.get("metadata", {})
    meta = o.setdefault("metadata", {})
    upjet = ".aws." in api
    meta.update(
        {
            "uid": _uid(xr_meta.get("name", ""), name),
            "resourceVersion": _rv(name),
            "generation": 2,
            "creationTimestamp": TIMESTAMP,
            "finalizers": ["finalizer.managedresource.crossplane.io"]
            if kind != "Usage"
            else ["usage.apiextensions.crossplane.io"],
            "ownerReferences": [
                {
                    "apiVersion": xr.get("apiVersion", ""),
                    "kind": xr.get("kind", ""),
                    "name": xr_meta.get("name", ""),
                    "uid": _uid(xr_meta.get("name", "")),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        }
    )
    meta.setdefault("labels", {}).update({"crossplane.io/composite": xr_meta.get("name", "")})
    ann = meta.setdefault("annotations", {})
    ext = ann.get("crossplane.io/external-name", meta.get("name", name))
    if upjet:
        ann.update(
            {
                "crossplane.io/external-create-pending": TIMESTAMP,
                "crossplane.io/external-create-succeeded": TIMESTAMP,
                "upjet.crossplane.io/provider-meta": _UPJET_META,
            }
        )
    spec = o.setdefault("spec", {})
    status = o.setdefault("status", {})
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", [])
    )
    if upjet:
        fp = spec.setdefault("forProvider", {})
        spec["managementPolicies"] = ["*"]
        spec["initProvider"] = {}
        default_tags = {
            "crossplane-kind": f"{kind.lower()}.{api.split('/')[0]}",
            "crossplane-name": meta.get("name", ""),
            "crossplane-providerconfig": spec.get("providerConfigRef", {}).get("name", ""),
        }
        if "tags" in fp:
            fp["tags"] = {**fp["tags"], **default_tags}
        at = status.setdefault("atProvider", {})
        echo = copy.deepcopy(fp)
        echo.update(at)  # keep what InMemoryCrossplane reports (the ARN)
        echo["id"] = ext
        if "tags" in fp:
            echo["tagsAll"] = dict(fp["tags"])
        echo.update(_kind_extras(kind, fp, ext))
        status["atProvider"] = echo
    elif kind == "Release":
        # What provider-helm v1.3.0 reports: the in-memory revision and chart version, and
        # helm's description.
        status["atProvider"] = {
            "releaseDescription": "Install complete",
            **status.get("atProvider", {}),
        }
        status["failed"] = 0
        status["synced"] = True
    elif kind == "ProviderConfig":
        status["users"] = 5
    status["conditions"] = _conditions(ready=ready, upjet=upjet) if kind != "ProviderConfig" else []
    if kind == "Usage":
        status["conditions"] = _conditions(ready=ready, upjet=False)[:1]
    return o


def realistic_xr(xr: dict[str, Any], composed: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The XR as Crossplane v2 sends it: metadata, and spec.crossplane.resourceRefs."""
    o = copy.deepcopy(xr)
    meta = o.setdefault("metadata", {})
    meta.update(
        {
            "uid": _uid(meta.get("name", "")),
            "resourceVersion": _rv("xr", meta.get("name", "")),
            "generation": 1,
            "creationTimestamp": TIMESTAMP,
            "finalizers": ["composite.apiextensions.crossplane.io"],
        }
    )
    refs = [
        {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": obj.get("metadata", {}).get("name", ""),
        }
        for _, obj in sorted(composed)
    ]
    if refs:
        o.setdefault("spec", {}).setdefault("crossplane", {})["resourceRefs"] = refs
    return o


def padding(i: int, xr: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """An extra observed resource of realistic size under a name the function does not know."""
    name = f"bench-pad-{i:04d}"
    ext = f"bench-pad-role-{i:04d}"
    obj = {
        "apiVersion": "iam.aws.m.upbound.io/v1beta1",
        "kind": "Role",
        "metadata": {
            "name": f"{xr['metadata']['name']}-{hashlib.sha256(name.encode()).hexdigest()[:5]}",
            "namespace": xr["metadata"].get("namespace", ""),
            "annotations": {
                "crossplane.io/composition-resource-name": name,
                "crossplane.io/external-name": ext,
            },
        },
        "spec": {
            "forProvider": {
                "assumeRolePolicy": '{"Version":"2012-10-17","Statement":[{"Effect":"Allow",'
                '"Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}',
                "path": "/bench/",
                "description": f"padding role {i} of the benchmark",
                "tags": {"bench": "padding", "index": str(i)},
            },
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"},
        },
        "status": {
            "atProvider": {"arn": f"arn:aws:iam::123456789012:role/bench/{ext}"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
        },
    }
    return name, realistic(obj, name, xr)


# --- building requests ---------------------------------------------------------------


def converge(xr: dict[str, Any], *, max_steps: int = 40) -> InMemoryCrossplane:
    """Play ``xr`` in a InMemoryCrossplane until it is Ready and a reconcile changes nothing."""
    _, required = example()
    world = InMemoryCrossplane(xr, required, step_input=step_input())
    for _ in range(max_steps):
        rec = world.reconcile()
        if rec.fatal:
            msg = f"FATAL while converging: {rec.fatal}"
            raise RuntimeError(msg)
        # Steady: every chart Healthy too (the VPC CNI's IRSA restart soaked), as a fleet
        # mostly is.
        settled = world.xr.get("status", {}).get("upgrade") == "Healthy"
        if rec.xr_ready and settled and not rec.created and not rec.deleted:
            return world
    msg = f"no convergence in {max_steps} reconciles"
    raise RuntimeError(msg)


@dataclass
class Reconcile:
    """The requests of one reconcile (Crossplane's required-resources loop), last = final."""

    requests: list[fnv1.RunFunctionRequest]

    @property
    def final(self) -> fnv1.RunFunctionRequest:
        """The request of the last iteration: every required resource filled in."""
        return self.requests[-1]


def reconcile_requests(
    world: InMemoryCrossplane, *, extra: int = 0, plain: bool = False
) -> Reconcile:
    """Every request of one reconcile of ``world`` (as InMemoryCrossplane.call sends them).

    Observed objects are made realistic (unless ``plain``) and ``extra`` padding
    resources are added, before the loop runs, so every iteration carries them.
    """
    base = world.request()
    xr = resource.struct_to_dict(base.observed.composite.resource)
    composed = [
        (name, resource.struct_to_dict(r.resource)) for name, r in base.observed.resources.items()
    ]
    if not plain:
        composed = [(n, realistic(o, n, xr)) for n, o in composed]
        composed += [padding(i, xr) for i in range(extra)]
        base.observed.composite.resource.Clear()
        base.observed.composite.resource.update(realistic_xr(xr, composed))
    base.observed.ClearField("resources")
    for name, obj in sorted(composed):
        base.observed.resources[name].resource.update(obj)

    requests = [_copy(base)]
    req = _copy(base)
    rsp = fn.run(req)
    for _ in range(MAX_REQUIREMENT_ITERATIONS - 1):
        before = rsp.requirements.SerializeToString(deterministic=True)
        world._fill(req, rsp)  # the same fill InMemoryCrossplane.call uses
        requests.append(_copy(req))
        rsp = fn.run(req)
        if rsp.requirements.SerializeToString(deterministic=True) == before:
            break
    return Reconcile(requests)


def _copy(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionRequest:
    out = fnv1.RunFunctionRequest()
    out.CopyFrom(req)
    return out


def first_request() -> fnv1.RunFunctionRequest:
    """The first request for a new XR: nothing observed, nothing required yet."""
    xr, required = example()
    world = InMemoryCrossplane(xr, required, step_input=step_input())
    return reconcile_requests(world).requests[0]


@dataclass
class Workload:
    """Every request the benchmarks use."""

    full: Reconcile  # converged example, realistic observed state
    first: fnv1.RunFunctionRequest  # empty first reconcile
    by_resources: dict[str, dict[int, fnv1.RunFunctionRequest]]  # series -> count -> request
    by_plugins: dict[int, fnv1.RunFunctionRequest]  # plugins -> final request

    def observed_count(self, req: fnv1.RunFunctionRequest) -> int:
        """How many composed resources ``req`` carries."""
        return len(req.observed.resources)


RESOURCE_COUNTS = (10, 30, 100, 300)


def build(resource_counts: tuple[int, ...] = RESOURCE_COUNTS) -> Workload:
    """Build every request (a few seconds: each configuration is played to convergence)."""
    worlds = {n: converge(xr_with_plugins(n)) for n in PLUGIN_SETS}
    full = reconcile_requests(worlds[5])
    by_plugins = {n: reconcile_requests(w).final for n, w in worlds.items()}
    # Two series: the smallest configuration (1 plugin) and the full one, each padded
    # with unknown composed resources up to the count.
    by_resources: dict[str, dict[int, fnv1.RunFunctionRequest]] = {"1-plugin": {}, "5-plugins": {}}
    for series, world in (("1-plugin", worlds[1]), ("5-plugins", worlds[5])):
        natural = len(by_plugins[1 if series == "1-plugin" else 5].observed.resources)
        for count in sorted({natural, *resource_counts}):
            if count < natural:
                continue
            by_resources[series][count] = reconcile_requests(world, extra=count - natural).final
    return Workload(
        full=full, first=first_request(), by_resources=by_resources, by_plugins=by_plugins
    )


def check_realism(world: InMemoryCrossplane) -> None:
    """The realistic request gets exactly the response the plain one gets."""
    plain = reconcile_requests(world, plain=True).final
    real = reconcile_requests(world).final
    a = fn.run(plain).SerializeToString(deterministic=True)
    b = fn.run(real).SerializeToString(deterministic=True)
    if a != b:
        msg = "realistic observed state changed the function's answer"
        raise AssertionError(msg)
