"""Run Crossplane's own ``crossplane render`` and the project's ``render`` on the same inputs, and diff them.

Crossplane's render (CLI v2 with ``--crossplane-binary``) runs one real XR reconcile of
Crossplane core (``internal render``: the composite reconciler, the function composer and
its required-resources loop) against an in-memory API server, calling the function over
gRPC through the Development runtime. The project's render (``function_tools.render``) runs the
same function in process through its own model of that reconcile. Both print the XR, the
composed resources and the results; every difference is a bug on one side.

What Crossplane adds on top of what the function decides is not dropped from the
comparison: each addition is checked against what the Crossplane source at the pinned
version does (files named below, under ``github.com/crossplane/crossplane/v2`` of
``e2e/tools.json``):

- the XR gets a UID when it has none: ``uuid.NewSHA1(uuid.Nil, "<gvk>\\0<namespace>\\0<name>")``
  (internal/render/composite/render.go); the project's render leaves the UID empty, so its
  controller references carry ``uid: ""`` where Crossplane's carry that UID;
- a composed resource without a name is named ``ChildName(generateName, xr-uid,
  composition-resource-name)`` = generateName + sha256(uid + name)[:12]
  (internal/names/names.go, generate.go), keeping ``generateName``; the project's render
  prints ``generateName`` alone, as the API server would name it;
- the XR's status gains ``Synced`` (ReconcileSuccess) and ``Responsive``
  (WatchCircuitClosed) next to the function's conditions and ``Ready``
  (controller/apiextensions/composite/reconciler.go); the XR's
  ``spec.crossplane.resourceRefs`` (``spec.resourceRefs`` for a legacy XR) list every
  composed resource; with ``-x`` the XR's metadata and spec are the input's, the spec
  with the XRD's defaults applied (the CLI's xrpkg.ApplyXRDDefaults, cli cmd/crossplane/
  render/xr/cmd.go);
- results are printed as the reconciler's events: ``severity`` Normal/Warning,
  ``reason`` the result's reason (ComposeResources when it has none) and the message
  prefixed ``Pipeline step "<step>": `` (composition_functions.go), plus one
  ``Composed resource "<name>" is not yet ready`` event (reason ComposeResources) per
  desired resource the function did not mark ready (reconciler.go).
"""

from __future__ import annotations

import copy
import hashlib
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function_tools import input_files, render
from function_tools.in_memory_crossplane import COMPOSITION_RESOURCE_NAME

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
OBSERVED = ROOT / "tests" / "fixtures" / "observed"
RUNTIME_ANNOTATION = "render.crossplane.io/runtime"
TARGET_ANNOTATION = "render.crossplane.io/runtime-development-target"
REASON_COMPOSE = "ComposeResources"
CROSSPLANE_CONDITIONS = {
    "Synced": {"status": "True", "reason": "ReconcileSuccess"},
    "Responsive": {"status": "True", "reason": "WatchCircuitClosed"},
}
SEVERITY = {fnv1.SEVERITY_NORMAL: "Normal", fnv1.SEVERITY_WARNING: "Warning"}
# Crossplane's fixed condition time in render output (cmd/crossplane/render/output.go).
CONDITION_TIME = "2024-01-01T00:00:00Z"


def xr_examples() -> list[str]:
    """Every example directory that holds an XR (xr.yaml), the ones render can take."""
    return sorted(p.parent.name for p in EXAMPLES.glob("*/xr.yaml"))


