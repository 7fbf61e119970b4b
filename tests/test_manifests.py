"""The shipped manifests (apis/, package/, examples/) against real CRDs and spec.py.

- every Cluster API / CAPA / Crossplane object under examples/*/required/ and every
  XRD and Composition under apis/ validates against its real CRD (tests/kube_schema);
- each Composition's pipeline input validates against our Input CRD and parses with
  parse_input;
- each example XR / claim validates against its XRD's schema and parses with parse_spec;
- the XRD and Input CRD schemas mirror the Pydantic models of function/spec.py (field
  names, enums, required fields, scalar defaults), and accept and reject the same specs;
- package/crossplane.yaml and the aggregated ClusterRole are what Crossplane needs (the
  Configuration packages in apis/v1 and apis/v2: tests/test_package.py).
"""

from __future__ import annotations

import base64
import copy
import enum
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, TypeAdapter

from function.spec import ClusterPluginSpec, parse_input, parse_spec
from function.spec_base import CROSSPLANE_SPEC_FIELDS, InvalidInputError
from function.step_input import StepInput
from tests.kube_schema import get_registry, validate, validate_with_schema

ROOT = Path(__file__).resolve().parent.parent
APIS = ROOT / "apis"
EXAMPLES = ROOT / "examples"
PACKAGE = ROOT / "package"

XRD_V2 = APIS / "v2" / "definition.yaml"
XRD_V1 = APIS / "v1" / "definition.yaml"
COMPOSITION_V2 = APIS / "v2" / "composition.yaml"
COMPOSITION_V1 = APIS / "v1" / "composition.yaml"
# The legacy example's own Composition: its CAPI objects are in the v1beta1 contract.
EXAMPLE_COMPOSITION = EXAMPLES / "calico-legacy-claim" / "composition.yaml"
INPUT_CRD = PACKAGE / "input" / "fn.clusterplugin.dev_inputs.yaml"
CLUSTER_ROLE = APIS / "rbac" / "clusterrole.yaml"
FUNCTION_NAME = "function-cluster-plugin"
# What the Compositions call: the name Crossplane gives the function package
# (xpkg.crossplane.io/function-cluster-plugin/function-cluster-plugin) when it installs it.
FUNCTION_REF = "function-cluster-plugin-function-cluster-plugin"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"


def _load(path: Path) -> dict[str, Any]:
    docs = [
        d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None
    ]
    assert len(docs) == 1, (
        f"{path.relative_to(ROOT)}: expected one YAML document, got {len(docs)}"
    )
    assert isinstance(docs[0], dict), f"{path.relative_to(ROOT)}: not a mapping"
    return docs[0]


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _schema(xrd_or_crd: dict[str, Any], version: str = "v1alpha1") -> dict[str, Any]:
    for v in xrd_or_crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    msg = f"{xrd_or_crd['metadata']['name']} has no version {version}"
    raise AssertionError(msg)


def _xrd_schema(path: Path) -> dict[str, Any]:
    return _schema(_load(path))


def _input_schema() -> dict[str, Any]:
    return _schema(_load(INPUT_CRD))


