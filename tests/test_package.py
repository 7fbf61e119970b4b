"""The Configuration packages apis/v2 and apis/v1 against Crossplane's package rules.

Each folder is a package root for ``crossplane xpkg build --package-root=apis/<flavour>``:
crossplane.yaml (``meta.pkg.crossplane.io/v1`` ``Configuration``), the flavour's XRD and its
Composition. A user installs one of the two (docs/architecture.md, "Names and flavours").

What Crossplane does with a package root, read in its source (versions noted where the
stored copy names them):

- ``crossplane xpkg build`` (cmd/crank/xpkg/build.go, crossplane-runtime/v2 era) walks the
  package root recursively with afero.Walk, skipping directories, files that do not end in
  .yaml/.yml and empty files (``buildFilters``); the walk does not descend into symlinked
  directories (crossplane-runtime pkg/parser/fsreader.go). ``--ignore`` globs are the only
  other exclusion. The default ``--examples-root`` is ./examples *relative to the working
  directory*, so from this repository's root it would embed examples/ (both flavours, Cluster
  API objects); docs/development.md passes a path that does not exist, which the builder treats as "no
  examples" (crossplane-runtime/v2 pkg/xpkg/build.go, ``os.IsNotExist``).
- Every YAML document is decoded with the meta scheme (meta.pkg.crossplane.io) or the object
  scheme; a kind neither knows is an error, not skipped (pkg/parser/parser.go). The decoder
  is not strict: an unknown field (``dependson``) is dropped silently, which is why the schema
  below rejects unknown fields.
- The Configuration linter demands exactly one meta object and admits only XRDs and
  Compositions (crossplane internal/xpkg/lint.go, 1.x: ``parser.Or(IsXRD, IsComposition)``,
  object scheme apiextensions.crossplane.io/v1 only); Crossplane v2 adds the v2 XRD,
  ManagedResourceActivationPolicy, Operation, CronOperation and WatchOperation
  (crossplane-runtime/v2 pkg/xpkg/lint.go ``NewConfigurationLinter``, pkg/xpkg/scheme.go).
  Neither knows rbac.authorization.k8s.io: a ClusterRole cannot ride in a package, so
  apis/rbac/clusterrole.yaml stays a separate manifest.
- Dependencies (internal/controller/pkg/revision/dependency.go): ``apiVersion`` + ``kind`` +
  ``package`` take precedence, else exactly one of ``configuration``, ``provider``,
  ``function``; anything else is "an invalid dependency". Releases before crossplane#6200
  (1.17, 1.18) only read the typed fields. ``version`` is a Masterminds semver constraint; a
  bare ``vX.Y.Z`` means exactly that version. A dependency missing from the cluster is created
  with the name ToDNSLabel(repository) (internal/controller/pkg/resolver/reconciler.go), so
  the function is ``function-cluster-plugin-function-cluster-plugin``, the name the
  Compositions call (function_tools/packaging.py computes it for any registry; make release
  writes both for the registry it publishes under).

Crossplane keeps no CRD it validates crossplane.yaml with; its repository generates some under
cluster/meta/, but the stored copies predate v2 (no apiVersion/kind/package in dependsOn), so
the schema below is written from the Go types instead: apis/pkg/meta/v1/configuration_types.go
(ConfigurationSpec = MetaSpec inline) and apis/pkg/meta/v1/meta.go (MetaSpec, Dependency,
CrossplaneConstraints) of crossplane/crossplane, the v2 line (dependsOn with apiVersion, kind,
package and the deprecated provider/configuration/function). Every check runs through
:func:`package_problems`, and the mutation tests show each one rejects a broken copy.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from function.__version__ import __version__
from function_tools.packaging import object_name
from tests.kube_schema import validate_with_schema

ROOT = Path(__file__).resolve().parent.parent
APIS = ROOT / "apis"
PROVENANCE = ROOT / "tests" / "fixtures" / "crds" / "PROVENANCE.md"
FUNCTION_PACKAGE_META = ROOT / "package" / "crossplane.yaml"
PRODUCTION_FUNCTION = ROOT / "examples" / "production" / "function.yaml"

META_FILE = "crossplane.yaml"
# What each package root holds; crossplane.yaml is the one name the CLI looks for.
PACKAGE_FILES = {
    META_FILE,
    "definition.yaml",
    "composition.yaml",
    "rollout-definition.yaml",
    "rollout-composition.yaml",
}
# Beside the flavour's ClusterPlugin XRD: the ClusterPluginRollout's, in the same apiVersion.
ROLLOUT_KIND = "ClusterPluginRollout"
# The registry organisation the AWS and Helm providers are published under at every version
# (xpkg.upbound.io/upbound serves only the newest release to anonymous users).
PROVIDER_REGISTRY = "xpkg.crossplane.io/crossplane-contrib"
# provider-family-aws holds the ProviderConfig CRDs and comes in as a dependency of the
# provider-aws-* packages (the family-provider design; their v2.6.0 metadata was not readable
# here), so it is not declared again.
INDIRECT_PROVIDERS = {"provider-family-aws"}

# The flavour each package root holds: its XRD's apiVersion and kind.
FLAVOURS = {
    "v2": ("apiextensions.crossplane.io/v2", "ClusterPlugin"),
    "v1": ("apiextensions.crossplane.io/v1", "XClusterPlugin"),
}

# ---------------------------------------------------------------------------
# Crossplane's meta schema, from the Go types (see the module docstring)
# ---------------------------------------------------------------------------

_STRING: dict[str, Any] = {"type": "string"}
_STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}

# Dependency (meta.go): every field a *string with omitempty except Version (string, no
# omitempty, so required).
_DEPENDENCY_FIELDS = ("apiVersion", "kind", "package", "provider", "configuration", "function")
DEPENDENCY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["version"],
    "properties": {**dict.fromkeys(_DEPENDENCY_FIELDS, _STRING), "version": _STRING},
}

CONFIGURATION_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    # TypeMeta: the decoder cannot pick a Go type without apiVersion and kind. Spec: no
    # omitempty.
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"type": "string", "enum": ["meta.pkg.crossplane.io/v1"]},
        "kind": {"type": "string", "enum": ["Configuration"]},
        # ObjectMeta, of which a package uses name (the built file is named after it) and
        # annotations (meta.crossplane.io/*: map[string]string, so an unquoted number fails).
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {"name": _STRING, "annotations": _STRING_MAP, "labels": _STRING_MAP},
        },
        # ConfigurationSpec = MetaSpec inline.
        "spec": {
            "type": "object",
            "properties": {
                "crossplane": {
                    "type": "object",
                    "required": ["version"],
                    "properties": {"version": _STRING},
                },
                "dependsOn": {"type": "array", "items": DEPENDENCY_SCHEMA},
            },
        },
    },
}

# Objects a Configuration may hold, by Crossplane line (see the module docstring).
_LINE_1_OBJECTS = {
    ("apiextensions.crossplane.io/v1", "CompositeResourceDefinition"),
    ("apiextensions.crossplane.io/v1", "Composition"),
}
ALLOWED_OBJECTS = {
    1: _LINE_1_OBJECTS,
    2: _LINE_1_OBJECTS
    | {
        ("apiextensions.crossplane.io/v2", "CompositeResourceDefinition"),
        ("apiextensions.crossplane.io/v1alpha1", "ManagedResourceActivationPolicy"),
        ("ops.crossplane.io/v1alpha1", "Operation"),
        ("ops.crossplane.io/v1alpha1", "CronOperation"),
        ("ops.crossplane.io/v1alpha1", "WatchOperation"),
    },
}
# Crossplane releases a constraint is judged on. 1.17 and 1.18 read only the typed
# dependency fields (provider:, function:).
SAMPLE_RELEASES = ("v1.16.0", "v1.17.0", "v1.18.0", "v1.20.0", "v2.0.0", "v2.1.0", "v2.3.0")
TYPED_DEPENDENCIES_ONLY = ("v1.17.0", "v1.18.0")

# ---------------------------------------------------------------------------
# Masterminds semver constraints, the subset these packages use
# ---------------------------------------------------------------------------

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$")
_TERM = re.compile(r"^(>=|<=|!=|=|>|<)?\s*(v?\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)$")
# An exact pin: what "pinned to the versions the tests validate against" means here.
EXACT_PIN = re.compile(r"^v\d+\.\d+\.\d+$")

VersionKey = tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]


def version_key(text: str) -> VersionKey:
    """Semver precedence: a release sorts after its pre-releases (2.0.0-0 < 2.0.0)."""
    m = _VERSION.match(text)
    if m is None:
        msg = f"not a semantic version: {text!r}"
        raise ValueError(msg)
    major, minor, patch, pre = m.groups()
    ids = tuple((0, int(p)) if p.isdigit() else (1, p) for p in (pre or "").split(".") if p)
    return (int(major), int(minor), int(patch), 0 if pre else 1, ids)


def admits(constraint: str, release: str) -> bool:
    """Whether a Masterminds constraint admits a release (comparison operators only).

    ``||`` separates alternatives, commas or spaces the terms that must all hold; a bare
    version means ``=``. Tilde, caret, wildcards and hyphen ranges raise ValueError: the
    packages do not use them and this check would not judge them right.
    """
    v = version_key(release)
    ops: dict[str, Callable[[VersionKey, VersionKey], bool]] = {
        "": lambda a, b: a == b,
        "=": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
        ">=": lambda a, b: a >= b,
        "<=": lambda a, b: a <= b,
    }
    for alternative in constraint.split("||"):
        terms = re.findall(r"(?:[<>=!]=?\s*)?[^\s,<>=!]+", alternative)
        if not terms:
            msg = f"empty constraint: {constraint!r}"
            raise ValueError(msg)
        results = []
        for term in terms:
            m = _TERM.match(term.strip())
            if m is None:
                msg = f"unsupported constraint term {term!r} in {constraint!r}"
                raise ValueError(msg)
            results.append(ops[m.group(1) or ""](v, version_key(m.group(2))))
        if all(results):
            return True
    return False


# ---------------------------------------------------------------------------
# The versions the tests validate against
# ---------------------------------------------------------------------------


def provenance_tags(text: str) -> dict[str, tuple[str, str]]:
    """Fixture folder -> (repository, tag), from the file table of PROVENANCE.md."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`").split("`")[0].split("/")[0]
        found = (cells[1], cells[2])
        if out.setdefault(folder, found) != found:
            msg = f"PROVENANCE.md: {folder} copied from two releases: {out[folder]}, {found}"
            raise ValueError(msg)
    return out


