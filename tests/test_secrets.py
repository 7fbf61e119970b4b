"""Secrets never leave the function, and one namespace's objects never serve another's XR.

What the function is handed and must keep to itself:
- the private key of ``<cluster>-sa`` (``tls.key``): only ``tls.crt`` is ever read;
- kubeconfigs and other cluster Secrets: Crossplane 1.x label selection returns every
  Secret labelled with the cluster name, in every namespace (``<cluster>-kubeconfig``,
  ``<cluster>-ca``...), and a misbehaving caller may hand over all of them;
- provider credentials (``RunFunctionRequest.credentials``).

None of it may appear in a response (any encoding), the XR status, results, or the logs at
any level (structlog DEBUG and INFO, the serve path), on success and on every error path:
FATAL input, an internal error, malformed requests to the real server.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import logging as stdlogging
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from google.protobuf import json_format

from function import cluster, fn, plan
from function.addons.oidc_issuer import jwks_document
from function.rollout.spec import REQ_ROLLOUTS
from function_tools.in_memory_crossplane import InMemoryCrossplane
from tests import strategies as gen
from tests.scenarios import by_name, staged_control_plane

AWS_KEY_ID = "AKIAZZFAKEFAKEFAKE42"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKESECRET9"  # fake, and the needle
KUBE_TOKEN = "kubeconfig-token-7f3a9c1e5b2d4f6a8c0e1f2a3b4c5d6e"
CREDENTIALS = f"[default]\naws_access_key_id = {AWS_KEY_ID}\naws_secret_access_key = {AWS_SECRET}\n"


def _pem(key: Any) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


CLIENT_KEY = _pem(ec.generate_private_key(ec.SECP256R1()))
CA_KEY = _pem(ec.generate_private_key(ec.SECP256R1()))


def kubeconfig(cluster_name: str) -> str:
    """A kubeconfig in CAPI's shape, with a client key and a token."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {cluster_name}\n  cluster:\n    server: https://{cluster_name}.example:6443\n"
        f"users:\n- name: {cluster_name}-admin\n  user:\n"
        f"    client-key-data: {gen.b64(CLIENT_KEY)}\n    token: {KUBE_TOKEN}\n"
    )


def cluster_secrets(cluster_name: str, namespace: str) -> list[dict[str, Any]]:
    """The other Secrets CAPI labels with the cluster name (what 1.x label selection returns)."""
    labels = {"cluster.x-k8s.io/cluster-name": cluster_name}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{cluster_name}-kubeconfig", "namespace": namespace, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "data": {"value": gen.b64(kubeconfig(cluster_name))},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{cluster_name}-ca", "namespace": namespace, "labels": labels},
            "type": "cluster.x-k8s.io/secret",
            "data": {"tls.crt": gen.b64("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), "tls.key": gen.b64(CA_KEY)},
        },
    ]


def raw_needles(required: list[dict[str, Any]]) -> list[str]:
    """Secrets as the request carries them: base64 as stored, credentials as given."""
    out = [AWS_KEY_ID, AWS_SECRET]
    for obj in required:
        if obj.get("kind") == "Secret":
            for key, encoded in obj.get("data", {}).items():
                if key != "tls.crt":  # public
                    out += [encoded[:48], encoded[-48:]]
    return sorted(set(out))


def needles(required: list[dict[str, Any]]) -> list[str]:
    """Every form in which a secret could leak: as carried, and decoded (PEM lines, tokens)."""
    out = [*raw_needles(required), KUBE_TOKEN, gen.b64(CLIENT_KEY)[:48]]
    for obj in required:
        if obj.get("kind") == "Secret":
            for key, encoded in obj.get("data", {}).items():
                if key != "tls.crt":
                    text = base64.b64decode(encoded).decode()
                    out += [ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 40][:4]
    for pem in (CLIENT_KEY, CA_KEY):
        out += [ln for ln in pem.splitlines() if not ln.startswith("-----")][:2]
    return sorted(set(out))