def _ours(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without the fields Crossplane itself writes (what parse_spec judges)."""
    return {k: v for k, v in spec.items() if k not in CROSSPLANE_SPEC_FIELDS}


REQUIRED_FILES = sorted(EXAMPLES.glob("*/required/*.yaml"))
# Core Secrets have no CRD: test_sa_secret_is_a_capi_service_account_key_pair
# checks them.
REQUIRED_CRD_FILES = [p for p in REQUIRED_FILES if _load(p)["kind"] != "Secret"]
# The XRDs and Compositions; crossplane.yaml beside them is the Configuration package's metadata
# (tests/test_package.py).
API_FILES = sorted(p for p in APIS.glob("v*/*.yaml") if p.name != "crossplane.yaml")
# Render scenarios: the example folders with an XR (production/ only shows the runtime wiring).
SCENARIOS = sorted(p for p in EXAMPLES.iterdir() if (p / "xr.yaml").is_file())
COMPOSITIONS = [COMPOSITION_V2, COMPOSITION_V1]


def _example_xrs() -> list[tuple[Path, Path]]:
    """(example, its XRD): xr.yaml by kind, claim.yaml -> the v1 XRD."""
    out = []
    for scenario in SCENARIOS:
        for path in sorted(scenario.glob("*.yaml")):
            if path.name in {"functions.yaml", "composition.yaml"}:
                # The Function for `crossplane render` (checked in test_render) and an
                # example's own Composition (test_the_v1beta1_examples_composition_...).
                continue
            obj = _load(path)
            if path.name == "claim.yaml":
                out.append((path, XRD_V1))
            elif obj["kind"] == "XClusterPlugin":
                out.append((path, XRD_V1))
            else:
                out.append((path, XRD_V2))
    return out


EXAMPLE_XRS = _example_xrs()


def test_the_fixture_lists_are_not_empty() -> None:
    # Guards the parametrized tests below against silently testing nothing.
    assert len(REQUIRED_FILES) >= 10
    assert len(REQUIRED_FILES) - len(REQUIRED_CRD_FILES) == 5  # the <cluster>-sa Secrets
    assert {p.name for p in SCENARIOS} >= {
        "selfhosted-full",
        "calico-legacy-claim",
        "external-eks",
        "eks-pod-identity",
        "eks-pod-identity-legacy",
        "external-dns",
        "cloudfront-shared",
        "cloudfront-managed",
    }
    assert len(EXAMPLE_XRS) == 9
    assert {p.relative_to(APIS).as_posix() for p in API_FILES} == {
        "v1/composition.yaml",
        "v1/definition.yaml",
        "v1/rollout-composition.yaml",
        "v1/rollout-definition.yaml",
        "v2/composition.yaml",
        "v2/definition.yaml",
        "v2/rollout-composition.yaml",
        "v2/rollout-definition.yaml",
    }


# ------------------------------------------------------------------------------
# real CRDs
# ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", REQUIRED_CRD_FILES, ids=_rel)
def test_required_object_validates_against_its_crd(path: Path) -> None:
    obj = _load(path)
    errors = validate(obj)
    assert errors == [], f"{_rel(path)}:\n  " + "\n  ".join(errors)


@pytest.mark.parametrize("path", API_FILES, ids=_rel)
def test_api_object_validates_against_crossplane_crd(path: Path) -> None:
    obj = _load(path)
    assert obj["apiVersion"].startswith("apiextensions.crossplane.io/")
    errors = validate(obj)
    assert errors == [], f"{_rel(path)}:\n  " + "\n  ".join(errors)


def test_crd_validation_is_not_vacuous() -> None:
    # The engine must reject a broken copy of an example, else the tests above prove
    # nothing.
    kcp = _load(EXAMPLES / "selfhosted-full" / "required" / "kubeadmcontrolplane.yaml")
    broken = copy.deepcopy(kcp)
    broken["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"][
        "extraArgs"
    ] = {
        # the v1beta1 map form, not v1beta2's list of {name, value}
        "service-account-issuer": "https://example.com"
    }
    assert validate(broken)
    awscluster = _load(EXAMPLES / "selfhosted-full" / "required" / "awscluster.yaml")
    broken = copy.deepcopy(awscluster)
    broken["status"]["networkStatus"]["securityGroups"]["node"]["ingressRule"][0][
        "protocol"
    ] = "4x"
    assert validate(broken)


# ------------------------------------------------------------------------------
# definitions and compositions
# ------------------------------------------------------------------------------


def test_v2_xrd_is_namespaced_clusterplugin() -> None:
    xrd = _load(XRD_V2)
    assert xrd["apiVersion"] == "apiextensions.crossplane.io/v2"
    assert xrd["metadata"]["name"] == "clusterplugins.clusterplugin.dev"
    spec = xrd["spec"]
    assert spec["group"] == "clusterplugin.dev"
    assert spec["scope"] == "Namespaced"
    assert (spec["names"]["kind"], spec["names"]["plural"]) == (
        "ClusterPlugin",
        "clusterplugins",
    )
    assert "claimNames" not in spec
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["referenceable"]) == (
        "v1alpha1",
        True,
        True,
    )
    assert (
        "clusterNamespace"
        not in _xrd_schema(XRD_V2)["properties"]["spec"]["properties"]
    )


def test_v1_xrd_is_legacy_xclusterplugin_with_claim() -> None:
    xrd = _load(XRD_V1)
    assert xrd["apiVersion"] == "apiextensions.crossplane.io/v1"
    assert xrd["metadata"]["name"] == "xclusterplugins.clusterplugin.dev"
    spec = xrd["spec"]
    assert spec["group"] == "clusterplugin.dev"
    assert spec.get("scope", "LegacyCluster") == "LegacyCluster"
    assert (spec["names"]["kind"], spec["names"]["plural"]) == (
        "XClusterPlugin",
        "xclusterplugins",
    )
    assert (spec["claimNames"]["kind"], spec["claimNames"]["plural"]) == (
        "ClusterPlugin",
        "clusterplugins",
    )
    props = _xrd_schema(XRD_V1)["properties"]["spec"]["properties"]
    assert "clusterNamespace" in props


def test_xrd_schemas_differ_only_by_cluster_namespace() -> None:
    v1 = copy.deepcopy(_xrd_schema(XRD_V1))
    v2 = copy.deepcopy(_xrd_schema(XRD_V2))
    del v1["properties"]["spec"]["properties"]["clusterNamespace"]
    for s in (v1, v2):
        s.pop("description", None)
        s["properties"]["spec"]["properties"]["clusterName"].pop("description", None)
    assert v1 == v2


@pytest.mark.parametrize("path", [XRD_V2, XRD_V1], ids=_rel)
def test_xrd_files_say_install_only_one(path: Path) -> None:
    assert "Install ONE of the two definitions" in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", [XRD_V2, XRD_V1], ids=_rel)
def test_xrd_printer_columns(path: Path) -> None:
    (version,) = _load(path)["spec"]["versions"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["CLUSTER"]["jsonPath"] == ".spec.clusterName"
    assert (
        columns["PLUGINS-READY"]["jsonPath"]
        == ".status.conditions[?(@.type=='PluginsReady')].status"
    )
    assert (
        columns["SG-READY"]["jsonPath"]
        == ".status.conditions[?(@.type=='SecurityGroupsReady')].status"
    )
    assert columns["ISSUER"]["jsonPath"] == ".status.issuerURL"
    assert columns["ISSUER"]["priority"] == 1


@pytest.mark.parametrize(
    ("composition", "xrd"),
    [(COMPOSITION_V2, XRD_V2), (COMPOSITION_V1, XRD_V1)],
    ids=_rel,
)
def test_composition_targets_its_xrd_and_calls_the_function(
    composition: Path, xrd: Path
) -> None:
    comp, definition = _load(composition), _load(xrd)
    spec = comp["spec"]
    (version,) = definition["spec"]["versions"]
    assert spec["compositeTypeRef"] == {
        "apiVersion": f"{definition['spec']['group']}/{version['name']}",
        "kind": definition["spec"]["names"]["kind"],
    }
    assert (
        definition["spec"]["defaultCompositionRef"]["name"] == comp["metadata"]["name"]
    )
    assert spec["mode"] == "Pipeline"
    steps = spec["pipeline"]
    assert [s["step"] for s in steps] == ["cluster-plugin"], (
        "one step only (no function-auto-ready)"
    )
    assert steps[0]["functionRef"]["name"] == FUNCTION_REF
    assert _load(PACKAGE / "crossplane.yaml")["metadata"]["name"] == FUNCTION_NAME


@pytest.mark.parametrize("composition", COMPOSITIONS, ids=_rel)
def test_composition_input_validates_against_input_crd(composition: Path) -> None:
    step_input = _load(composition)["spec"]["pipeline"][0]["input"]
    assert (step_input["apiVersion"], step_input["kind"]) == (
        "fn.clusterplugin.dev/v1alpha1",
        "Input",
    )
    errors = validate_with_schema(step_input, _input_schema())
    assert errors == [], "\n".join(errors)


@pytest.mark.parametrize("composition", COMPOSITIONS, ids=_rel)
def test_composition_input_parses_and_spells_out_the_defaults(
    composition: Path,
) -> None:
    step_input = _load(composition)["spec"]["pipeline"][0]["input"]
    parsed = parse_input(step_input)
    defaults = parse_input(
        {"apiVersion": step_input["apiVersion"], "kind": step_input["kind"]}
    )
    # One field is not the default: the Configuration ships the ClusterPluginRollout XRD, so
    # its Composition follows rollouts.
    assert parsed.fleet.rollouts
    assert parsed.model_copy(update={"fleet": defaults.fleet}) == defaults
    shown = set(step_input) - {"apiVersion", "kind"}
    assert shown == {
        "namePrefix",
        "ttl",
        "awsProviderConfig",
        "charts",
        "clusterAPI",
        "fleet",
        "protectCluster",
    }
    # Every chart with a default source; the pod identity agent has none (no public Helm
    # repository): the user adds their mirror (docs/eks.md, "EKS (`AWSManagedControlPlane`)").
    fields = type(parsed.charts).model_fields.items()
    assert set(step_input["charts"]) == {f.alias or n for n, f in fields if f.default is not None}
    assert "podIdentityAgent" not in step_input["charts"]


def test_compositions_share_one_input() -> None:
    inputs = [_load(p)["spec"]["pipeline"][0]["input"] for p in COMPOSITIONS]
    assert inputs[0] == inputs[1]


# ------------------------------------------------------------------------------
# example XRs and claims
# ------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "xrd"), EXAMPLE_XRS, ids=_rel)
def test_example_spec_validates_against_its_xrd(path: Path, xrd: Path) -> None:
    obj = _load(path)
    definition = _load(xrd)
    spec_names = (
        definition["spec"]["claimNames"]
        if path.name == "claim.yaml"
        else definition["spec"]["names"]
    )
    assert obj["kind"] == spec_names["kind"]
    assert obj["apiVersion"] == "clusterplugin.dev/v1alpha1"
    candidate = {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": obj["metadata"],
        "spec": _ours(obj["spec"]),
    }
    errors = validate_with_schema(candidate, _xrd_schema(xrd))
    assert errors == [], f"{_rel(path)}:\n  " + "\n  ".join(errors)


@pytest.mark.parametrize(("path", "xrd"), EXAMPLE_XRS, ids=_rel)
def test_example_spec_parses(path: Path, xrd: Path) -> None:
    spec = _load(path)["spec"]
    parsed = parse_spec(spec)
    assert parsed.cluster_name == spec["clusterName"]
    if xrd == XRD_V2:
        assert "clusterNamespace" not in spec


def test_legacy_xr_is_the_claims_composite() -> None:
    claim = _load(EXAMPLES / "calico-legacy-claim" / "claim.yaml")
    xr = _load(EXAMPLES / "calico-legacy-claim" / "xr.yaml")
    assert "namespace" not in xr["metadata"]
    labels = xr["metadata"]["labels"]
    assert labels["crossplane.io/claim-name"] == claim["metadata"]["name"]
    assert labels["crossplane.io/claim-namespace"] == claim["metadata"]["namespace"]
    assert xr["spec"]["claimRef"] == {
        "apiVersion": claim["apiVersion"],
        "kind": claim["kind"],
        "name": claim["metadata"]["name"],
        "namespace": claim["metadata"]["namespace"],
    }
    # The claim selects the example's own Composition (its CAPI serves only v1beta1), and
    # Crossplane copies the reference onto the XR.
    own = _load(EXAMPLE_COMPOSITION)["metadata"]["name"]
    assert claim["spec"]["compositionRef"] == {"name": own}
    assert xr["spec"]["compositionRef"] == {"name": own}
    assert _ours(xr["spec"]) == _ours(claim["spec"])


def test_the_v1beta1_examples_composition_asks_for_what_its_objects_are() -> None:
    """examples/calico-legacy-claim/composition.yaml: the shipped legacy Composition under its own
    name, asking for Clusters and KubeadmControlPlanes in v1beta1, the version its objects are in."""
    own, shipped = _load(EXAMPLE_COMPOSITION), _load(COMPOSITION_V1)
    assert own["metadata"]["name"] != shipped["metadata"]["name"]
    assert own["metadata"]["labels"] == shipped["metadata"]["labels"]
    (step,), (shipped_step,) = own["spec"]["pipeline"], shipped["spec"]["pipeline"]
    assert {**own["spec"], "pipeline": None} == {**shipped["spec"], "pipeline": None}
    assert {**step, "input": None} == {**shipped_step, "input": None}
    assert validate(own) == []
    assert validate_with_schema(step["input"], _input_schema()) == []
    parsed = parse_input(step["input"])
    defaults = parse_input(shipped_step["input"])
    assert parsed.model_copy(update={"cluster_api": defaults.cluster_api}) == defaults
    required = {
        o["kind"]: o["apiVersion"]
        for o in map(_load, sorted((EXAMPLES / "calico-legacy-claim" / "required").glob("*.yaml")))
    }
    capi = parsed.cluster_api
    assert (capi.cluster, capi.kubeadm_control_plane, capi.aws_cluster) == (
        required["Cluster"],
        required["KubeadmControlPlane"],
        required["AWSCluster"],
    )
    assert capi.cluster.endswith("/v1beta1") and capi.kubeadm_control_plane.endswith("/v1beta1")


def test_the_pod_identity_examples_composition_names_the_mirrored_agent_chart() -> None:
    """examples/eks-pod-identity-legacy/composition.yaml: the shipped legacy Composition under its
    own name, with the eks-pod-identity-agent chart (no default: no public repository) and
    Crossplane 1.x told to list AWSManagedControlPlanes; nothing else changed."""
    own = _load(EXAMPLES / "eks-pod-identity-legacy" / "composition.yaml")
    shipped = _load(COMPOSITION_V1)
    assert own["metadata"]["name"] != shipped["metadata"]["name"]
    assert own["metadata"]["labels"] == shipped["metadata"]["labels"]
    (step,), (shipped_step,) = own["spec"]["pipeline"], shipped["spec"]["pipeline"]
    assert {**own["spec"], "pipeline": None} == {**shipped["spec"], "pipeline": None}
    assert {**step, "input": None} == {**shipped_step, "input": None}
    assert validate(own) == []
    assert validate_with_schema(step["input"], _input_schema()) == []
    parsed, defaults = parse_input(step["input"]), parse_input(shipped_step["input"])
    agent = parsed.charts.pod_identity_agent
    assert agent is not None and (agent.name, agent.version) == ("eks-pod-identity-agent", "1.2.0")
    assert parsed.cluster_api.legacy_control_plane_kind == "AWSManagedControlPlane"
    unchanged = parsed.model_copy(
        update={
            "charts": parsed.charts.model_copy(update={"pod_identity_agent": None}),
            "cluster_api": defaults.cluster_api,
        }
    )
    assert unchanged == defaults
    xr = _load(EXAMPLES / "eks-pod-identity-legacy" / "xr.yaml")
    assert xr["spec"]["compositionRef"] == {"name": own["metadata"]["name"]}


def _cluster_namespace(scenario: Path) -> str:
    xr = _load(scenario / "xr.yaml")
    # A namespaced XR's own namespace, a claim's, or an unclaimed legacy XR's clusterNamespace.
    return (
        xr["metadata"].get("namespace")
        or xr["metadata"].get("labels", {}).get("crossplane.io/claim-namespace")
        or xr["spec"]["clusterNamespace"]
    )


def _ref_group(ref: dict[str, Any]) -> str:
    return ref.get("apiGroup") or ref["apiVersion"].rpartition("/")[0]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_required_objects_belong_to_the_examples_cluster(scenario: Path) -> None:
    xr = _load(scenario / "xr.yaml")
    cluster_name = xr["spec"]["clusterName"]
    namespace = _cluster_namespace(scenario)
    objects = [_load(p) for p in sorted((scenario / "required").glob("*.yaml"))]
    by_kind = {o["kind"]: o for o in objects}
    assert all(o["metadata"]["namespace"] == namespace for o in objects)
    cluster = by_kind["Cluster"]
    assert cluster["metadata"]["name"] == cluster_name
    for ref_field in ("controlPlaneRef", "infrastructureRef"):
        ref = cluster["spec"][ref_field]
        target = by_kind[ref["kind"]]
        assert target["metadata"]["name"] == ref["name"]
        assert target["apiVersion"].rpartition("/")[0] == _ref_group(ref)
        # CAPI labels these (not the Cluster): Crossplane 1.x can only select by label.
        assert target["metadata"]["labels"][CLUSTER_NAME_LABEL] == cluster_name
    mode = parse_spec(xr["spec"]).irsa.mode.value
    has_secret = "Secret" in by_kind
    assert has_secret == (mode == "SelfHosted"), (
        "a <cluster>-sa Secret exactly for SelfHosted IRSA"
    )
    if has_secret:
        assert by_kind["Secret"]["metadata"]["name"] == f"{cluster_name}-sa"
        assert (
            by_kind["Secret"]["metadata"]["labels"][CLUSTER_NAME_LABEL] == cluster_name
        )


SA_SECRETS = sorted(EXAMPLES.glob("*/required/sa-secret.yaml"))


@pytest.mark.parametrize("path", SA_SECRETS, ids=_rel)
def test_sa_secret_is_a_capi_service_account_key_pair(path: Path) -> None:
    assert "THROWAWAY" in path.read_text(encoding="utf-8")
    secret = _load(path)
    assert (secret["apiVersion"], secret["kind"]) == ("v1", "Secret")
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert set(secret["data"]) == {"tls.crt", "tls.key"}
    crt = base64.b64decode(secret["data"]["tls.crt"], validate=True).decode()
    key = base64.b64decode(secret["data"]["tls.key"], validate=True).decode()
    assert crt.startswith("-----BEGIN PUBLIC KEY-----\n")
    assert crt.rstrip().endswith("-----END PUBLIC KEY-----")
    assert re.match(r"-----BEGIN (RSA )?PRIVATE KEY-----\n", key)
    # An RSA-2048 SubjectPublicKeyInfo is 294 bytes of DER.
    der = base64.b64decode("".join(crt.strip().splitlines()[1:-1]))
    assert len(der) == 294
    try:
        from cryptography.hazmat.primitives import serialization
    except ImportError:  # pragma: no cover - cryptography is a runtime dependency
        return
    public = serialization.load_pem_public_key(crt.encode())
    private = serialization.load_pem_private_key(key.encode(), password=None)
    assert public.public_numbers() == private.public_key().public_numbers()  # type: ignore[union-attr]
    assert public.key_size == 2048  # type: ignore[union-attr]


def test_sa_secrets_are_distinct_keys() -> None:
    crts = {_load(p)["data"]["tls.crt"] for p in SA_SECRETS}
    assert len(crts) == len(SA_SECRETS) >= 2


# ------------------------------------------------------------------------------
# the schemas mirror function/spec.py
# ------------------------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    """Strip Optional / Annotated from a field annotation."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _mirror_problems(
    model: type[BaseModel], schema: dict[str, Any], where: str
) -> Iterator[str]:
    """Where an openAPIV3Schema object node and a Pydantic model disagree."""
    fields = {(f.alias or name): (name, f) for name, f in model.model_fields.items()}
    props = schema.get("properties", {})
    if set(fields) != set(props):
        yield f"{where}: model fields {sorted(fields)} != schema {sorted(props)}"
    required = {alias for alias, (_, f) in fields.items() if f.is_required()}
    if required != set(schema.get("required", [])):
        wanted = sorted(schema.get("required", []))
        yield f"{where}: model requires {sorted(required)}, schema {wanted}"
    for alias, (_name, f) in fields.items():
        node = props.get(alias)
        if node is None:
            continue
        here = f"{where}.{alias}"
        inner = _unwrap(f.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            if node.get("type") != "object":
                yield f"{here}: schema type {node.get('type')!r}, model is an object"
            else:
                yield from _mirror_problems(inner, node, here)
            continue
        allowed = None
        if isinstance(inner, type) and issubclass(inner, enum.Enum):
            allowed = {m.value for m in inner}
        elif typing.get_origin(inner) is typing.Literal:
            allowed = set(typing.get_args(inner))
        if allowed is not None and set(node.get("enum", [])) != allowed:
            yield f"{here}: schema enum {node.get('enum')} != model {sorted(allowed)}"
        if typing.get_origin(inner) is dict and node.get("type") != "object":
            yield f"{here}: schema type {node.get('type')!r}, model is a map"
        if f.is_required():
            continue
        default = f.get_default(call_default_factory=False)
        if (
            f.default_factory is None
            and default not in (None, "")
            and "default" not in node
        ):
            yield f"{here}: model default {default!r} missing from the schema"
        if "default" in node and f.default_factory is None:
            # Compare through the field's type, so "30s" in the schema equals 30 in the model
            # (the field alone: a model may have other fields that are required).
            field_type = typing.Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
            got = TypeAdapter(field_type).validate_python(node["default"])
            if got != default:
                shown = node["default"]
                yield f"{here}: schema default {shown!r} means {got!r}, not {default!r}"


@pytest.mark.parametrize("xrd", [XRD_V2, XRD_V1], ids=_rel)
def test_xrd_spec_schema_mirrors_cluster_plugin_spec(xrd: Path) -> None:
    spec_schema = copy.deepcopy(_xrd_schema(xrd)["properties"]["spec"])
    if xrd == XRD_V2:
        # A namespaced XR uses its own namespace: the field does not exist there.
        spec_schema["properties"]["clusterNamespace"] = {"type": "string"}
    problems = list(_mirror_problems(ClusterPluginSpec, spec_schema, "spec"))
    assert problems == [], "\n".join(problems)


def test_input_crd_schema_mirrors_step_input() -> None:
    problems = list(_mirror_problems(StepInput, _input_schema(), "input"))
    assert problems == [], "\n".join(problems)


def test_mirror_check_is_not_vacuous() -> None:
    schema = copy.deepcopy(_xrd_schema(XRD_V1)["properties"]["spec"])
    schema["properties"]["irsa"]["properties"]["mode"]["enum"].append("Typo")
    schema["properties"]["securityGroups"]["properties"]["manage"]["default"] = "Never"
    del schema["properties"]["storage"]["properties"]["efs"]
    problems = list(_mirror_problems(ClusterPluginSpec, schema, "spec"))
    assert len(problems) == 3, problems


BASE = {"clusterName": "demo"}

_SHARED = {"distribution": "Shared", "domain": "oidc.example.com", "bucketName": "acme-oidc"}
_MANAGED = {
    "distribution": "Managed",
    "domain": "oidc.example.com",
    "certificateArn": "arn:aws:acm:us-east-1:111122223333:certificate/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
}
_EXTERNAL = {
    "mode": "External",
    "issuerURL": "https://x",
    "oidcProviderARN": "arn:aws:iam::1:oidc-provider/x",
}

# (description, spec) -> whether parse_spec accepts it; the XRD schemas must agree.
SPEC_CASES: list[tuple[str, dict[str, Any]]] = [
    ("minimal", {}),
    (
        "everything",
        {
            "region": "us-gov-west-1",
            "networking": {
                "calico": {
                    "version": "v3.32.1",
                    "encapsulation": "None",
                    "cidr": "10.0.0.0/16",
                    "values": {"installation": {"registry": "quay.io"}},
                }
            },
            "storage": {
                "ebs": {
                    "version": "2.64.0",
                    "defaultStorageClass": True,
                    "values": {"a": [1]},
                },
                "efs": {"fileSystemId": "fs-0123456789abcdef0"},
            },
            "ingress": {"awsLoadBalancerController": {"version": "3.5.0-rc.1"}},
            "irsa": {
                "mode": "SelfHosted",
                "bucketName": "my-issuer-bucket",
                "podIdentityWebhook": {"install": False, "certManager": "Existing"},
            },
            "securityGroups": {"manage": "Always"},
        },
    ),
    ("two CNIs", {"networking": {"amazonVPC": {}, "calico": {}}}),
    (
        "External without issuerURL",
        {
            "irsa": {
                "mode": "External",
                "oidcProviderARN": "arn:aws:iam::1:oidc-provider/x",
            }
        },
    ),
    (
        "External without oidcProviderARN",
        {"irsa": {"mode": "External", "issuerURL": "https://x"}},
    ),
    (
        "External complete",
        {
            "irsa": {
                "mode": "External",
                "issuerURL": "https://x",
                "oidcProviderARN": "arn:aws:iam::1:oidc-provider/x",
            }
        },
    ),
    ("issuerURL when SelfHosted", {"irsa": {"issuerURL": "https://x"}}),
    (
        "oidcProviderARN when Disabled",
        {"irsa": {"mode": "Disabled", "oidcProviderARN": "arn"}},
    ),
    (
        "bucketName when Disabled",
        {"irsa": {"mode": "Disabled", "bucketName": "my-bucket"}},
    ),
    ("dotted bucketName", {"irsa": {"bucketName": "my.bucket"}}),
    ("short bucketName", {"irsa": {"bucketName": "ab"}}),
    ("reserved bucketName", {"irsa": {"bucketName": "xn--bucket"}}),
    ("unknown IRSA mode", {"irsa": {"mode": "Pod"}}),
    ("unknown encapsulation", {"networking": {"calico": {"encapsulation": "GRE"}}}),
    ("unknown SG mode", {"securityGroups": {"manage": "Sometimes"}}),
    (
        "unknown certManager mode",
        {"irsa": {"podIdentityWebhook": {"certManager": "Maybe"}}},
    ),
    ("bad region", {"region": "US-EAST-1"}),
    ("bad chart version", {"storage": {"ebs": {"version": "latest"}}}),
    ("bad file system id", {"storage": {"efs": {"fileSystemId": "fs-XYZ"}}}),
    ("bad CIDR", {"networking": {"calico": {"cidr": "10.0.0.0"}}}),
    (
        "values not an object",
        {"ingress": {"awsLoadBalancerController": {"values": ["a"]}}},
    ),
    ("typo at the top", {"stroage": {}}),
    ("typo inside", {"networking": {"amazonVpc": {}}}),
    (
        "external-dns complete",
        {
            "dns": {
                "externalDNS": {
                    "version": "1.21.1",
                    "hostedZoneIDs": ["Z0123456789ABC", "Z" + "A" * 31],
                    "domainFilters": ["example.com", ".apps.example.org", "xn--bcher-kva.de"],
                    "policy": "sync",
                    "zoneType": "private",
                    "values": {"interval": "2m"},
                }
            }
        },
    ),
    ("external-dns without zones", {"dns": {"externalDNS": {}}}),
    ("external-dns with no zone", {"dns": {"externalDNS": {"hostedZoneIDs": []}}}),
    (
        "external-dns with 51 zones",
        {"dns": {"externalDNS": {"hostedZoneIDs": [f"Z{i:04d}" for i in range(51)]}}},
    ),
    (
        "hosted zone id with /hostedzone/",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["/hostedzone/Z0123456789ABC"]}}},
    ),
    ("lower-case zone id", {"dns": {"externalDNS": {"hostedZoneIDs": ["z0123456789abc"]}}}),
    ("zone id over 32", {"dns": {"externalDNS": {"hostedZoneIDs": ["Z" + "A" * 32]}}}),
    ("zone listed twice", {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1", "Z1"]}}}),
    (
        "upper-case domain filter",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1"], "domainFilters": ["Example.com"]}}},
    ),
    (
        "domain filter with a trailing dot",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1"], "domainFilters": ["example.com."]}}},
    ),
    (
        "domain filter label over 63",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1"], "domainFilters": ["a" * 64 + ".com"]}}},
    ),
    (
        "domain filter listed twice",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1"], "domainFilters": ["a.io", "a.io"]}}},
    ),
    (
        "unknown external-dns policy",
        {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1"], "policy": "delete"}}},
    ),
    ("unknown zone type", {"dns": {"externalDNS": {"hostedZoneIDs": ["Z1"], "zoneType": "both"}}}),
    ("typo in dns", {"dns": {"externalDns": {"hostedZoneIDs": ["Z1"]}}}),
    ("bad clusterName", {"clusterName": "Demo_1"}),
    *[
        (f"cloudfront: {case}", {"irsa": {**irsa, "hosting": hosting}})
        for case, irsa, hosting in (
            ("shared", {}, {"type": "CloudFront", "cloudFront": _SHARED}),
            (
                "shared, everything",
                {},
                {
                    "type": "CloudFront",
                    "cloudFront": {**_SHARED, "pathPrefix": "a/b", "bucketRegion": "eu-west-1"},
                },
            ),
            (
                "managed, everything",
                {"bucketName": "my-issuer-bucket"},
                {
                    "type": "CloudFront",
                    "cloudFront": {
                        **_MANAGED,
                        "pathPrefix": "issuers/v1.x_~y",
                        "hostedZoneId": "Z0123456789ABC",
                        "priceClass": "PriceClass_All",
                    },
                },
            ),
            ("S3Public", {}, {"type": "S3Public"}),
            ("hosting when External", _EXTERNAL, {"type": "S3Public"}),
            ("hosting when Disabled", {"mode": "Disabled"}, {}),
            ("type CloudFront alone", {}, {"type": "CloudFront"}),
            ("cloudFront with S3Public", {}, {"type": "S3Public", "cloudFront": _SHARED}),
            ("cloudFront without a type", {}, {"cloudFront": _SHARED}),
            ("unknown type", {}, {"type": "Akamai"}),
            (
                "shared without bucketName",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "bucketName": ""}},
            ),
            (
                "managed without certificateArn",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "certificateArn": ""}},
            ),
            (
                "no distribution",
                {},
                {"type": "CloudFront", "cloudFront": {"domain": "o.example.com", "bucketName": "b-1"}},
            ),
            (
                "certificate in eu-west-1",
                {},
                {
                    "type": "CloudFront",
                    "cloudFront": {
                        **_MANAGED,
                        "certificateArn": _MANAGED["certificateArn"].replace("us-east-1", "eu-west-1"),
                    },
                },
            ),
            (
                "certificate of another partition",
                {},
                {
                    "type": "CloudFront",
                    "cloudFront": {
                        **_MANAGED,
                        "certificateArn": _MANAGED["certificateArn"].replace("aws:", "aws-us-gov:"),
                    },
                },
            ),
            (
                "IAM server certificate",
                {},
                {
                    "type": "CloudFront",
                    "cloudFront": {
                        **_MANAGED,
                        "certificateArn": "arn:aws:iam::111122223333:server-certificate/x",
                    },
                },
            ),
            (
                "shared with certificateArn",
                {},
                {
                    "type": "CloudFront",
                    "cloudFront": {**_SHARED, "certificateArn": _MANAGED["certificateArn"]},
                },
            ),
            (
                "shared with hostedZoneId",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "hostedZoneId": "Z1"}},
            ),
            (
                "shared with priceClass",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "priceClass": "PriceClass_100"}},
            ),
            (
                "managed with bucketName",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "bucketName": "b-1"}},
            ),
            (
                "managed with bucketRegion",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "bucketRegion": "eu-west-1"}},
            ),
            (
                "domain with a scheme",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "domain": "https://o.example.com"}},
            ),
            (
                "upper-case domain",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "domain": "OIDC.example.com"}},
            ),
            (
                "one-label domain",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "domain": "localhost"}},
            ),
            (
                "path with ..",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "pathPrefix": "a/../b"}},
            ),
            (
                "path with a leading /",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "pathPrefix": "/a"}},
            ),
            (
                "path with //",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "pathPrefix": "a//b"}},
            ),
            (
                "bad zone id",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "hostedZoneId": "example.com"}},
            ),
            (
                "bad bucketRegion",
                {},
                {"type": "CloudFront", "cloudFront": {**_SHARED, "bucketRegion": "EU"}},
            ),
            (
                "unknown price class",
                {},
                {"type": "CloudFront", "cloudFront": {**_MANAGED, "priceClass": "Cheap"}},
            ),
            (
                "irsa.bucketName with Shared",
                {"bucketName": "my-issuer-bucket"},
                {"type": "CloudFront", "cloudFront": _SHARED},
            ),
        )
    ],
    ("empty clusterName", {"clusterName": ""}),
    ("long clusterName", {"clusterName": "a" * 64}),
]