@dataclass(frozen=True)
class Inputs:
    """One reconcile of one example, as both renders take it."""

    name: str
    late: bool

    @property
    def xr(self) -> Path:
        """The example's XR, or the XR as it was at the late reconcile."""
        return OBSERVED / f"{self.name}.xr.yaml" if self.late else EXAMPLES / self.name / "xr.yaml"

    @property
    def legacy(self) -> bool:
        """A Crossplane 1.x style cluster-scoped XR (apis/v1)."""
        return (
            yaml.safe_load((EXAMPLES / self.name / "xr.yaml").read_text())["kind"]
            == "XClusterPlugin"
        )

    @property
    def apis(self) -> Path:
        """The XRD and Composition of the example's flavour."""
        return ROOT / "apis" / ("v1" if self.legacy else "v2")

    @property
    def composition(self) -> Path:
        """The example's own Composition if it has one, else the shipped one of its flavour."""
        own = EXAMPLES / self.name / "composition.yaml"
        return own if own.is_file() else self.apis / "composition.yaml"

    @property
    def xrd(self) -> Path:
        """The shipped XRD of the example's flavour."""
        return self.apis / "definition.yaml"

    @property
    def functions(self) -> Path:
        """The example's Function (Development runtime)."""
        return EXAMPLES / self.name / "functions.yaml"

    @property
    def required(self) -> Path:
        """The Cluster API objects the function reads."""
        return EXAMPLES / self.name / "required"

    @property
    def observed(self) -> Path | None:
        """The composed resources the project's simulator observed at the late reconcile."""
        return OBSERVED / self.name if self.late else None

    def __str__(self) -> str:
        return f"{self.name}{'-late' if self.late else ''}"


def documents(text: str) -> list[dict[str, Any]]:
    """The objects of a YAML stream."""
    return [d for d in yaml.safe_load_all(text) if d is not None]


def crossplane_render(
    cli: Path, core: Path, address: str, inputs: Inputs, *extra: str, xr: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``crossplane render`` of the inputs with core's real reconcile and the served function."""
    args = [
        str(cli),
        "render",
        str(xr or inputs.xr),
        str(inputs.composition),
        str(inputs.functions),
        f"--crossplane-binary={core}",
        "-a",
        f"{RUNTIME_ANNOTATION}=Development",
        "-a",
        f"{TARGET_ANNOTATION}={address}",
        "--required-resources",
        str(inputs.required),
        "--xrd",
        str(inputs.xrd),
        *extra,
    ]
    return run_render(args, inputs)


def run_render(args: list[str], inputs: Inputs) -> subprocess.CompletedProcess[str]:
    """Run a render command with the flags both CLIs share: results, the full XR, observed state."""
    args = [*args, "--include-function-results", "--include-full-xr", "--timeout=2m"]
    if inputs.observed is not None:
        args += ["--observed-resources", str(inputs.observed)]
    return subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)


def our_render(
    inputs: Inputs, *, crossplane_v1: bool = False, now: int | None = None
) -> render.Rendered:
    """The project's ``render`` of the same inputs (what ``function-cluster-plugin render`` prints).

    ``now``: the clock of the served function's call (``served_clock``), where its answer
    depends on it; by default the project's render calls just after what it observes.
    """
    step, step_input = input_files.step_from_composition(input_files.load_documents([inputs.composition]))
    return render.render(
        input_files.load_one(inputs.xr, "composite resource"),
        required=input_files.load_documents([inputs.required]),
        observed=input_files.load_documents([inputs.observed] if inputs.observed else []),
        step_input=step_input,
        step=step,
        crossplane_v1=crossplane_v1,
        now=now,
    )


def served_clock(docs: list[dict[str, Any]]) -> int | None:
    """The clock the served function stamped into its answer, if it stamped one.

    The served function reads the wall clock; a day-two record it writes (a soak's start, a
    settled move) carries that time, later than anything the inputs name. The project's render
    of the same inputs at that second must then answer the same.
    """
    stamped = max((render.latest_time(d) for d in docs[1:] if d.get("kind") != "Result"), default=0)
    return int(stamped) if stamped > time.time() - 3600 else None


def render_uid(xr: dict[str, Any]) -> str:
    """The UID Crossplane's render gives an XR that has none (internal/render/composite/render.go)."""
    meta = xr["metadata"]
    if meta.get("uid"):
        return str(meta["uid"])
    group, _, version = xr["apiVersion"].rpartition("/")
    gvk = f"{group}/{version}, Kind={xr['kind']}" if group else f"/{version}, Kind={xr['kind']}"
    key = f"{gvk}\x00{meta.get('namespace', '')}\x00{meta['name']}"
    return str(uuid.uuid5(uuid.UUID(int=0), key))