def leaks(texts: list[str], required: list[dict[str, Any]]) -> list[str]:
    """The needles found in any of ``texts``."""
    return sorted({n for n in needles(required) for t in texts if n in t})


def carried(requests: list[str], required: list[dict[str, Any]]) -> bool:
    """Whether the requests did carry every secret (so a clean check is not vacuous)."""
    return all(any(n in r for r in requests) for n in raw_needles(required))


def add_credentials(req: fnv1.RunFunctionRequest) -> None:
    """Provider credentials, as Crossplane passes them to a step."""
    req.credentials["aws-creds"].credential_data.data["credentials"] = CREDENTIALS.encode()


def encodings(rsp: fnv1.RunFunctionResponse) -> list[str]:
    """A response in every encoding something could log or store."""
    return [
        json_format.MessageToJson(rsp),
        str(rsp),
        rsp.SerializeToString().decode("latin-1"),
        "\n".join(r.message for r in rsp.results),
        "\n".join(c.message for c in rsp.conditions),
    ]


@pytest.fixture
def log_level(request: pytest.FixtureRequest) -> Iterator[logging.Level]:
    logging.configure(request.param)
    yield request.param
    logging.configure(logging.Level.DISABLED)
    stdlogging.getLogger().handlers.clear()


class Serving:
    """The serve path in process: FunctionRunner.RunFunction, with secrets injected."""

    def __init__(self, extra: list[dict[str, Any]], *, hostile: bool) -> None:
        self.runner = fn.FunctionRunner()
        self.extra = extra
        self.hostile = hostile
        self.texts: list[str] = []
        self.requests: list[str] = []

    def __call__(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        add_credentials(req)
        if self.hostile:
            # As if the caller returned every Secret of the cluster for the Secret requirement
            # (in both fields, whatever was asked) and under a name nobody asked for.
            for name in ("sa-secret", "other"):
                for obj in self.extra:
                    req.required_resources[name].items.add().resource.update(obj)
                    req.extra_resources[name].items.add().resource.update(obj)
        self.requests.append(req.SerializeToString().decode("latin-1"))
        rsp = asyncio.run(self.runner.RunFunction(req, None))
        self.texts += encodings(rsp)
        return rsp


SECRET_SCENARIOS = [
    ("selfhosted-full", True),
    ("selfhosted-legacy-xr-v1", False),
    ("calico-legacy-claim-v1", False),
    ("calico-legacy-claim", True),
    ("external-eks", True),
]


def _world_with_secrets(name: str, runner: Callable[..., Any], *, staged: bool = True) -> tuple[InMemoryCrossplane, list[dict[str, Any]]]:
    world = by_name(name).world(runner=runner, staged=staged)
    cp = world.control_plane()
    assert cp is not None
    clus, ns = cp["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"], cp["metadata"]["namespace"]
    world.required += cluster_secrets(clus, ns)
    # What a hostile caller hands over: every Secret of the cluster, <cluster>-sa included.
    return world, [copy.deepcopy(o) for o in world.required if o["kind"] == "Secret"]


@pytest.mark.parametrize("log_level", [logging.Level.DEBUG, logging.Level.INFO], indirect=True, ids=["debug", "info"])
@pytest.mark.parametrize(("name", "hostile"), SECRET_SCENARIOS, ids=[f"{n}-{'hostile' if h else 'label'}" for n, h in SECRET_SCENARIOS])
def test_secrets_never_leave_the_function(name: str, hostile: bool, log_level: logging.Level, capsys: pytest.CaptureFixture[str]) -> None:
    serving = Serving([], hostile=hostile)
    world, extra = _world_with_secrets(name, serving)
    serving.extra = extra
    world.run(20, before=staged_control_plane(3, 8))
    assert world.xr_ready
    out = capsys.readouterr()
    texts = [*serving.texts, out.out, out.err, json.dumps(world.xr), json.dumps([c.obj for c in world.composed.values()])]
    assert leaks(texts, world.required) == []
    # Not vacuous: the requests did carry every secret, and the logs did say something.
    assert carried(serving.requests, world.required)
    assert out.out.strip()
    gen.figure("secrets", "responses checked", len(serving.requests))


@pytest.mark.parametrize("log_level", [logging.Level.DEBUG, logging.Level.INFO], indirect=True, ids=["debug", "info"])
@pytest.mark.parametrize(
    "spec_change",
    [
        {"clusterNamespace": "someone-else"},
        {"storage": {"ebs": {"values": {"controller": {"serviceAccount": {"name": "x"}}}}}},
        {"storage": {"ebs": {"values": "not a map"}}},
        {"irsa": {"mode": "External", "issuerURL": "https://x.example", "oidcProviderARN": "arn:aws:iam::1:role/x"}},
        {"region": "nowhere"},
    ],
    ids=["namespace", "owned-key", "values-type", "external-arn", "region"],
)
def test_fatal_inputs_do_not_echo_secrets(spec_change: dict, log_level: logging.Level, capsys: pytest.CaptureFixture[str]) -> None:
    serving = Serving([], hostile=True)
    # A claim: its clusterNamespace may only be the claim's own namespace.
    world, extra = _world_with_secrets("calico-legacy-claim-v1", serving, staged=False)
    serving.extra = extra
    world.run(6)
    world.xr["spec"].update(spec_change)
    rec = world.reconcile()
    assert rec.fatal is not None
    out = capsys.readouterr()
    assert leaks([*serving.texts, out.out, out.err, json.dumps(world.xr)], world.required) == []
    assert carried(serving.requests, world.required)


def _raise_with(make_message: Callable[..., str]) -> Callable[..., Any]:
    def builder(ctx: Any) -> Any:
        raise RuntimeError(make_message(ctx))

    return builder


def _everything_the_core_sees(ctx: Any) -> str:
    # The planning core's whole view of the world: spec, input, names, facts, observed names.
    return f"{ctx.spec!r} {ctx.step!r} {ctx.names!r} {ctx.facts!r} {ctx.observed.names()!r} {ctx.flavour!r}"


@pytest.mark.parametrize("log_level", [logging.Level.DEBUG, logging.Level.INFO], indirect=True, ids=["debug", "info"])
def test_an_internal_error_cannot_echo_what_the_code_never_read(
    log_level: logging.Level, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug whose exception dumps everything the core holds still leaks no secret.

    The runner logs an exception's text; the core never reads tls.key, other Secrets or
    credentials into anything it holds, so even this exception carries none of them.
    """
    serving = Serving([], hostile=True)
    world, extra = _world_with_secrets("selfhosted-full", serving, staged=False)
    serving.extra = extra
    world.run(10)
    monkeypatch.setattr(plan, "PLUGIN_BUILDERS", (*plan.PLUGIN_BUILDERS, _raise_with(_everything_the_core_sees)))
    original = cluster.read_facts

    def facts_then_fail(req: fnv1.RunFunctionRequest, *args: Any, **kw: Any) -> Any:
        facts = original(req, *args, **kw)
        if "-boom-" in req.meta.tag:
            raise RuntimeError(repr(facts))
        return facts

    monkeypatch.setattr(cluster, "read_facts", facts_then_fail)
    capsys.readouterr()
    for tag in ("step-builder", "step-boom-facts"):
        req = world.request()
        req.meta.tag = tag
        rsp = serving(req)
        (res,) = rsp.results
        assert res.severity == fnv1.SEVERITY_FATAL and res.reason == "InternalError"
        assert "RuntimeError" in res.message
        assert "sa_public_pem" not in res.message  # the exception's text stays in the log
    out = capsys.readouterr()
    assert "internal error" in out.out and "sa_public_pem" in out.out  # the text was logged
    assert leaks([*serving.texts, out.out, out.err], world.required) == []
    assert carried(serving.requests, world.required)


@pytest.mark.parametrize("log_level", [logging.Level.INFO], indirect=True, ids=["info"])
def test_the_leak_check_sees_a_secret_the_code_does_put_in_an_exception(
    log_level: logging.Level, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Control: were code to put the request in an exception, the log would show it.

    This is the boundary the previous test relies on ("unless the code put it there"), and
    the response still carries only the exception's type.
    """
    serving = Serving([], hostile=True)
    world, extra = _world_with_secrets("selfhosted-full", serving, staged=False)
    serving.extra = extra
    world.run(3)

    def careless(req: fnv1.RunFunctionRequest, *args: Any, **kw: Any) -> Any:
        raise ValueError(str(req.required_resources) + str(req.credentials))

    monkeypatch.setattr(cluster, "read_facts", careless)
    capsys.readouterr()
    rsp = serving(world.request())
    out = capsys.readouterr()
    assert leaks([out.out], world.required), "the leak check failed to see a secret in the log"
    assert leaks(encodings(rsp), world.required) == []


@pytest.mark.parametrize("debug", [True, False], ids=["serve-debug", "serve-info"])
def test_the_real_server_logs_no_secret(debug: bool) -> None:
    """The serve command's own logging, on normal, FATAL and malformed requests."""
    world, extra = _world_with_secrets("selfhosted-legacy-xr-v1", fn.run, staged=False)
    world.run(10)
    reqs = []
    for change in ({}, {"clusterNamespace": "elsewhere"}, {"storage": {"ebs": {"values": []}}}):
        r = world.request()
        r.observed.composite.resource.fields["spec"].struct_value.update(change)
        r.observed.composite.resource.fields["status"].struct_value.Clear()  # results, so logs
        world._fill(r, fn.run(r))
        add_credentials(r)
        for obj in extra:
            r.required_resources["sa-secret"].items.add().resource.update(obj)
        reqs.append(r.SerializeToString())
    texts = []
    with gen.serve("--insecure", *(["--debug"] if debug else [])) as served:
        with grpc.insecure_channel(served.address) as ch:
            call = ch.unary_unary(gen.RUN_FUNCTION, request_serializer=None, response_deserializer=None)
            for payload in [*reqs, reqs[0][: len(reqs[0]) // 2], reqs[0][:-7]]:
                try:
                    texts += encodings(fnv1.RunFunctionResponse.FromString(call(payload, timeout=10)))
                except grpc.RpcError as err:
                    texts.append(str(err.details()))  # type: ignore[attr-defined]
        served.proc.terminate()
        served.proc.wait(timeout=15)
        log = served.log()
    assert "Plugin" in log and "invalid input" in log  # the server did log these calls
    assert leaks([log, *texts], world.required) == []
    assert carried([p.decode("latin-1") for p in reqs], world.required)


# --- one namespace's objects never serve another's XR ---------------------------------------


def _rsa_public_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def _intruders(world: InMemoryCrossplane, namespace: str) -> list[dict[str, Any]]:
    """Copies of the cluster's objects in another namespace, each different where it matters."""
    out = []
    for obj in world.required:
        other = copy.deepcopy(obj)
        other["metadata"]["namespace"] = namespace
        if other["kind"] == "Secret":
            other["data"] = {"tls.crt": gen.b64(_rsa_public_pem()), "tls.key": gen.b64(CA_KEY)}
        if other["kind"] in {"AWSCluster", "AWSManagedControlPlane"}:
            other["spec"]["region"] = "ap-south-1"
            other["spec"].setdefault("network", {}).setdefault("vpc", {})["id"] = "vpc-1ntruder0000000"
        if other["kind"] == "Cluster":
            other["spec"]["clusterNetwork"] = {"pods": {"cidrBlocks": ["172.31.0.0/16"]}}
        out.append(other)
    return out


@pytest.mark.parametrize("name", ["selfhosted-legacy-xr-v1", "calico-legacy-claim-v1", "selfhosted-full", "calico-legacy-claim"])
def test_objects_of_another_namespace_are_never_used(name: str) -> None:
    """Same-named cluster objects elsewhere, listed first (1.x label mode, or a hostile caller)."""
    world = by_name(name).world(staged=False)
    intruders = _intruders(world, "intruder")
    world.required = intruders + world.required

    def hostile(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        # Every intruder, first, under every requirement the caller answered.
        for field in (req.required_resources, req.extra_resources):
            for sel_name in list(field):
                items = field[sel_name].items
                own = [fnv1.Resource(resource=i.resource) for i in items]
                del items[:]
                for obj in intruders:
                    items.add().resource.update(obj)
                for r in own:
                    items.add().CopyFrom(r)
        return fn.run(req)

    world.runner = hostile
    world.run(16)
    assert world.xr_ready
    text = json.dumps(world.xr) + json.dumps([c.obj for c in world.composed.values()])
    for marker in ("intruder", "vpc-1ntruder", "ap-south-1", "172.31.0.0/16"):
        assert marker not in text, marker
    if "irsa-jwks" in world.composed:
        intruder_key = next(o for o in intruders if o["kind"] == "Secret")["data"]["tls.crt"]
        assert world.composed["irsa-jwks"].obj["spec"]["forProvider"]["content"] != jwks_document(
            base64.b64decode(intruder_key)
        )


@pytest.mark.parametrize("scenario", [by_name(n) for n in ("selfhosted-full", "calico-legacy-claim", "selfhosted-legacy-xr")], ids=lambda s: s.name)
def test_required_resources_are_asked_for_in_the_xrs_namespace_only(scenario: Any) -> None:
    """Every by-name requirement names the cluster's namespace, whatever the Cluster's refs say."""
    world = scenario.world(staged=False)
    cluster_obj = next(o for o in world.required if o["kind"] == "Cluster")
    own_ns = cluster_obj["metadata"]["namespace"]
    # A v1beta1 ref carries a namespace; CAPI's webhook keeps it equal to the Cluster's, but
    # a Cluster written around the webhook (or a buggy controller) can name another.
    gen.cluster_to(cluster_obj, "v1beta1")
    for ref in ("controlPlaneRef", "infrastructureRef"):
        cluster_obj["spec"][ref]["namespace"] = "kube-system"
    versions = {**world.step_input.get("clusterAPI", {}), "cluster": cluster_obj["apiVersion"]}
    world.step_input = {**world.step_input, "clusterAPI": versions}
    control_plane = next(o for o in world.required if o["kind"] == "KubeadmControlPlane")
    cluster_obj["spec"]["controlPlaneRef"]["apiVersion"] = control_plane["apiVersion"]
    req = world.request()
    rsp = fn.run(req)
    world._fill(req, rsp)
    rsp = fn.run(req)
    # The Cluster was read, so its refs were followed.
    assert {"control-plane", "infrastructure"} <= set(rsp.requirements.resources)
    for name, sel in rsp.requirements.resources.items():
        if name == REQ_ROLLOUTS:
            # ClusterPluginRollouts are cluster-scoped (input.fleet.rollouts): no namespace.
            assert (sel.kind, sel.namespace) == ("ClusterPluginRollout", ""), name
            continue
        assert sel.namespace == own_ns, f"{scenario.name}: requirement {name} asks for namespace {sel.namespace!r}"
    for name, sel in rsp.requirements.extra_resources.items():
        # Crossplane 1.x selectors carry no namespace: those are label selectors, filtered after.
        assert sel.WhichOneof("match") == "match_labels", name


@pytest.mark.parametrize("xr_kind", ["namespaced", "legacy-claim"])
def test_an_xr_cannot_name_a_cluster_in_another_namespace(xr_kind: str) -> None:
    xr = gen.make_xr(xr_kind, "team-a", {"clusterName": "demo", "clusterNamespace": "team-b", "storage": {"ebs": {}}})
    world = InMemoryCrossplane(xr, gen.cluster_objects("kubeadm", "demo", "team-b"))
    rec = world.reconcile()
    assert rec.fatal is not None and rec.fatal.startswith("spec.clusterNamespace: "), rec.fatal
    assert world.composed == {}