def _parse_ok(spec: dict[str, Any]) -> bool:
    try:
        parse_spec(spec)
    except InvalidInputError:
        return False
    return True


@pytest.mark.parametrize("xrd", [XRD_V2, XRD_V1], ids=_rel)
@pytest.mark.parametrize(("case", "extra"), SPEC_CASES, ids=[c for c, _ in SPEC_CASES])
def test_xrd_schema_and_parse_spec_agree(
    xrd: Path, case: str, extra: dict[str, Any]
) -> None:
    spec = {**BASE, **extra}
    errors = validate_with_schema({"spec": spec}, _xrd_schema(xrd))
    assert (errors == []) == _parse_ok(spec), (
        f"{case}: parse_spec ok={_parse_ok(spec)}, XRD errors={errors}"
    )


def test_cluster_namespace_only_in_the_legacy_schema() -> None:
    spec = {**BASE, "clusterNamespace": "team-a"}
    assert _parse_ok(spec)
    assert validate_with_schema({"spec": spec}, _xrd_schema(XRD_V1)) == []
    assert validate_with_schema({"spec": spec}, _xrd_schema(XRD_V2))
    bad = {**BASE, "clusterNamespace": "Team_A"}
    assert not _parse_ok(bad)
    assert validate_with_schema({"spec": bad}, _xrd_schema(XRD_V1))