def child_name(parent: str, parent_uid: str, child: str) -> str:
    """Crossplane's name for a composed resource (internal/names/names.go ChildName)."""
    suffix = hashlib.sha256((parent_uid + child).encode()).hexdigest()[:12]
    if parent and not parent.endswith("-"):
        parent += "-"
    full = parent + suffix
    if len(full) <= 63:
        return full
    keep = 63 - 12
    if not parent[:keep].endswith("-"):
        return parent[: keep - 1] + "-" + suffix
    return parent[:keep] + suffix


def _cname(doc: dict[str, Any]) -> str:
    return str(
        ((doc.get("metadata") or {}).get("annotations") or {}).get(COMPOSITION_RESOURCE_NAME)
    )


def _split(
    docs: list[dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    xr, rest = docs[0], docs[1:]
    composed = {_cname(d): d for d in rest if d.get("kind") != "Result"}
    results = [d for d in rest if d.get("kind") == "Result"]
    return xr, composed, results


def compare(
    crossplane_docs: list[dict[str, Any]], ours: render.Rendered, inputs: Inputs, step: str
) -> list[str]:
    """Every difference between Crossplane's render and the project's, as readable lines."""
    assert ours.response is not None
    problems: list[str] = []
    xp_xr, xp_composed, xp_results = _split(crossplane_docs)
    our_xr, our_composed, _ = _split(ours.documents)
    xr_in = input_files.load_one(inputs.xr, "composite resource")
    uid = render_uid(xr_in)

    # Composed resources: the same set, the same bodies, Crossplane's metadata as documented.
    if set(xp_composed) != set(our_composed):
        problems.append(
            f"composed resources: only Crossplane {sorted(set(xp_composed) - set(our_composed))}, "
            f"only ours {sorted(set(our_composed) - set(xp_composed))}"
        )
    for cname in sorted(set(xp_composed) & set(our_composed)):
        problems += _compare_composed(cname, xp_composed[cname], our_composed[cname], uid)

    xrd = input_files.load_one(inputs.xrd, "XRD")
    problems += _compare_xr(xp_xr, our_xr, xr_in, xrd, xp_composed)
    problems += _compare_results(xp_results, ours.response, step)
    return problems


def _compare_composed(cname: str, xp: dict[str, Any], ours: dict[str, Any], uid: str) -> list[str]:
    problems = []
    xp_meta, our_meta = dict(xp["metadata"]), dict(ours["metadata"])
    xp_body = {k: v for k, v in xp.items() if k != "metadata"}
    our_body = {k: v for k, v in ours.items() if k != "metadata"}
    if xp_body != our_body:
        problems.append(f"{cname}: body differs:\n  crossplane {xp_body}\n  ours       {our_body}")
    # Controller reference: ours has the input XR's UID (none), Crossplane's the UID it gave it.
    our_refs = [
        {**r, "uid": uid} if r.get("controller") and not r.get("uid") else r
        for r in our_meta.pop("ownerReferences", [])
    ]
    xp_refs = xp_meta.pop("ownerReferences", [])
    if xp_refs != our_refs:
        problems.append(f"{cname}: ownerReferences crossplane {xp_refs} ours {our_refs}")
    if "name" not in our_meta:
        # Named by Crossplane's ChildName instead of by the API server's generateName.
        want = child_name(our_meta.get("generateName", ""), uid, cname)
        if xp_meta.get("name") != want:
            problems.append(
                f"{cname}: crossplane named it {xp_meta.get('name')}, ChildName says {want}"
            )
        xp_meta.pop("name", None)
    if xp_meta != our_meta:
        problems.append(f"{cname}: metadata crossplane {xp_meta} ours {our_meta}")
    return problems


def _compare_xr(
    xp: dict[str, Any],
    ours: dict[str, Any],
    xr_in: dict[str, Any],
    xrd: dict[str, Any],
    xp_composed: dict[str, Any],
) -> list[str]:
    problems = []
    xp_status, our_status = dict(xp.get("status") or {}), dict(ours.get("status") or {})
    xp_conditions = {c["type"]: c for c in xp_status.pop("conditions", [])}
    our_conditions = {c["type"]: c for c in our_status.pop("conditions", [])}
    if xp_status != our_status:
        problems.append(f"XR status differs:\n  crossplane {xp_status}\n  ours       {our_status}")
    for typ, want in CROSSPLANE_CONDITIONS.items():
        got = xp_conditions.pop(typ, None)
        expected = {"type": typ, "lastTransitionTime": CONDITION_TIME, **want}
        if got != expected:
            problems.append(
                f"XR condition {typ}: crossplane {got}, Crossplane's reconciler sets {expected}"
            )
    if xp_conditions != our_conditions:
        problems.append(
            f"XR conditions:\n  crossplane {xp_conditions}\n  ours       {our_conditions}"
        )
    # Ours prints the XR's name and namespace; -x prints the input's metadata as it was.
    if xp["metadata"] != xr_in["metadata"] or any(
        xr_in["metadata"].get(k) != v for k, v in ours["metadata"].items()
    ):
        problems.append(f"XR metadata: crossplane {xp['metadata']} ours {ours['metadata']}")
    # -x: the input XR merged with Crossplane's; the spec gains only Crossplane's references.
    legacy = xr_in["kind"] == "XClusterPlugin"
    spec = dict(xp.get("spec") or {})
    machinery = spec if legacy else dict(spec.pop("crossplane", {}) or {})
    refs = machinery.pop("resourceRefs", [])
    want_refs = sorted(
        (d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in xp_composed.values()
    )
    got_refs = sorted((r["apiVersion"], r["kind"], r["name"]) for r in refs)
    if got_refs != want_refs:
        problems.append(f"XR resourceRefs {got_refs} are not the composed resources {want_refs}")
    # The CLI applies the XRD's defaults to the XR before the reconcile (xrpkg.ApplyXRDDefaults).
    in_spec = with_defaults(xr_in.get("spec") or {}, spec_schema(xrd, xr_in))
    in_machinery = in_spec if legacy else dict(in_spec.pop("crossplane", {}) or {})
    in_machinery.pop("resourceRefs", None)
    if machinery != in_machinery or (not legacy and spec != in_spec):
        problems.append(
            f"XR spec is not the input's with the XRD's defaults and resourceRefs:\n"
            f"  crossplane {xp.get('spec')}\n  expected   {in_spec}"
        )
    return problems


def spec_schema(xrd: dict[str, Any], xr: dict[str, Any]) -> dict[str, Any]:
    """The openAPIV3Schema of the XR's spec in its XRD version."""
    version = xr["apiVersion"].rpartition("/")[2]
    for v in xrd["spec"]["versions"]:
        if v["name"] == version:
            return dict(v["schema"]["openAPIV3Schema"]["properties"]["spec"])
    msg = f"the XRD serves no version {version}"
    raise AssertionError(msg)


def with_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` defaulted as the API server's structural defaulting does it.

    Missing properties that declare a default get it, then every property present
    (defaulted ones included) is defaulted in turn, and so is every array item.
    """
    if isinstance(value, dict):
        out = dict(value)
        props = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        return {k: with_defaults(v, props.get(k) or {}) for k, v in out.items()}
    if isinstance(value, list):
        return [with_defaults(v, schema.get("items") or {}) for v in value]
    return value


def _compare_results(
    xp_results: list[dict[str, Any]], rsp: fnv1.RunFunctionResponse, step: str
) -> list[str]:
    prefix = f'Pipeline step "{step}": '
    want = [
        {
            "apiVersion": render.RESULT_API_VERSION,
            "kind": "Result",
            "severity": SEVERITY[r.severity],
            "reason": r.reason or REASON_COMPOSE,
            "message": prefix + r.message,
        }
        for r in rsp.results
        if r.severity != fnv1.SEVERITY_FATAL
    ]
    want += [
        {
            "apiVersion": render.RESULT_API_VERSION,
            "kind": "Result",
            "severity": "Normal",
            "reason": REASON_COMPOSE,
            "message": f'Composed resource "{name}" is not yet ready',
        }
        for name, r in rsp.desired.resources.items()
        if r.ready != fnv1.READY_TRUE
    ]

    def key(d: dict[str, Any]) -> str:
        return yaml.safe_dump(d, sort_keys=True)

    # The reconciler emits the function's results in order, then the unready events in
    # map order (Go's random iteration): compare the function's in order, the rest as a set.
    got_fn = [d for d in xp_results if str(d.get("message", "")).startswith(prefix)]
    got_rest = sorted((d for d in xp_results if d not in got_fn), key=key)
    want_fn = [d for d in want if d["message"].startswith(prefix)]
    want_rest = sorted((d for d in want if d not in want_fn), key=key)
    problems = []
    if got_fn != want_fn:
        problems.append(f"function results:\n  crossplane {got_fn}\n  ours       {want_fn}")
    if got_rest != want_rest:
        problems.append(f"reconciler events:\n  crossplane {got_rest}\n  expected   {want_rest}")
    return problems


CRDS = ROOT / "tests" / "fixtures" / "crds"


def resources_only(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered objects without crossplane render's Result documents (no schema: not objects)."""
    return [d for d in docs if d.get("apiVersion") != render.RESULT_API_VERSION]


def validate(
    cli: Path, inputs: Inputs, docs: list[dict[str, Any]], directory: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """``crossplane resource validate`` of ``docs`` against the real CRDs and the example's XRD.

    Offline: plain CRD and XRD files only, a cache directory of the test's own, and
    ``--crossplane-image=`` so no image with Crossplane's own CRDs is pulled (the vendored
    CRDs include Crossplane's). Every object must find its schema.
    """
    resources = directory / "rendered.yaml"
    resources.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    command = [
        str(cli),
        "resource",
        "validate",
        f"--cache-dir={directory / 'cache'}",
        "--crossplane-image=",
        "--error-on-missing-schemas",
        *args,
        f"{CRDS},{inputs.xrd}",
        str(resources),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def crank_render(
    crank: Path, address: str, inputs: Inputs, directory: Path
) -> subprocess.CompletedProcess[str]:
    """The Crossplane 1.x CLI's ``crossplane render``: the pipeline run in process (cmd/crank/render).

    Crossplane 1.x knows neither --xrd nor -a: the Function carries the Development
    target itself, and the CAPI objects go in as --extra-resources, the field 1.x
    answers requirements from.
    """
    function = yaml.safe_load(inputs.functions.read_text())
    function["metadata"].setdefault("annotations", {}).update(
        {RUNTIME_ANNOTATION: "Development", TARGET_ANNOTATION: address}
    )
    functions = directory / "functions.yaml"
    functions.write_text(yaml.safe_dump(function))
    args = [
        str(crank),
        "render",
        str(inputs.xr),
        str(inputs.composition),
        str(functions),
        "--extra-resources",
        str(inputs.required),
    ]
    return run_render(args, inputs)


def compare_crank(
    crank_docs: list[dict[str, Any]], ours: render.Rendered, inputs: Inputs
) -> list[str]:
    """Every difference between the 1.x CLI's render and the project's ``render --crossplane-v1``.

    crank re-implements the pipeline (cmd/crank/render/render.go) rather than running the
    1.x reconciler, and two things it leaves out are the reconciler's, not the function's:
    it derives Ready from the composed resources alone (the reconciler lets the function's
    desired XR readiness supersede it, 1.20 reconciler.go) and it does not support claims,
    so it records no ``status.claimConditionTypes`` (reconciler.go SetClaimConditionTypes).
    Its Ready is checked against its own rule instead; everything else must be equal.
    """
    assert ours.response is not None
    problems: list[str] = []
    crank_xr, crank_composed, crank_results = _split(crank_docs)
    our_xr, our_composed, our_results = _split(ours.documents)
    xr_in = input_files.load_one(inputs.xr, "composite resource")

    for cname in sorted(set(crank_composed) | set(our_composed)):
        if crank_composed.get(cname) != our_composed.get(cname):
            problems.append(
                f"{cname}:\n  crank {crank_composed.get(cname)}\n  ours  {our_composed.get(cname)}"
            )
    if crank_results != our_results:
        problems.append(f"results:\n  crank {crank_results}\n  ours  {our_results}")

    problems += _compare_crank_xr(crank_xr, our_xr, xr_in, ours.response)
    return problems


def _compare_crank_xr(
    crank_xr: dict[str, Any],
    our_xr: dict[str, Any],
    xr_in: dict[str, Any],
    rsp: fnv1.RunFunctionResponse,
) -> list[str]:
    problems = []
    # -x copies the input's metadata and spec; ours prints the name alone.
    for key in ("apiVersion", "kind"):
        if crank_xr.get(key) != our_xr.get(key):
            problems.append(f"XR {key}: crank {crank_xr.get(key)} ours {our_xr.get(key)}")
    if crank_xr["metadata"] != xr_in["metadata"] or crank_xr.get("spec") != xr_in.get("spec"):
        problems.append(f"XR: crank changed the input's metadata or spec: {crank_xr}")
    crank_status = dict(crank_xr.get("status") or {})
    our_status = dict(our_xr.get("status") or {})
    our_status.pop("claimConditionTypes", None)
    crank_conditions = {c["type"]: c for c in crank_status.pop("conditions", [])}
    our_conditions = {c["type"]: c for c in our_status.pop("conditions", [])}
    if crank_status != our_status:
        problems.append(f"XR status:\n  crank {crank_status}\n  ours  {our_status}")
    unready = [n for n, r in rsp.desired.resources.items() if r.ready != fnv1.READY_TRUE]
    crank_ready = {"type": "Ready", "status": "True", "reason": "Available"}
    if unready:
        crank_ready = {
            "type": "Ready",
            "status": "False",
            "reason": "Creating",
            "message": f"Unready resources: {render._first_n_and_some_more(unready)}",
        }
    crank_ready["lastTransitionTime"] = CONDITION_TIME
    if crank_conditions.pop("Ready", None) != crank_ready:
        problems.append(f"crank's Ready is not its own rule's {crank_ready}")
    our_conditions.pop("Ready", None)
    if crank_conditions != our_conditions:
        problems.append(f"XR conditions:\n  crank {crank_conditions}\n  ours  {our_conditions}")
    return problems


def validate_1x(
    crank: Path,
    inputs: Inputs,
    docs: list[dict[str, Any]],
    directory: Path,
    *,
    crossplane_crds: Path,
    version: str,
) -> subprocess.CompletedProcess[str]:
    """``crossplane beta validate`` of the 1.x CLI, offline.

    1.x has no way to skip the Crossplane image that supplies Crossplane's own CRDs, so
    its cache entry (``<cache>/<image with : as @>/``, cmd/crank/beta/validate/cache.go)
    is seeded with the CRDs of the same Crossplane module (cluster/crds). The vendored
    CRDs of Crossplane v2 are left out: 1.x validates against its own.
    """
    image = f"xpkg.crossplane.io/crossplane/crossplane:{version}"
    seeded = directory / "cache" / image.replace(":", "@")
    seeded.mkdir(parents=True)
    for crd in sorted(crossplane_crds.glob("*.yaml")):
        (seeded / crd.name).write_bytes(crd.read_bytes())
    resources = directory / "rendered.yaml"
    resources.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    # 1.x takes one source of extensions: gather the CRDs and the XRD in one directory.
    extensions = directory / "extensions"
    extensions.mkdir()
    for crd in sorted(CRDS.glob("*/*.yaml")):
        if crd.parent.name != "crossplane":
            (extensions / f"{crd.parent.name}-{crd.name}").write_bytes(crd.read_bytes())
    (extensions / "xrd.yaml").write_bytes(inputs.xrd.read_bytes())
    command = [
        str(crank),
        "beta",
        "validate",
        f"--cache-dir={directory / 'cache'}",
        f"--crossplane-image={image}",
        "--error-on-missing-schemas",
        str(extensions),
        str(resources),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