def function_source() -> tuple[str, str, str]:
    """(package, tag, object name) of the Function the README and production example install."""
    docs = [d for d in yaml.safe_load_all(PRODUCTION_FUNCTION.read_text(encoding="utf-8")) if d]
    (function,) = [d for d in docs if d.get("kind") == "Function"]
    package, _, tag = function["spec"]["package"].rpartition(":")
    return package, tag, function["metadata"]["name"]


def expected_dependencies() -> dict[str, tuple[str, str]]:
    """Package -> (kind, exact version) every Configuration must depend on."""
    tags = provenance_tags(PROVENANCE.read_text(encoding="utf-8"))
    out = {
        f"{PROVIDER_REGISTRY}/{folder}": ("Provider", tag)
        for folder, (_, tag) in tags.items()
        if folder.startswith("provider-")
        and folder not in INDIRECT_PROVIDERS
    }
    package, tag, _ = function_source()
    out[package] = ("Function", tag)
    return out


def crossplane_under_test() -> str:
    """The Crossplane release whose CRDs the tests validate against."""
    return provenance_tags(PROVENANCE.read_text(encoding="utf-8"))["crossplane"][1]


# ---------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------


def read_by_builder(root: Path) -> Iterator[Path]:
    """The files ``crossplane xpkg build`` reads under a package root (buildFilters)."""
    for dirpath, _, filenames in os.walk(root):  # os.walk, like afero.Walk, skips linked dirs
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.suffix in {".yaml", ".yml"} and path.stat().st_size > 0:
                yield path