@pytest.mark.parametrize("xrd", [XRD_V2, XRD_V1], ids=_rel)
def test_xrd_cel_rule_forbids_two_cnis(xrd: Path) -> None:
    spec = {
        **BASE,
        "networking": {"amazonVPC": {}, "calico": {"encapsulation": "VXLAN"}},
    }
    errors = validate_with_schema({"spec": spec}, _xrd_schema(xrd))
    assert len(errors) == 1, errors
    assert errors[0].startswith("spec.networking:")
    assert "set at most one of amazonVPC and calico" in errors[0]
    # Each CNI alone passes: the rule (not some other check) is what rejected the pair.
    for cni in ("amazonVPC", "calico"):
        assert (
            validate_with_schema(
                {"spec": {**BASE, "networking": {cni: {}}}}, _xrd_schema(xrd)
            )
            == []
        )


@pytest.mark.parametrize("xrd", [XRD_V2, XRD_V1], ids=_rel)
def test_xrd_requires_cluster_name(xrd: Path) -> None:
    assert validate_with_schema({"spec": {"region": "us-east-1"}}, _xrd_schema(xrd))


INPUT_CASES: list[tuple[str, dict[str, Any]]] = [
    ("empty", {}),
    ("integer ttl", {"ttl": {"waiting": 15, "ready": 3600}}),
    ("duration ttl", {"ttl": {"waiting": "1m30s", "ready": "1h"}}),
    ("bad duration", {"ttl": {"waiting": "30 seconds"}}),
    ("empty duration", {"ttl": {"ready": ""}}),
    ("zero ttl", {"ttl": {"waiting": 0}}),
    ("ttl over a day", {"ttl": {"ready": 86401}}),
    ("prefix", {"namePrefix": "acme-"}),
    ("bad prefix", {"namePrefix": "Acme"}),
    ("long prefix", {"namePrefix": "a" * 21}),
    ("prefix S3 reserves", {"namePrefix": "sthree-acme"}),
    (
        "oci chart",
        {
            "charts": {
                "ebs": {
                    "repository": "oci://registry.example.com/charts",
                    "name": "aws-ebs-csi-driver",
                    "version": "2.64.0",
                    "pullSecretRef": {
                        "name": "creds",
                        "namespace": "crossplane-system",
                    },
                }
            }
        },
    ),
    (
        "ftp chart",
        {"charts": {"ebs": {"repository": "ftp://x", "name": "n", "version": "1.0.0"}}},
    ),
    (
        "chart without version",
        {"charts": {"ebs": {"repository": "https://x", "name": "n"}}},
    ),
    (
        "bad chart version",
        {
            "charts": {
                "calico": {"repository": "https://x", "name": "n", "version": "3"}
            }
        },
    ),
    (
        "unknown chart",
        {
            "charts": {
                "cilium": {"repository": "https://x", "name": "n", "version": "1.0.0"}
            }
        },
    ),
    (
        "namespaced provider config",
        {"awsProviderConfig": {"name": "team", "kind": "ProviderConfig"}},
    ),
    ("bad provider config kind", {"awsProviderConfig": {"kind": "Secret"}}),
    (
        "EKS legacy kind",
        {"clusterAPI": {"legacyControlPlaneKind": "AWSManagedControlPlane"}},
    ),
    ("bad legacy kind", {"clusterAPI": {"legacyControlPlaneKind": "Cluster"}}),
    ("typo", {"chart": {}}),
]


