"""Property tests: generated specs, step inputs, CAPI objects and observed states.

For every generated case the function returns within a time bound and never raises;
invalid input gives exactly one FATAL result naming the field; valid input gives
composed resources that validate against the real CRDs (and strict chart schemas)
with every derived name within its limit; an observed resource of a wanted plugin
is never dropped from desired state; the same request gives byte-identical answers.

Example counts: HYPOTHESIS_PROFILE=fast (default) or soak (``make soak``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given
from hypothesis import strategies as st

from function.names import Names
from function_tools.in_memory_crossplane import Composed, InMemoryCrossplane
from tests import strategies as gen
from tests.scenarios import SCENARIOS, Scenario, staged_control_plane

logging.configure(logging.Level.DISABLED)

CHECK = gen.Checker()

# One clock for a request answered again (tests/strategies.same_bytes_again).
NOW = time.time()


def _count(key: str, n: int = 1) -> None:
    gen.figure("property", key, n)


# --- generated clusters and specs, played to convergence ---------------------------


@dataclass
class Case:
    """One generated ClusterPlugin and the world around it."""

    xr_kind: str
    namespace: str
    cluster: str
    flavour: str
    spec: dict[str, Any]
    step_input: dict[str, Any]
    required: list[dict[str, Any]]
    crossplane_v1: bool
    capabilities: bool
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def xr(self) -> dict[str, Any]:
        xr = gen.make_xr(self.xr_kind, self.namespace, self.spec)
        if self.notes.get("drop_cluster_namespace"):
            xr["spec"].pop("clusterNamespace", None)
        return xr

    def world(self, runner: Callable[..., Any] | None = None) -> InMemoryCrossplane:
        return InMemoryCrossplane(
            self.xr,
            self.required,
            step_input=self.step_input,
            crossplane_v1=self.crossplane_v1,
            capabilities=self.capabilities,
            runner=runner or gen.CountingRunner(),
        )

    def convergeable(self) -> bool:
        """Whether this world has everything the function needs to finish."""
        calico = self.spec.get("networking", {}).get("calico")
        if calico is not None and "cidr" not in calico:
            # The pod CIDR: Cluster clusterNetwork (not readable by label in 1.x mode,
            # absent on the EKS fixture) or the v1beta1 fixture's kubeadm podSubnet.
            has_cidr = self.flavour == "kubeadm-v1beta1" or (
                not self.crossplane_v1 and self.flavour != "eks"
            )
            if not has_cidr:
                return False
        return True


@st.composite
def cases(draw: st.DrawFn, *, long_names: bool = False) -> Case:
    xr_kind = draw(st.sampled_from(gen.XR_KINDS))
    namespace = draw(gen.dns_labels(63, long_bias=long_names or draw(st.booleans())))
    cluster = draw(gen.dns_labels(63, long_bias=long_names or draw(st.booleans())))
    flavour = draw(st.sampled_from(gen.FLAVOURS))
    spec = draw(gen.specs(cluster))
    step_input = draw(gen.step_inputs())
    if long_names:
        step_input["namePrefix"] = draw(gen.name_prefixes().filter(lambda p: len(p) >= 15))
    required = draw(gen.cluster_shapes(flavour, cluster, namespace))
    step_input.setdefault("clusterAPI", {}).update(gen.cluster_api_input(required))
    crossplane_v1 = xr_kind != "namespaced" and draw(st.booleans())
    if crossplane_v1 and flavour == "eks":
        # 1.x lists by label and kind: it must be told the control plane is EKS.
        step_input.setdefault("clusterAPI", {})["legacyControlPlaneKind"] = "AWSManagedControlPlane"
    capabilities = not crossplane_v1 and draw(st.booleans())
    irsa = spec.get("irsa") or {}
    _eks_credentials(draw, flavour, spec, step_input, required)
    if "cloudFront" in irsa.get("hosting", {}) and spec.get("region", "us-east-1") in gen.PARTITION:
        # CloudFront hosting is refused in aws-cn and aws-us-gov (tests/test_refusals.py).
        spec["region"] = "us-east-1"
    if irsa.get("bucketName"):
        # A valid override carries this XR's binding suffix (SECURITY.md): keep the
        # drawn name as the free part and bind it, within S3's 63 characters.
        suffix = Names("", namespace, cluster).override_suffix
        irsa["bucketName"] = irsa["bucketName"][: 63 - len(suffix)].rstrip("-") + suffix
    return Case(xr_kind, namespace, cluster, flavour, spec, step_input, required, crossplane_v1, capabilities)


def _eks_credentials(
    draw: st.DrawFn,
    flavour: str,
    spec: dict[str, Any],
    step_input: dict[str, Any],
    required: list[dict[str, Any]],
) -> None:
    """A cluster that can have the drawn spec.irsa (the rest is tests/test_refusals.py's).

    External left out reads the EKS control plane's provider; given, it is the provider the
    control plane reports. PodIdentity needs EKS outside aws-cn, and the agent: CAPA's add-on
    or the step input's chart.
    """
    irsa = spec.get("irsa") or {}
    mode = irsa.get("mode")
    eks = flavour == "eks"
    if mode == "External" and not irsa.get("oidcProviderARN") and not eks:
        irsa.update(draw(gen.external_irsa()))
    if mode == "PodIdentity" and not eks:
        irsa["mode"] = "Disabled"
    if not eks:
        return
    cp = next(o for o in required if o["kind"] == "AWSManagedControlPlane")
    if irsa.get("oidcProviderARN"):
        cp["status"]["oidcProvider"]["arn"] = irsa["oidcProviderARN"]
    if mode == "PodIdentity":
        if spec.get("region", "us-east-1") in gen.PARTITION:
            spec["region"] = "us-east-1"  # not in aws-cn; aws-us-gov is fine
        if draw(st.booleans()):
            agent = {"name": "eks-pod-identity-agent", "version": "v1.3.10-eksbuild.2"}
            cp["spec"]["addons"] = [agent]
            cp["status"]["addons"] = [{**agent, "arn": "arn:aws:eks:us-east-1:1:addon/x", "status": "ACTIVE"}]
        else:
            step_input.setdefault("charts", {})["podIdentityAgent"] = {
                "repository": "oci://registry.example.com/charts",
                "name": "eks-pod-identity-agent",
                "version": "1.2.0",
            }


def _play(case: Case, steps: int = 14) -> tuple[InMemoryCrossplane, list[str]]:
    """Play the case from a cold control plane; every response checked as it comes."""
    hosting = case.spec.get("irsa", {}).get("hosting", {})
    if hosting.get("cloudFront", {}).get("distribution") == "Managed":
        steps += 4  # origin access control, distribution, bucket policy and record first
    runner = gen.CountingRunner()
    world = case.world(runner)
    world.set_control_plane(initialized=False, available=False)
    errors: list[str] = []
    for rec in world.run(steps, before=staged_control_plane(3, 6)):
        assert rec.fatal is None, f"valid input gave FATAL: {rec.fatal}"
        assert rec.response is not None
        errors += [f"step {rec.step} {e}" for e in CHECK.response_errors(rec.response)]
        assert not any(r.reason == "InternalError" for r in rec.response.results)
    _count("requests", runner.calls)
    _count("reconciles", steps)
    return world, errors


def _final_request(world: InMemoryCrossplane) -> fnv1.RunFunctionRequest:
    req = world.request()
    world._fill(req, gen.run_bounded(req))
    return req


@gen.profile(fast=25, soak=2000)
@given(case=cases())
def test_generated_specs_converge_to_valid_resources(case: Case) -> None:
    world, errors = _play(case)
    assert not errors, "\n".join(errors[:15])
    assert world.deletions == [], world.deletions
    if case.convergeable():
        assert world.xr_ready, world.xr["status"]
    else:
        plugins = world.xr["status"]["plugins"]
        assert any(p["phase"] != "Ready" and p.get("waitingFor") for p in plugins), plugins
    req = _final_request(world)
    assert gen.same_bytes_again(req, gen.run_bounded(req, NOW), NOW) == []
    _count("cases")


@gen.profile(fast=12, soak=1000)
@given(case=cases(long_names=True))
def test_long_names_fit_their_limits(case: Case) -> None:
    """63-character namespaces and cluster names, 15-20 character prefixes: every name fits."""
    # Names only: make sure every name-bearing node is reached.
    case.spec.setdefault("storage", {})["ebs"] = {}
    calico = case.spec.get("networking", {}).get("calico")
    if calico is not None:
        calico.setdefault("cidr", "192.168.0.0/16")  # without one (and none on the Cluster) it is Blocked
    world, errors = _play(case)
    assert not errors, "\n".join(errors[:15])
    kinds = {c.obj["kind"] for c in world.composed.values()}
    assert {"Release", "ProviderConfig"} <= kinds
    mode = case.spec.get("irsa", {}).get("mode", "SelfHosted")
    if mode != "Disabled" and case.convergeable():
        assert "Role" in kinds
    shared = case.spec.get("irsa", {}).get("hosting", {}).get("cloudFront", {}).get("distribution") == "Shared"
    if mode == "SelfHosted" and not shared:
        assert "Bucket" in kinds
    _count("long-name cases")


@gen.profile(fast=40, soak=2000)
@given(
    a=st.tuples(gen.dns_labels(63), gen.dns_labels(63)),
    b=st.tuples(gen.dns_labels(63), gen.dns_labels(63)),
    prefix=gen.name_prefixes(),
)
def test_distinct_clusters_never_share_a_derived_name(a: tuple[str, str], b: tuple[str, str], prefix: str) -> None:
    """Bucket, role and helm ProviderConfig names of two different namespace/cluster pairs differ."""
    if a == b:
        a = (a[0], a[1][:-1] + ("a" if a[1][-1] != "a" else "b"))
    na, nb = Names(prefix, *a), Names(prefix, *b)
    assert na.bucket != nb.bucket
    assert na.role("ebs-csi") != nb.role("ebs-csi")
    assert na.helm_provider_config(namespaced=False) != nb.helm_provider_config(namespaced=False)
    # Also when the two are made to look alike: "a-b"/"c" against "a"/"b-c".
    joined = Names(prefix, f"{a[0][:30]}-{a[1][:30]}", "x"), Names(prefix, a[0][:30], f"{a[1][:30]}-x")
    assert joined[0].bucket != joined[1].bucket


@pytest.mark.parametrize("prefix", [*gen.S3_RESERVED_PREFIXES, "xn--acme-"])
def test_a_reserved_name_prefix_never_yields_a_bucket_s3_refuses(prefix: str) -> None:
    """namePrefix starts the bucket name: S3-reserved prefixes must be refused up front."""
    case = Case(
        "namespaced", "team-a", "demo", "kubeadm", {"clusterName": "demo", "storage": {"ebs": {}}},
        {"namePrefix": prefix}, gen.cluster_objects("kubeadm", "demo", "team-a"), False, False,
    )
    world = case.world()
    rec = world.reconcile()
    if rec.fatal is not None:
        assert rec.fatal.startswith("input.namePrefix: "), rec.fatal
        return
    bucket = world.composed["irsa-bucket"].obj["metadata"]["annotations"][gen.EXTERNAL_NAME]
    assert gen.s3_bucket_problems(bucket) == [], (
        f"namePrefix {prefix!r} was accepted and the derived bucket {bucket!r} is one S3 refuses"
    )


# --- invalid input: one FATAL naming the field ----------------------------------------


@dataclass(frozen=True)
class Invalid:
    """A way to break a valid case and the field(s) the FATAL result may name."""

    name: str
    apply: Callable[[st.DrawFn, Case], None]
    fields: tuple[str, ...]


def _addon_path(draw: st.DrawFn, case: Case) -> tuple[str, ...]:
    paths = [("networking", "amazonVPC"), ("storage", "ebs"), ("storage", "efs"), ("ingress", "awsLoadBalancerController")]
    path = draw(st.sampled_from(paths))
    if path[0] == "networking":
        case.spec.pop("networking", None)
    node = case.spec
    for p in path:
        node = node.setdefault(p, {})
    return path


def _set_addon(key: str, value_st: st.SearchStrategy[Any]) -> Callable[[st.DrawFn, Case], None]:
    def apply(draw: st.DrawFn, case: Case) -> None:
        path = _addon_path(draw, case)
        node = case.spec
        for p in path:
            node = node[p]
        node[key] = draw(value_st)
        case.notes["path"] = "spec." + ".".join(path) + "." + key

    return apply


def _irsa(block: dict[str, Any]) -> Callable[[st.DrawFn, Case], None]:
    def apply(draw: st.DrawFn, case: Case) -> None:
        case.spec["irsa"] = copy.deepcopy(block)
        case.spec.setdefault("storage", {})["ebs"] = {}

    return apply


def _set(path: str, value_st: st.SearchStrategy[Any], root: str = "spec") -> Callable[[st.DrawFn, Case], None]:
    def apply(draw: st.DrawFn, case: Case) -> None:
        node = case.spec if root == "spec" else case.step_input
        *parents, last = path.split(".")
        for p in parents:
            if not isinstance(node.get(p), dict):
                node[p] = {}
            node = node[p]
        node[last] = draw(value_st)

    return apply


def _bucket_bad(draw: st.DrawFn, case: Case) -> None:
    bad = ["Ab", "a.b.c", "xn--abc", "ab", "a" * 64, "abc-s3alias", "-abc", "abc-", "amzn-s3-demo-x", "192.168.1.1"]
    case.spec["irsa"] = {"mode": "SelfHosted", "bucketName": draw(st.sampled_from(bad))}
    case.spec.setdefault("storage", {})["ebs"] = {}


def _two_cnis(draw: st.DrawFn, case: Case) -> None:
    case.spec["networking"] = {"amazonVPC": {}, "calico": {}}


def _drop_cluster_name(draw: st.DrawFn, case: Case) -> None:
    del case.spec["clusterName"]


def _foreign_cluster_namespace(draw: st.DrawFn, case: Case) -> None:
    if case.xr_kind == "legacy-xr":
        # Without a claim the namespace must be given.
        case.notes["drop_cluster_namespace"] = True
    else:
        other = draw(gen.dns_labels(20, long_bias=False).filter(lambda n: n != case.namespace))
        case.spec["clusterNamespace"] = other


EXT = "https://oidc.eks.us-west-2.amazonaws.com/id/ABC"
EXT_ARN = "arn:aws:iam::111122223333:oidc-provider/oidc.eks.us-west-2.amazonaws.com/id/ABC"
OWNED_FIGHTS = [
    (("storage", "ebs"), {"controller": {"serviceAccount": {"name": "evil"}}}, "controller.serviceAccount.name"),
    (("storage", "efs"), {"controller": {"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}}}}, "controller.serviceAccount.annotations.eks.amazonaws.com/role-arn"),
    (("storage", "ebs"), {"controller": 5}, "controller"),
    (("networking", "amazonVPC"), {"serviceAccount": {"name": "default"}}, "serviceAccount.name"),
    (("networking", "amazonVPC"), {"serviceAccount": "x"}, "serviceAccount"),
    (("networking", "calico"), {"installation": {"calicoNetwork": {"ipPools": []}}}, "installation.calicoNetwork.ipPools"),
    (("ingress", "awsLoadBalancerController"), {"clusterName": "someone-else"}, "clusterName"),
    (("ingress", "awsLoadBalancerController"), {"serviceAccount": {"name": "admin"}}, "serviceAccount.name"),
]


def _owned_fight(draw: st.DrawFn, case: Case) -> None:
    path, values, owned = draw(st.sampled_from(OWNED_FIGHTS))
    if path[0] == "networking":
        case.spec["networking"] = {}
    node = case.spec
    for p in path:
        node = node.setdefault(p, {})
    node["values"] = values
    case.notes["path"] = "spec." + ".".join(path) + ".values." + owned


INVALID: list[Invalid] = [
    Invalid("no-cluster-name", _drop_cluster_name, ("spec.clusterName",)),
    Invalid("bad-cluster-name", _set("clusterName", st.sampled_from(["Demo", "demo_1", "-demo", "a" * 64, "", "demo.", "dé"])), ("spec.clusterName",)),
    Invalid("cluster-name-type", _set("clusterName", st.sampled_from([5, True, [], {}, None])), ("spec.clusterName",)),
    Invalid("two-cnis", _two_cnis, ("spec.networking",)),
    Invalid("unknown-field", _set("netkworking", gen.json_values(3)), ("spec.netkworking",)),
    Invalid("unknown-nested-field", _set("storage.ebs.defaultStorgeClass", st.booleans()), ("spec.storage.ebs.defaultStorgeClass",)),
    Invalid("storage-not-object", _set("storage", st.sampled_from([[], "ebs", 1])), ("spec.storage",)),
    Invalid("irsa-mode", _set("irsa.mode", st.sampled_from(["selfhosted", "IRSA", "", 1, None])), ("spec.irsa.mode",)),
    Invalid("bucket-name", _bucket_bad, ("spec.irsa.bucketName",)),
    Invalid("bucket-name-other-mode", _irsa({"mode": "Disabled", "bucketName": "my-bucket"}), ("spec.irsa.bucketName",)),
    Invalid("external-without-issuer", _irsa({"mode": "External", "oidcProviderARN": EXT_ARN}), ("spec.irsa.issuerURL",)),
    Invalid("external-bad-issuer", _irsa({"mode": "External", "issuerURL": "http://oidc.eks.us-west-2.amazonaws.com/id/ABC", "oidcProviderARN": EXT_ARN}), ("spec.irsa.issuerURL",)),
    Invalid("external-issuer-port", _irsa({"mode": "External", "issuerURL": "https://issuer.example.com:8443", "oidcProviderARN": "arn:aws:iam::111122223333:oidc-provider/issuer.example.com:8443"}), ("spec.irsa.issuerURL",)),
    Invalid("external-arn-mismatch", _irsa({"mode": "External", "issuerURL": EXT, "oidcProviderARN": EXT_ARN.replace("ABC", "DEF")}), ("spec.irsa.oidcProviderARN",)),
    Invalid("external-arn-malformed", _irsa({"mode": "External", "issuerURL": EXT, "oidcProviderARN": "arn:aws:iam::1:role/x"}), ("spec.irsa.oidcProviderARN",)),
    Invalid("issuer-with-selfhosted", _irsa({"mode": "SelfHosted", "issuerURL": EXT}), ("spec.irsa.issuerURL",)),
    Invalid("values-not-object", _set_addon("values", st.sampled_from(["x", [1], 5, True])), ()),
    Invalid("values-fight-owned-key", _owned_fight, ()),
    Invalid("version", _set_addon("version", st.sampled_from(["latest", "1.2", "v1", "", "1.2.3.4", 1.2])), ()),
    Invalid("region", _set("region", st.sampled_from(["US-EAST-1", "useast1", "mars", "", 1])), ("spec.region",)),
    Invalid("file-system-id", _set("storage.efs.fileSystemId", st.sampled_from(["fs-XYZ", "0123456789", "fs-", "fs-0123"])), ("spec.storage.efs.fileSystemId",)),
    Invalid("encapsulation", _set("networking.calico.encapsulation", st.sampled_from(["GRE", "vxlan", "", 4])), ("spec.networking.calico.encapsulation",)),
    Invalid("calico-cidr", _set("networking.calico.cidr", st.sampled_from(["10.0.0.0", "fd00::/8", "x/16", ""])), ("spec.networking.calico.cidr",)),
    Invalid("default-storage-class-type", _set("storage.ebs.defaultStorageClass", st.sampled_from([[1], {"a": 1}, "maybe", 7])), ("spec.storage.ebs.defaultStorageClass",)),
    Invalid("security-groups", _set("securityGroups.manage", st.sampled_from(["auto", "Sometimes", "", 0])), ("spec.securityGroups.manage",)),
    Invalid("cert-manager", _set("irsa.podIdentityWebhook.certManager", st.sampled_from(["install", "None", ""])), ("spec.irsa.podIdentityWebhook.certManager",)),
    Invalid("cluster-namespace", _foreign_cluster_namespace, ("spec.clusterNamespace",)),
    Invalid("name-prefix", _set("namePrefix", st.sampled_from(["Acme", "-acme", "a" * 21, "a_b", "a.b"]), root="input"), ("input.namePrefix",)),
    Invalid("ttl-duration", _set("ttl.waiting", st.sampled_from(["30 s", "soon", "", -5, 0, 86401, "1d"]), root="input"), ("input.ttl.waiting",)),
    Invalid("ttl-order", _set("ttl", st.just({"waiting": "20m", "ready": "10m"}), root="input"), ("input.ttl.waiting", "input.ttl.ready", "input.ttl")),
    Invalid("input-unknown-field", _set("namePrefx", st.just("acme"), root="input"), ("input.namePrefx",)),
    Invalid("chart-repository", _set("charts.ebs", st.just({"repository": "ftp://charts", "name": "x", "version": "1.0.0"}), root="input"), ("input.charts.ebs.repository",)),
    Invalid("chart-without-name", _set("charts.efs", st.just({"repository": "https://charts", "version": "1.0.0"}), root="input"), ("input.charts.efs.name",)),
    Invalid("provider-config-kind", _set("awsProviderConfig.kind", st.sampled_from(["Secret", ""]), root="input"), ("input.awsProviderConfig.kind",)),
    Invalid("legacy-control-plane-kind", _set("clusterAPI.legacyControlPlaneKind", st.just("RKE2ControlPlane"), root="input"), ("input.clusterAPI.legacyControlPlaneKind",)),
]


def _expected_fields(inv: Invalid, case: Case) -> tuple[str, ...]:
    path = case.notes.get("path")
    if inv.name == "values-not-object":
        return (path.rsplit(".", 1)[0] + ".values",) if path else ()
    if inv.name in {"version", "values-fight-owned-key"}:
        return (path,) if path else ()
    return inv.fields


def _call(case: Case) -> tuple[fnv1.RunFunctionResponse, fnv1.RunFunctionRequest]:
    """One call through Crossplane's required-resources loop: (final response, its request)."""
    runner = gen.CountingRunner()
    rsp, _ = case.world(runner).call()
    assert runner.last_request is not None
    _count("requests", runner.calls)
    return rsp, runner.last_request


@pytest.mark.parametrize("inv", INVALID, ids=[i.name for i in INVALID])
@gen.profile(fast=4, soak=60)
@given(data=st.data(), case=cases())
def test_invalid_input_is_one_fatal_naming_the_field(inv: Invalid, data: st.DataObject, case: Case) -> None:
    inv.apply(data.draw, case)
    rsp, req = _call(case)
    assert len(rsp.results) == 1, [r.message for r in rsp.results]
    (res,) = rsp.results
    assert res.severity == fnv1.SEVERITY_FATAL
    assert res.reason == "InvalidInput"
    assert gen.FATAL_MESSAGE.match(res.message), res.message
    field = res.message.split(": ", 1)[0]
    want = _expected_fields(inv, case)
    assert want, "test bug: no expected field"
    assert field in want, f"FATAL names {field!r}, expected one of {want}: {res.message}"
    # Nothing is applied: no composed resource, no status.
    assert len(rsp.desired.resources) == 0
    assert not rsp.desired.composite.resource.fields
    assert gen.same_bytes_again(req, rsp) == []
    _count("invalid cases")


KNOWN_SPEC_KEYS = [
    "clusterName", "clusterNamespace", "region", "networking", "storage", "ingress", "irsa",
    "securityGroups", "crossplane", "claimRef", "compositionRef", "resourceRefs",
]
KNOWN_INPUT_KEYS = ["namePrefix", "charts", "ttl", "awsProviderConfig", "clusterAPI", "apiVersion", "kind", "metadata"]
def _json_tree(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.one_of(st.sampled_from(keys), gen.FIELD_NAMES)
    return st.dictionaries(names, gen.json_values(8, keys=names), max_size=4)


@gen.profile(fast=40, soak=2000)
@given(
    case=cases(),
    spec_noise=_json_tree(KNOWN_SPEC_KEYS),
    input_noise=_json_tree(KNOWN_INPUT_KEYS),
    where=st.sampled_from(["spec", "input", "both"]),
)
def test_arbitrary_json_never_crashes(case: Case, spec_noise: dict, input_noise: dict, where: str) -> None:
    """Random JSON over known and unknown keys: either one named FATAL or valid resources."""
    if where in {"spec", "both"}:
        case.spec.update(spec_noise)
    if where in {"input", "both"}:
        case.step_input.update(input_noise)
    rsp, req = _call(case)
    fatal = gen.fatal_results(rsp)
    if fatal:
        assert len(rsp.results) == 1, [r.message for r in rsp.results]
        assert gen.FATAL_MESSAGE.match(fatal[0].message), fatal[0].message
        assert len(rsp.desired.resources) == 0
        _count("json cases fatal")
    else:
        errors = CHECK.response_errors(rsp)
        assert not errors, "\n".join(errors[:10])
        _count("json cases valid")
    assert gen.same_bytes_again(req, rsp) == []


# --- CAPI objects: v1beta1/v1beta2 shapes, missing fields, odd statuses --------------


FACT_REFUSALS = (
    "spec.irsa: mode External without issuerURL and oidcProviderARN reads them from",
    "spec.irsa.oidcProviderARN: ",
    "spec.irsa.mode: PodIdentity needs ",
    # A control plane ref mutated into a kind the function does not serve (issue 44).
    "spec.clusterName: Cluster ",
)


@gen.profile(fast=25, soak=1500)
@given(
    scenario=st.sampled_from(SCENARIOS),
    warmup=st.integers(0, 12),
    muts=gen.mutations(),
    drop=st.sets(st.integers(0, 5), max_size=2),
)
def test_capi_objects_mutated_mid_life(scenario: Scenario, warmup: int, muts: list, drop: set) -> None:
    """Mutated Cluster API objects never crash the function or delete anything; restored, it converges.

    The FATALs allowed refuse the spec against what the mutated objects now say (FACT_REFUSALS:
    the control plane no longer associates the OIDC provider, reports another, no longer lists
    the Pod Identity agent, or the Cluster names another kind, one the function does not serve):
    a person must change the one or the other, and nothing is applied or deleted meanwhile.
    """
    runner = gen.CountingRunner()
    world = scenario.world(staged=False, runner=runner)
    world.run(warmup)
    original = copy.deepcopy(world.required)
    described = [m.apply(world.required) for m in muts]
    world.required = [o for i, o in enumerate(world.required) if i not in drop]
    errors: list[str] = []
    for rec in world.run(3):
        assert rec.fatal is None or rec.fatal.startswith(FACT_REFUSALS), (described, rec.fatal)
        assert rec.response is not None
        assert not any(r.reason == "InternalError" for r in rec.response.results)
        errors += CHECK.response_errors(rec.response)
    assert not errors, (described, errors[:10])
    assert world.deletions == [], (described, world.deletions)
    req = _final_request(world)
    assert gen.same_bytes_again(req, gen.run_bounded(req, NOW), NOW) == [], described
    world.required = original
    for _ in range(20):
        world.reconcile()
        if world.xr_ready:
            break
    assert world.xr_ready, (described, world.xr["status"])
    assert world.deletions == [], (described, world.deletions)
    _count("requests", runner.calls)
    _count("capi mutation cases")


# --- observed states: random subsets of a converged world, random readiness ----------


@dataclass(frozen=True)
class Converged:
    scenario: Scenario
    xr: dict[str, Any]
    required: list[dict[str, Any]]
    composed: dict[str, dict[str, Any]]
    # The world's own step input: the scenario's over its example's Composition's (a chart source
    # the XR needs may come from the latter only, as for the Pod Identity agent's).
    step_input: dict[str, Any]


@cache
def _converged(name: str) -> Converged:
    scenario = next(s for s in SCENARIOS if s.name == name)
    world = scenario.world(staged=False)
    world.run(20)
    assert world.xr_ready
    return Converged(
        scenario,
        copy.deepcopy(world.xr),
        copy.deepcopy(world.required),
        {n: copy.deepcopy(c.obj) for n, c in world.composed.items()},
        copy.deepcopy(world.step_input),
    )


@st.composite
def observed_states(draw: st.DrawFn) -> tuple[Converged, dict[str, tuple[bool, bool]], set[str]]:
    conv = _converged(draw(st.sampled_from([s.name for s in SCENARIOS])))
    names = sorted(conv.composed)
    keep = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    ready = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
    no_arn = draw(st.lists(st.integers(0, 5), min_size=len(names), max_size=len(names)))
    state = {n: (r, a == 0) for n, k, r, a in zip(names, keep, ready, no_arn, strict=True) if k}
    kinds = sorted({f"{o['kind']}/{o['metadata']['name']}" for o in conv.required})
    hidden = draw(st.sets(st.sampled_from(kinds), max_size=len(kinds)))
    return conv, state, hidden


@gen.profile(fast=40, soak=2000)
@given(observed=observed_states())
def test_observed_resources_of_wanted_plugins_are_never_dropped(observed) -> None:
    conv, state, hidden = observed
    seen: list[fnv1.RunFunctionRequest] = []

    def runner(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        for name, (_, drop_arn) in state.items():
            st_ = req.observed.resources[name].resource.fields["status"].struct_value
            if drop_arn and "atProvider" in st_.fields:
                del st_.fields["atProvider"]  # ready, but no ARN reported (yet)
        seen.append(fnv1.RunFunctionRequest.FromString(req.SerializeToString()))
        # One clock for every call and the reruns: a Release observed Ready with no
        # lastTransitionTime is healthy since the call's moment (upgradeSince, its record).
        return gen.run_bounded(req, NOW)

    world = InMemoryCrossplane(
        conv.xr, conv.required, step_input=conv.step_input,
        crossplane_v1=conv.scenario.crossplane_v1, runner=runner,
    )
    world.hidden = hidden
    world.composed = {
        n: Composed(n, copy.deepcopy(conv.composed[n]), created_at=0, ready=ready)
        for n, (ready, _) in state.items()
    }
    rsp, _ = world.call()
    assert not gen.fatal_results(rsp)
    desired = set(rsp.desired.resources)
    missing = set(state) - desired
    assert not missing, f"observed but dropped: {sorted(missing)}"
    assert desired <= set(conv.composed), f"unknown names: {sorted(desired - set(conv.composed))}"
    errors = CHECK.response_errors(rsp)
    assert not errors, "\n".join(errors[:10])
    assert gen.same_bytes_again(seen[-1], rsp, NOW) == []
    _count("observed-state cases")