def _tree_problems(root: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for name in dirnames:
            yield f"{(here / name).relative_to(root)}/: no folders in a package root"
        for name in filenames:
            path = here / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                yield f"{rel}: a symlink (the one source of a file is its own place)"
            elif rel not in PACKAGE_FILES:
                yield f"{rel}: stray file in the package root"
    for name in sorted(PACKAGE_FILES):
        if not (root / name).is_file():
            yield f"{name}: missing"


def _dependency_problems(
    deps: list[dict[str, Any]], admitted: list[str], expected: dict[str, tuple[str, str]]
) -> Iterator[str]:
    typed_only = any(r in admitted for r in TYPED_DEPENDENCIES_ONLY)
    found: dict[str, tuple[str, str]] = {}
    for i, dep in enumerate(deps):
        where = f"spec.dependsOn[{i}]"
        typed = [f for f in ("configuration", "provider", "function") if f in dep]
        explicit = [f for f in ("apiVersion", "kind", "package") if f in dep]
        if explicit and typed:
            yield f"{where}: both apiVersion/kind/package and {typed} (one form only)"
            continue
        if explicit:
            if len(explicit) < 3:
                yield f"{where}: apiVersion, kind and package go together, got {explicit}"
                continue
            if typed_only:
                yield (
                    f"{where}: apiVersion/kind/package is unknown to Crossplane "
                    f"{'/'.join(TYPED_DEPENDENCIES_ONLY)}, which spec.crossplane.version admits"
                )
            if dep["apiVersion"] != "pkg.crossplane.io/v1":
                yield f"{where}.apiVersion: {dep['apiVersion']!r}, not pkg.crossplane.io/v1"
            kind, package = dep["kind"], dep["package"]
        elif len(typed) == 1:
            kind, package = typed[0].capitalize(), dep[typed[0]]
        else:
            yield f"{where}: needs apiVersion/kind/package or one of provider/function/configuration"
            continue
        # Crossplane v2 has no default registry; the tag belongs in version.
        host, _, path = package.partition("/")
        if "." not in host or not path or re.search(r"[:@]", path):
            yield f"{where}: {package!r} is not registry/repository without tag or digest"
        version = dep["version"]
        if not EXACT_PIN.match(version):
            yield f"{where}.version: {version!r} is not an exact vX.Y.Z pin"
        if package in found:
            yield f"{where}: {package} listed twice"
        found[package] = (kind, version)
    for package in sorted(set(expected) | set(found)):
        if package not in found:
            yield f"spec.dependsOn: missing {package} {expected[package][1]}"
        elif package not in expected:
            yield f"spec.dependsOn: {package} is not a package the tests validate against"
        elif found[package] != expected[package]:
            yield f"spec.dependsOn: {package} is {found[package]}, the tests use {expected[package]}"


def package_problems(root: Path, flavour: str) -> list[str]:
    """Everything wrong with a package root, as messages naming file and field."""
    problems = list(_tree_problems(root))
    metas: list[dict[str, Any]] = []
    objects: list[tuple[str, dict[str, Any]]] = []
    for path in read_by_builder(root):
        rel = path.relative_to(root).as_posix()
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                problems.append(f"{rel}: a document that is not an object")
            elif str(doc.get("apiVersion", "")).startswith("meta.pkg.crossplane.io/"):
                if rel != META_FILE:
                    problems.append(f"{rel}: package metadata belongs in {META_FILE}")
                metas.append(doc)
            else:
                objects.append((rel, doc))
    if len(metas) != 1:
        return [*problems, f"{len(metas)} package metadata documents, not exactly one"]
    meta = metas[0]
    schema_errors = validate_with_schema(meta, CONFIGURATION_META_SCHEMA)
    if schema_errors:
        return problems + [f"{META_FILE}: {e}" for e in schema_errors]

    # Which Crossplane releases may install it, and so which objects it may hold.
    constraint = meta["spec"].get("crossplane", {}).get("version")
    if constraint is None:
        return [*problems, f"{META_FILE}: spec.crossplane.version is unset"]
    try:
        admitted = [r for r in (*SAMPLE_RELEASES, crossplane_under_test()) if admits(constraint, r)]
    except ValueError as e:
        return [*problems, f"{META_FILE}: spec.crossplane.version: {e}"]
    lines = {version_key(r)[0] for r in admitted}
    if not lines:
        problems.append(f"{META_FILE}: spec.crossplane.version {constraint!r} admits no release")
    elif crossplane_under_test() not in admitted:
        problems.append(
            f"{META_FILE}: spec.crossplane.version {constraint!r} excludes {crossplane_under_test()}, "
            "the release the tests validate against"
        )
    allowed = set.intersection(*(ALLOWED_OBJECTS[line] for line in lines)) if lines else set()
    for rel, obj in objects:
        kind = (obj.get("apiVersion"), obj.get("kind"))
        if kind not in allowed:
            problems.append(
                f"{rel}: {kind[1]} {kind[0]} cannot be in a Configuration for Crossplane "
                f"{constraint} (allowed: XRDs and Compositions the admitted releases know)"
            )

    # The flavour: its XRD and the rollout's, and a Composition for each.
    xrds = [o for _, o in objects if o.get("kind") == "CompositeResourceDefinition"]
    compositions = [o for _, o in objects if o.get("kind") == "Composition"]
    if len(xrds) != 2 or len(compositions) != 2:
        problems.append(f"{len(xrds)} XRDs and {len(compositions)} Compositions, not two each")
    else:
        wanted = [FLAVOURS[flavour], (FLAVOURS[flavour][0], ROLLOUT_KIND)]
        found = sorted(
            ((x["apiVersion"], x["spec"]["names"]["kind"]) for x in xrds),
            key=lambda k: k[1] == ROLLOUT_KIND,
        )
        if found != wanted:
            problems.append(f"definition.yaml: {found}, the {flavour} flavour is {wanted}")
        for xrd in xrds:
            (version,) = xrd["spec"]["versions"]
            kind = xrd["spec"]["names"]["kind"]
            target = {"apiVersion": f"{xrd['spec']['group']}/{version['name']}", "kind": kind}
            if not any(c["spec"]["compositeTypeRef"] == target for c in compositions):
                problems.append(f"composition.yaml: no Composition's compositeTypeRef is {target}")

    problems += [
        f"{META_FILE}: {p}"
        for p in _dependency_problems(
            meta["spec"].get("dependsOn", []), admitted, expected_dependencies()
        )
    ]
    return problems


# ---------------------------------------------------------------------------
# The shipped packages
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_package_root_is_a_valid_configuration(flavour: str) -> None:
    assert package_problems(APIS / flavour, flavour) == []


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_builder_reads_exactly_the_meta_xrd_and_composition(flavour: str) -> None:
    root = APIS / flavour
    assert {p.relative_to(root).as_posix() for p in read_by_builder(root)} == PACKAGE_FILES


def test_only_the_v2_package_is_limited_to_crossplane_v2() -> None:
    v2 = _meta(APIS / "v2")["spec"]["crossplane"]["version"]
    v1 = _meta(APIS / "v1")["spec"]["crossplane"]["version"]
    assert [r for r in SAMPLE_RELEASES if admits(v2, r)] == ["v2.0.0", "v2.1.0", "v2.3.0"]
    # The legacy package reaches every release the function itself supports.
    function_constraint = _load_one(FUNCTION_PACKAGE_META)["spec"]["crossplane"]["version"]
    assert [r for r in SAMPLE_RELEASES if admits(v1, r)] == [
        r for r in SAMPLE_RELEASES if admits(function_constraint, r)
    ]
    assert not admits(v1, "v1.16.0")


def test_packages_pin_the_tested_versions_to_the_function_release() -> None:
    expected = expected_dependencies()
    # PROVENANCE.md: upjet AWS v2.6.0 (s3, iam, ec2, cloudfront, route53, eks), provider-helm v1.4.0.
    assert expected[f"{PROVIDER_REGISTRY}/provider-aws-s3"] == ("Provider", "v2.6.0")
    assert expected[f"{PROVIDER_REGISTRY}/provider-aws-cloudfront"] == ("Provider", "v2.6.0")
    assert expected[f"{PROVIDER_REGISTRY}/provider-aws-route53"] == ("Provider", "v2.6.0")
    assert expected[f"{PROVIDER_REGISTRY}/provider-aws-eks"] == ("Provider", "v2.6.0")
    assert expected[f"{PROVIDER_REGISTRY}/provider-helm"] == ("Provider", "v1.4.0")
    assert len(expected) == 8, sorted(expected)
    package, tag, _ = function_source()
    assert tag == f"v{__version__}", "the Function the README installs is this release"
    assert expected[package] == ("Function", tag)


def test_the_compositions_call_the_function_by_the_name_it_is_installed_under() -> None:
    # Crossplane names a Function it installs as a dependency after the repository path, as a
    # DNS label (function-cluster-plugin-function-cluster-plugin): the Compositions call it by
    # that name, so the Configuration alone is a working install, and the production example
    # (a Function installed beforehand, with its runtime config) uses the same name and source.
    package, _, name = function_source()
    assert object_name(package) == name
    assert name == "function-cluster-plugin-function-cluster-plugin"
    for flavour in FLAVOURS:
        composition = _load_one(APIS / flavour / "composition.yaml")
        assert {s["functionRef"]["name"] for s in composition["spec"]["pipeline"]} == {name}
        deps = _meta(APIS / flavour)["spec"]["dependsOn"]
        assert package in {d.get("package") or d.get("function") for d in deps}


def test_packages_say_rbac_is_separate() -> None:
    # The install checklist's details (docs/installing.md, "Installing in detail") say it too.
    installing = (ROOT / "docs" / "installing.md").read_text(encoding="utf-8")
    assert "packages cannot carry RBAC" in installing
    for flavour in FLAVOURS:
        text = (APIS / flavour / META_FILE).read_text(encoding="utf-8")
        assert "apis/rbac/clusterrole.yaml" in text
        assert (
            "packages cannot carry RBAC"
            in _meta(APIS / flavour)["metadata"]["annotations"]["meta.crossplane.io/readme"]
        )


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
def test_package_annotations_match_the_function_package(flavour: str) -> None:
    annotations = _meta(APIS / flavour)["metadata"]["annotations"]
    function_annotations = _load_one(FUNCTION_PACKAGE_META)["metadata"]["annotations"]
    for key in ("maintainer", "source", "license"):
        full = f"meta.crossplane.io/{key}"
        assert annotations[full] == function_annotations[full], key
    for key in ("description", "readme"):
        assert annotations[f"meta.crossplane.io/{key}"].strip(), key


# ---------------------------------------------------------------------------
# Each check rejects a broken copy
# ---------------------------------------------------------------------------


def _load_one(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert isinstance(doc, dict)
    return doc


def _meta(root: Path) -> dict[str, Any]:
    return _load_one(root / META_FILE)


def _copy(tmp_path: Path, flavour: str) -> Path:
    root = tmp_path / flavour
    shutil.copytree(APIS / flavour, root)
    return root


def _edit_meta(root: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    meta = copy.deepcopy(_meta(root))
    edit(meta)
    (root / META_FILE).write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")


def _dep(meta: dict[str, Any], name: str) -> dict[str, Any]:
    (dep,) = [
        d
        for d in meta["spec"]["dependsOn"]
        if (d.get("package") or d.get("provider") or d.get("function", "")).endswith(name)
    ]
    return dep


def _rename(dep: dict[str, Any], old: str, new: str) -> None:
    dep[new] = dep.pop(old)


MUTATIONS: list[tuple[str, str, Callable[[Path], None], str]] = [
    (
        "stray YAML",
        "v2",
        lambda r: (r / "claim.yaml").write_text("apiVersion: v1\nkind: ConfigMap\n"),
        "claim.yaml: stray file",
    ),
    (
        "stray non-YAML file",
        "v1",
        lambda r: (r / "NOTES.md").write_text("notes\n"),
        "NOTES.md: stray file",
    ),
    (
        "ClusterRole in the package",
        "v2",
        lambda r: shutil.copy(APIS / "rbac" / "clusterrole.yaml", r / "clusterrole.yaml"),
        "ClusterRole rbac.authorization.k8s.io/v1 cannot be in a Configuration",
    ),
    (
        "XRD in a subfolder",
        "v1",
        lambda r: (r / "more").mkdir() or shutil.copy(r / "definition.yaml", r / "more" / "x.yaml"),
        "more/: no folders",
    ),
    (
        "unknown field Crossplane would drop",
        "v2",
        lambda r: _edit_meta(r, lambda m: m["spec"].update(dependson=[])),
        "dependson",
    ),
    (
        "annotation that is not a string",
        "v1",
        lambda r: _edit_meta(
            r, lambda m: m["metadata"]["annotations"].update({"meta.crossplane.io/license": 2})
        ),
        "meta.crossplane.io/license",
    ),
    (
        "dependency without version",
        "v2",
        lambda r: _edit_meta(r, lambda m: _dep(m, "provider-helm").pop("version")),
        "version",
    ),
    (
        "provider version not the tested one",
        "v2",
        lambda r: _edit_meta(r, lambda m: _dep(m, "provider-aws-iam").update(version="v2.7.0")),
        "provider-aws-iam is ('Provider', 'v2.7.0'), the tests use ('Provider', 'v2.6.0')",
    ),
    (
        "version range instead of a pin",
        "v1",
        lambda r: _edit_meta(r, lambda m: _dep(m, "provider-helm").update(version=">=v1.4.0")),
        "is not an exact vX.Y.Z pin",
    ),
    (
        "missing provider",
        "v1",
        lambda r: _edit_meta(
            r, lambda m: m["spec"]["dependsOn"].remove(_dep(m, "provider-aws-ec2"))
        ),
        "missing xpkg.crossplane.io/crossplane-contrib/provider-aws-ec2 v2.6.0",
    ),
    (
        "tag in the package reference",
        "v2",
        lambda r: _edit_meta(
            r,
            lambda m: _dep(m, "provider-aws-s3").update(
                package=_dep(m, "aws-s3")["package"] + ":v2.6.0"
            ),
        ),
        "is not registry/repository without tag or digest",
    ),
    (
        "modern dependency form in the 1.17+ package",
        "v1",
        lambda r: _edit_meta(
            r,
            lambda m: _dep(m, "provider-helm").update(
                apiVersion="pkg.crossplane.io/v1",
                kind="Provider",
                package=_dep(m, "helm").pop("provider"),
            ),
        ),
        "apiVersion/kind/package is unknown to Crossplane v1.17.0/v1.18.0",
    ),
    (
        "typed and modern forms mixed",
        "v2",
        lambda r: _edit_meta(r, lambda m: _dep(m, "provider-helm").update(provider="x.io/p")),
        "both apiVersion/kind/package and ['provider']",
    ),
    (
        "function dependency as a provider",
        "v1",
        lambda r: _edit_meta(
            r, lambda m: _rename(_dep(m, "function-cluster-plugin"), "function", "provider")
        ),
        (
            f"function-cluster-plugin is ('Provider', 'v{__version__}'), the tests use "
            f"('Function', 'v{__version__}')"
        ),
    ),
    (
        "v2 XRD offered to Crossplane 1.x",
        "v2",
        lambda r: _edit_meta(r, lambda m: m["spec"]["crossplane"].update(version=">=v1.17.0-0")),
        "CompositeResourceDefinition apiextensions.crossplane.io/v2 cannot be in a Configuration",
    ),
    (
        "constraint excluding the tested Crossplane",
        "v1",
        lambda r: _edit_meta(
            r, lambda m: m["spec"]["crossplane"].update(version=">=v1.17.0-0, <v2.0.0")
        ),
        "excludes v2.3.4",
    ),
    (
        "constraint syntax the check cannot judge",
        "v2",
        lambda r: _edit_meta(r, lambda m: m["spec"]["crossplane"].update(version="^2.0")),
        "unsupported constraint term",
    ),
    (
        "the other flavour's XRD",
        "v2",
        lambda r: shutil.copy(APIS / "v1" / "definition.yaml", r / "definition.yaml"),
        "the v2 flavour is",
    ),
    (
        "second package metadata",
        "v1",
        lambda r: shutil.copy(r / META_FILE, r / "definition.yaml"),
        "2 package metadata documents",
    ),
]


@pytest.mark.parametrize(
    ("case", "flavour", "mutate", "expected"), MUTATIONS, ids=[m[0] for m in MUTATIONS]
)
def test_a_broken_copy_is_rejected(
    tmp_path: Path, case: str, flavour: str, mutate: Callable[[Path], None], expected: str
) -> None:
    root = _copy(tmp_path, flavour)
    assert package_problems(root, flavour) == [], "the unchanged copy passes"
    mutate(root)
    problems = package_problems(root, flavour)
    assert any(expected in p for p in problems), f"{case}: {problems}"


def test_a_symlinked_file_is_rejected(tmp_path: Path) -> None:
    root = _copy(tmp_path, "v2")
    (root / "composition.yaml").unlink()
    (root / "composition.yaml").symlink_to(APIS / "v2" / "composition.yaml")
    assert "composition.yaml: a symlink" in " ".join(package_problems(root, "v2"))


@pytest.mark.parametrize(
    ("constraint", "release", "expected"),
    [
        (">=v2.0.0-0", "v2.0.0", True),
        (">=v2.0.0-0", "v1.20.0", False),
        (">=v1.17.0-0", "v1.17.0", True),
        (">=v1.17.0-0", "v1.16.9", False),
        (">=v1.17.0-0, <v2.0.0", "v2.3.4", False),
        (">=v1.17.0 <v2.0.0", "v1.20.1", True),
        ("v2.6.0", "v2.6.0", True),
        ("v2.6.0", "v2.6.1", False),
        ("<v1.17.0 || >=v2.0.0-0", "v1.18.0", False),
        ("<v1.17.0 || >=v2.0.0-0", "v2.1.0", True),
    ],
)
def test_constraint_check(constraint: str, release: str, expected: bool) -> None:
    assert admits(constraint, release) is expected


def test_provenance_parse_reads_every_fixture_folder() -> None:
    tags = provenance_tags(PROVENANCE.read_text(encoding="utf-8"))
    fixture_folders = {p.name for p in PROVENANCE.parent.iterdir() if p.is_dir()}
    assert set(tags) >= fixture_folders  # and crossplane-proto, not vendored here
    assert tags["crossplane"] == ("crossplane/crossplane", "v2.3.4")
    with pytest.raises(ValueError, match="two releases"):
        provenance_tags(
            "| `provider-helm/a.yaml` | crossplane-contrib/provider-helm | v1.4.0 |\n"
            "| `provider-helm/b.yaml` | crossplane-contrib/provider-helm | v1.5.0 |\n"
        )