def _parse_input_ok(raw: dict[str, Any]) -> bool:
    try:
        parse_input(raw)
    except InvalidInputError:
        return False
    return True


@pytest.mark.parametrize(("case", "raw"), INPUT_CASES, ids=[c for c, _ in INPUT_CASES])
def test_input_crd_and_parse_input_agree(case: str, raw: dict[str, Any]) -> None:
    obj = {"apiVersion": "fn.clusterplugin.dev/v1alpha1", "kind": "Input", **raw}
    errors = validate_with_schema(obj, _input_schema())
    assert (errors == []) == _parse_input_ok(obj), (
        f"{case}: parse_input ok={_parse_input_ok(obj)}, CRD errors={errors}"
    )


def test_input_crd_is_for_fn_clusterplugin_dev() -> None:
    crd = _load(INPUT_CRD)
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "inputs.fn.clusterplugin.dev"
    assert crd["spec"]["group"] == "fn.clusterplugin.dev"
    assert crd["spec"]["names"]["kind"] == "Input"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == (
        "v1alpha1",
        True,
        True,
    )


# ------------------------------------------------------------------------------
# package and RBAC
# ------------------------------------------------------------------------------


def test_package_metadata() -> None:
    meta = _load(PACKAGE / "crossplane.yaml")
    assert (meta["apiVersion"], meta["kind"]) == (
        "meta.pkg.crossplane.io/v1",
        "Function",
    )
    assert meta["metadata"]["name"] == FUNCTION_NAME
    annotations = meta["metadata"]["annotations"]
    for key in ("maintainer", "source", "license", "description", "readme"):
        assert annotations.get(f"meta.crossplane.io/{key}"), key
    assert annotations["meta.crossplane.io/license"] == "Apache-2.0"
    assert meta["spec"]["capabilities"] == ["composition"]
    assert meta["spec"]["crossplane"]["version"] == ">=v1.17.0-0"


def _plural(group: str, kind: str) -> str:
    for v in get_registry():
        if v.group == group and v.kind == kind:
            return v.plural
    msg = f"no CRD for {kind} in {group}"
    raise AssertionError(msg)


def test_cluster_role_is_aggregated_to_crossplane() -> None:
    role = _load(CLUSTER_ROLE)
    assert (role["apiVersion"], role["kind"]) == (
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
    )
    assert (
        role["metadata"]["labels"]["rbac.crossplane.io/aggregate-to-crossplane"]
        == "true"
    )
    for rule in role["rules"]:
        assert set(rule["verbs"]) == {"get", "list", "watch"}, "read-only"
        assert "" not in rule["apiGroups"], (
            "core kinds (Secrets) are Crossplane's own role's job"
        )


def _granted(role: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (group, resource)
        for rule in role["rules"]
        if {"get", "list", "watch"} <= set(rule["verbs"])
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_protect_cluster_role_grants_what_crossplanes_usage_machinery_does_to_the_cluster() -> None:
    """Only CAPI Clusters, only what the usage controller and webhook do to a used object."""
    role = _load(APIS / "rbac" / "clusterrole-protect-cluster.yaml")
    assert (role["apiVersion"], role["kind"]) == ("rbac.authorization.k8s.io/v1", "ClusterRole")
    assert role["metadata"]["labels"]["rbac.crossplane.io/aggregate-to-crossplane"] == "true"
    (rule,) = role["rules"]
    assert rule["apiGroups"] == ["cluster.x-k8s.io"]
    assert rule["resources"] == ["clusters"]
    # get/update: the in-use label; patch: the deletion-attempt annotation; delete: the replay.
    assert set(rule["verbs"]) == {"get", "list", "watch", "update", "patch", "delete"}
    # The default role stays read-only, and says nothing of clusters' writes.
    assert _load(CLUSTER_ROLE)["metadata"]["name"] != role["metadata"]["name"]


def test_cluster_role_covers_every_kind_the_examples_reference() -> None:
    granted = _granted(_load(CLUSTER_ROLE))
    needed = set()
    for path in EXAMPLES.glob("*/required/*.yaml"):
        obj = _load(path)
        if obj["kind"] != "Cluster":
            continue
        needed.add(("cluster.x-k8s.io", "clusters"))
        for ref_field in ("controlPlaneRef", "infrastructureRef"):
            ref = obj["spec"][ref_field]
            group = _ref_group(ref)
            needed.add((group, _plural(group, ref["kind"])))
    assert needed >= {
        ("controlplane.cluster.x-k8s.io", "kubeadmcontrolplanes"),
        ("controlplane.cluster.x-k8s.io", "awsmanagedcontrolplanes"),
        ("infrastructure.cluster.x-k8s.io", "awsclusters"),
        ("infrastructure.cluster.x-k8s.io", "awsmanagedclusters"),
    }
    assert needed <= granted, f"not granted: {sorted(needed - granted)}"


# The ports Crossplane itself declares on every function's package-runtime container
# (internal/controller/pkg/revision/runtime.go, runtime_function.go): the example must not
# declare them again (older Crossplane appends, and Kubernetes rejects duplicate names).
CROSSPLANE_PORTS = {"grpc": 9443, "metrics": 8080}


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_production_wiring_example() -> None:
    """The whole wiring validates; every serve flag parses; probes, ports and scraping agree."""
    from function import serve, server

    docs = list(yaml.safe_load_all((ROOT / "examples" / "production" / "function.yaml").read_text()))
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"Function", "DeploymentRuntimeConfig", "PodDisruptionBudget"}
    for kind in ("Function", "DeploymentRuntimeConfig"):
        assert validate(by_kind[kind]) == [], kind
    drc = by_kind["DeploymentRuntimeConfig"]["spec"]["deploymentTemplate"]["spec"]
    assert drc["replicas"] >= 2
    pod = drc["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "package-runtime"
    assert container["resources"]["limits"]["memory"]
    assert container["resources"]["requests"]["cpu"]
    fn_ref = by_kind["Function"]["spec"]["runtimeConfigRef"]
    assert fn_ref["name"] == by_kind["DeploymentRuntimeConfig"]["metadata"]["name"]
    pdb = by_kind["PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"] == {"pkg.crossplane.io/function": FUNCTION_REF}
    assert pdb["spec"]["minAvailable"] < drc["replicas"]

    # Every arg is one `serve` accepts (parsed by the click command itself).
    params = serve.serve.make_context("serve", list(container["args"])).params
    opts = server.ServeOptions(**{k: v for k, v in params.items() if k != "debug"})
    # Drain: within the pod's grace period, with time to spare for the kubelet's SIGKILL.
    assert 0 < opts.drain_grace < pod["terminationGracePeriodSeconds"]
    # Health on a plaintext listener of its own (kubelet probes cannot speak mTLS); every
    # probe asks it over gRPC; liveness outlasts a drain so a draining pod is not restarted.
    health_port = _port(opts.health_address)
    probes = {k: container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")}
    for name, probe in probes.items():
        assert probe["grpc"]["port"] == health_port, name
    live = probes["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > opts.drain_grace
    # Ports: the probe port declared, nothing Crossplane declares repeated or reused.
    declared = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert declared == {"health": health_port}
    assert health_port not in CROSSPLANE_PORTS.values()
    # Metrics on Crossplane's own `metrics` port, scraped there.
    assert _port(opts.metrics_address) == CROSSPLANE_PORTS["metrics"]
    annotations = drc["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == _port(opts.metrics_address)
    assert annotations["prometheus.io/path"] == "/metrics"
    # Replicas share the load: connections age in minutes; Crossplane's pings are welcome.
    assert 60 <= opts.max_connection_age <= 30 * 60
    assert opts.max_connection_age_grace >= 10
    assert opts.keepalive_permit_without_calls and opts.keepalive_min_ping_interval <= 60


def test_every_description_names_every_addon() -> None:
    """--help, the packages, pyproject.toml and the README's opening say what is composed."""
    import tomllib

    from click.testing import CliRunner

    from function_tools.cli import cli

    def annotations(path: Path) -> str:
        meta = yaml.safe_load(path.read_text())["metadata"]["annotations"]
        return meta["meta.crossplane.io/description"] + meta["meta.crossplane.io/readme"]

    texts = {
        "--help": CliRunner().invoke(cli, ["--help"]).output,
        "package/crossplane.yaml": annotations(PACKAGE / "crossplane.yaml"),
        "apis/v1/crossplane.yaml": annotations(APIS / "v1" / "crossplane.yaml"),
        "apis/v2/crossplane.yaml": annotations(APIS / "v2" / "crossplane.yaml"),
        "pyproject.toml": tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "description"
        ],
        "README.md": (ROOT / "README.md").read_text().split("\n## ")[0],
    }
    for where, text in texts.items():
        words = " ".join(text.split()).lower()
        for addon in ("cloud controller manager", "cni", "csi", "load balancer controller", "external-dns"):
            assert addon in words, f"{where} does not name the {addon}"
