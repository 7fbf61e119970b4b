#!/usr/bin/env python3
"""Build a release into one folder, and push it: ``make release`` and ``make release-push``.

``build`` writes, for ``--registry REGISTRY --version VERSION`` (defaults: a registry on
loopback, ``localhost:5000/function-cluster-plugin``, and function/__version__.py), into
``OUT/VERSION/`` (default ``dist/release/VERSION/``):

- ``function-cluster-plugin-VERSION.oci.tar`` and ``image.json``: the function's image,
  built without a Docker engine (scripts/build_image.py);
- ``function-cluster-plugin-VERSION.xpkg``: the function package, ``crossplane xpkg build``
  of ``package/`` (its crossplane.yaml and the step Input CRD) with the image embedded
  (``--embed-runtime-image-tarball``);
- ``configuration-cluster-plugin-VERSION.xpkg`` (Crossplane v2, namespaced) and
  ``configuration-cluster-plugin-legacy-VERSION.xpkg`` (1.17+, claims): the Configuration
  packages, built from package roots that ``function_tools/apigen.py`` writes for REGISTRY and
  VERSION, so that each ``dependsOn`` names ``REGISTRY/function-cluster-plugin`` at
  ``vVERSION`` and each Composition calls the Function by the name Crossplane gives that
  dependency (function_tools/packaging.py);
- ``install/``: what a user applies: per flavour (``namespaced/``, ``legacy/``) the
  ClusterRole of apis/rbac/ and the Configuration pointing at REGISTRY, and below it
  (``provider-config/``) the AWS provider config with IRSA; beside them the production wiring
  of the Function (examples/production/function.yaml, for this registry's Function name)
  and the optional ClusterRoles of apis/rbac/;
- ``release.json``: every file with its size and sha256; for each package its reference,
  the digest of its image config and the manifest digest ``crossplane xpkg push`` gives it;
  the push commands.

The real ``crossplane`` CLI (scripts/tools.py, pinned in e2e/tools.json) builds the
packages. Before building, each package root must hold exactly its files and a
Configuration's function dependency must be REGISTRY's at VERSION and agree with its
Composition's ``functionRef``; after building, each ``.xpkg`` is read back: its OCI layout
(every blob against its digest, the one layer Crossplane reads, ``package.yaml``, which
must hold the package root's objects), ``crossplane xpkg extract`` of it (the CLI reads the
same stream), and for the function package the image's layers and runtime config.

``push`` runs ``crossplane xpkg push`` for each package of a built release, the function
first (a Configuration pushed before it would name a dependency nobody can fetch). A
registry with a private CA: ``SSL_CERT_FILE=bundle.pem`` (the CLI is Go: that file then
replaces the system's roots, so give it those and the CA).

Usage (``build`` needs root and Debian's debootstrap for the image; both need Go the first
time, to build the pinned CLI)::

    python -m scripts.release build [--registry REGISTRY] [--version VERSION] [--out DIR]
    python -m scripts.release push [--registry REGISTRY] [--version VERSION] [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from function.flavour import KINDS, XR_TYPES, XRType
from function.step_input import StepInput
from function_tools import apigen
from function_tools.packaging import (
    FUNCTION_PACKAGE,
    HOME_SOURCE,
    LOCAL_REGISTRY,
    PROVIDER_REGISTRY,
    PROVIDERS,
    PackageSource,
    SourceError,
    object_name,
)
from scripts import build_image

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLS = REPO_ROOT / "scripts" / "tools.py"
DIST = REPO_ROOT / "dist" / "release"
FUNCTION_ROOT = REPO_ROOT / "package"
PRODUCTION_FUNCTION = REPO_ROOT / "examples" / "production" / "function.yaml"
RBAC = REPO_ROOT / "apis" / "rbac"
RECORD = "release.json"
# What `crossplane xpkg build` may read in each package root (it reads every non-empty
# .yaml/.yml file below it): anything else there is refused before it is built.
FUNCTION_FILES = frozenset(
    {"crossplane.yaml", apigen.INPUT_CRD_PATH.relative_to("package").as_posix()}
)
CONFIGURATION_FILES = frozenset(
    {
        "crossplane.yaml",
        "definition.yaml",
        "composition.yaml",
        "rollout-definition.yaml",
        "rollout-composition.yaml",
    }
)

# The xpkg format (crossplane-runtime pkg/xpkg): the config label that marks the layer
# holding package.yaml, and the annotation `crossplane xpkg push` moves it to.
XPKG_LABEL_PREFIX = "io.crossplane.xpkg:"
XPKG_ANNOTATION = "io.crossplane.xpkg"
XPKG_BASE = "base"
STREAM_FILE = "package.yaml"
# A package file is a `docker save` tarball (go-containerregistry's tarball.Write), and
# the CLI pushes it as Docker's schema 2 manifest (tarball.Image; AnnotateLayers keeps it).
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
# Image config fields the function package must carry from the image: what runs.
RUNTIME_FIELDS = ("Entrypoint", "Cmd", "User", "Env", "WorkingDir", "ExposedPorts")


class ReleaseError(Exception):
    """Something a release cannot be made or pushed with; the message says what and where."""


def say(message: str) -> None:
    """Progress for the person running the command, on stderr."""
    sys.stderr.write(message + "\n")


# --- The crossplane CLI ---------------------------------------------------------------


def crossplane_cli() -> Path:
    """The pinned ``crossplane`` CLI, built into the cache by scripts/tools.py if missing."""
    done = subprocess.run(  # noqa: S603 - our own script
        [sys.executable, str(TOOLS), "path", "crossplane"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        msg = f"the crossplane CLI cannot be had (scripts/tools.py path crossplane):\n{done.stderr}"
        raise ReleaseError(msg)
    return Path(done.stdout.strip())


def run_cli(cli: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run the CLI; its own error message, if it refuses, becomes the ReleaseError."""
    done = subprocess.run(  # noqa: S603 - the pinned CLI
        [str(cli), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        msg = f"crossplane {' '.join(args[:2])} refused: {said[-1] if said else done.returncode}"
        raise ReleaseError(msg)
    return done.stdout


# --- Before building: the package roots -------------------------------------------------


def tree_problems(root: Path, expected: Iterable[str]) -> list[str]:
    """What in ``root`` is not exactly the ``expected`` files (relative POSIX paths)."""
    wanted = set(expected)
    found: set[str] = set()
    problems = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            problems.append(f"{root}/{rel}: a symlink (crossplane xpkg build would not follow it)")
        elif path.is_file():
            found.add(rel)
            if rel not in wanted:
                problems.append(f"{root}/{rel}: stray file in the package root")
    problems += [f"{root}/{rel}: missing" for rel in sorted(wanted - found)]
    return problems


def _documents(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    if not all(isinstance(d, dict) for d in docs):
        msg = f"{path}: a YAML document that is not an object"
        raise ReleaseError(msg)
    return docs


def function_dependencies(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(package, version) of every Function in ``spec.dependsOn``, in either form."""
    out = []
    for dep in meta.get("spec", {}).get("dependsOn", []) or []:
        if dep.get("kind") == "Function" and "package" in dep:
            out.append((str(dep["package"]), str(dep.get("version", ""))))
        elif "function" in dep:
            out.append((str(dep["function"]), str(dep.get("version", ""))))
    return out


def configuration_problems(root: Path, source: PackageSource) -> list[str]:
    """Where a Configuration root's function dependency, ``source`` and Composition disagree."""
    meta_path = root / "crossplane.yaml"
    (meta,) = _documents(meta_path)
    problems = []
    functions = function_dependencies(meta)
    if len(functions) != 1:
        return [f"{meta_path}: spec.dependsOn names {len(functions)} Functions, not one"]
    ((package, version),) = functions
    if (package, version) != (source.function_package, source.tag):
        problems.append(
            f"{meta_path}: spec.dependsOn names the function {package} {version}, this release "
            f"publishes {source.function_package} {source.tag}"
        )
    name = object_name(package)
    for file in ("composition.yaml", "rollout-composition.yaml"):
        for composition in _documents(root / file):
            for i, step in enumerate(composition.get("spec", {}).get("pipeline", []) or []):
                called = (step.get("functionRef") or {}).get("name")
                if called != name:
                    problems.append(
                        f"{root / file}: spec.pipeline[{i}].functionRef.name is {called!r}, "
                        f"but Crossplane installs the dependency {package} as {name!r}"
                    )
    return problems


def _refuse(problems: Sequence[str]) -> None:
    if problems:
        raise ReleaseError("\n".join(problems))


def write_configuration_roots(source: PackageSource, work: Path) -> dict[str, Path]:
    """The Configuration package roots of ``source``, written under ``work`` by flavour."""
    files = apigen.render_files(source=source)
    roots = {}
    for xr in XR_TYPES:
        folder = apigen.package_folder(xr)
        root = work / apigen.configuration_package(xr).name
        root.mkdir(parents=True)
        for name in sorted(CONFIGURATION_FILES):
            (root / name).write_text(files[folder / name], encoding="utf-8")
        roots[folder.name] = root
    return roots


# --- Reading a built package back ---------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One layer of a package: its blob digest and size, and the digest of its tar."""

    digest: str
    size: int
    diff_id: str


@dataclass(frozen=True)
class Xpkg:
    """A package file as read back: its image config, layers and package.yaml stream."""

    config: dict[str, Any]
    config_digest: str
    config_size: int
    layers: tuple[Layer, ...]
    package_layer: str
    stream: bytes

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The YAML documents of package.yaml."""
        return [d for d in yaml.safe_load_all(self.stream) if d is not None]

    def pushed_manifest(self) -> bytes:
        """The manifest ``crossplane xpkg push`` uploads for this file, byte for byte.

        go-containerregistry's tarball image (Docker schema 2, one descriptor per layer
        blob) after crossplane-runtime's ``AnnotateLayers`` gives the package layer the
        ``io.crossplane.xpkg: base`` annotation, marshalled as Go's encoding/json does:
        struct field order, no spaces.
        """
        layers = []
        for layer in self.layers:
            descriptor: dict[str, Any] = {
                "mediaType": DOCKER_LAYER,
                "size": layer.size,
                "digest": layer.digest,
            }
            if layer.digest == self.package_layer:
                descriptor["annotations"] = {XPKG_ANNOTATION: XPKG_BASE}
            layers.append(descriptor)
        manifest = {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {
                "mediaType": DOCKER_CONFIG,
                "size": self.config_size,
                "digest": self.config_digest,
            },
            "layers": layers,
        }
        return json.dumps(manifest, separators=(",", ":")).encode()

    @property
    def pushed_digest(self) -> str:
        """The digest the registry gives this package once pushed."""
        return f"sha256:{hashlib.sha256(self.pushed_manifest()).hexdigest()}"


def _member(tar: tarfile.TarFile, name: str, where: Path) -> bytes:
    try:
        handle = tar.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        msg = f"{where}: no {name} in the package file"
        raise ReleaseError(msg)
    return handle.read()


def _package_stream(layer_tar: bytes, where: Path) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(layer_tar)) as inner:
        names = inner.getnames()
        if names != [STREAM_FILE]:
            msg = f"{where}: the package layer holds {names}, not just {STREAM_FILE}"
            raise ReleaseError(msg)
        return _member(inner, STREAM_FILE, where)


def read_xpkg(path: Path) -> Xpkg:
    """Read a package file back, checking every blob against its digest."""
    with tarfile.open(path) as tar:
        (entry,) = json.loads(_member(tar, "manifest.json", path))
        config_name = entry["Config"]
        config_bytes = _member(tar, config_name, path)
        config_digest = f"sha256:{hashlib.sha256(config_bytes).hexdigest()}"
        if config_name != config_digest:
            msg = f"{path}: the config is named {config_name} but its digest is {config_digest}"
            raise ReleaseError(msg)
        config = json.loads(config_bytes)
        labels = config.get("config", {}).get("Labels") or {}
        marked = [
            k[len(XPKG_LABEL_PREFIX) :]
            for k, v in labels.items()
            if k.startswith(XPKG_LABEL_PREFIX) and v == XPKG_BASE
        ]
        if len(marked) != 1:
            msg = (
                f"{path}: {len(marked)} layers are labelled "
                f"{XPKG_LABEL_PREFIX}<digest>: {XPKG_BASE}, not one"
            )
            raise ReleaseError(msg)
        layers = []
        stream = b""
        for name in entry["Layers"]:
            blob = _member(tar, name, path)
            digest = f"sha256:{hashlib.sha256(blob).hexdigest()}"
            if not name.startswith(digest.removeprefix("sha256:")):
                msg = f"{path}: layer {name} has the digest {digest}"
                raise ReleaseError(msg)
            raw = gzip.decompress(blob)
            layers.append(Layer(digest, len(blob), f"sha256:{hashlib.sha256(raw).hexdigest()}"))
            if digest == marked[0]:
                stream = _package_stream(raw, path)
    diff_ids = [layer.diff_id for layer in layers]
    if config.get("rootfs", {}).get("diff_ids") != diff_ids:
        msg = f"{path}: the config's rootfs.diff_ids are not the layers' ({diff_ids})"
        raise ReleaseError(msg)
    if marked[0] not in {layer.digest for layer in layers}:
        msg = f"{path}: the labelled package layer {marked[0]} is not among the layers"
        raise ReleaseError(msg)
    return Xpkg(config, config_digest, len(config_bytes), tuple(layers), marked[0], stream)


def _is_zero(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_is_zero(v) for v in value.values())
    return value in (None, "", [], 0, False)


def _key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    return (
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(obj.get("metadata", {}).get("name")),
    )


def content_problems(package: Xpkg, root: Path, files: Iterable[str]) -> list[str]:
    """Where the objects in package.yaml differ from those in the root's files.

    The builder decodes each object into its Go type and writes it out again: key order
    and comments go, and an object without a status gains the zero status of its type,
    which is all it may differ by here.
    """
    source = {_key(o): o for name in sorted(files) for o in _documents(root / name)}
    built: dict[tuple[str, str, str], dict[str, Any]] = {}
    problems = []
    for obj in package.objects:
        key = _key(obj)
        if key in built:
            problems.append(f"package.yaml holds {key} twice")
        if "status" not in source.get(key, {}) and _is_zero(obj.get("status")):
            built[key] = {k: v for k, v in obj.items() if k != "status"}
        else:
            built[key] = obj
    for key in sorted(set(source) | set(built)):
        if key not in built:
            problems.append(f"package.yaml lacks {key}, which {root} holds")
        elif key not in source:
            problems.append(f"package.yaml holds {key}, which {root} does not")
        elif built[key] != source[key]:
            problems.append(f"package.yaml's {key} differs from {root}'s")
    return problems


def runtime_problems(package: Xpkg, image_archive: Path) -> list[str]:
    """Where the function package does not carry the image: its layers and what runs."""
    image = read_oci_image(image_archive)
    problems = []
    image_layers = [
        (d, diff)
        for d, diff in zip(image["layers"], image["config"]["rootfs"]["diff_ids"], strict=True)
    ]
    carried = [
        (layer.digest, layer.diff_id)
        for layer in package.layers
        if layer.digest != package.package_layer
    ]
    if carried != image_layers:
        problems.append(
            f"the package's runtime layers {carried} are not the image's {image_layers}"
        )
    for field in RUNTIME_FIELDS:
        want = image["config"]["config"].get(field)
        got = package.config.get("config", {}).get(field)
        if want != got:
            problems.append(f"the package's config {field} is {got!r}, the image's {want!r}")
    return problems


def read_oci_image(archive: Path) -> dict[str, Any]:
    """The config and layer digests of the image archive scripts/build_image.py writes."""
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "index.json", archive))
        (descriptor,) = index["manifests"]
        manifest = json.loads(_member(tar, _blob(descriptor["digest"]), archive))
        config = json.loads(_member(tar, _blob(manifest["config"]["digest"]), archive))
    return {
        "manifest": descriptor["digest"],
        "config": config,
        "layers": [layer["digest"] for layer in manifest["layers"]],
    }


def _blob(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/", 1)


def extract_problems(cli: Path, path: Path, package: Xpkg, work: Path) -> list[str]:
    """Whether ``crossplane xpkg extract`` reads the same package.yaml out of the file."""
    out = work / f"{path.stem}.extract.gz"
    run_cli(cli, "xpkg", "extract", "--from-xpkg", str(path), "-o", str(out))
    stream = gzip.decompress(out.read_bytes())
    out.unlink()
    if stream != package.stream:
        return [f"{path}: crossplane xpkg extract reads another package.yaml than the layer holds"]
    return []


# --- Building ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltPackage:
    """A package of the release: its file, reference and what was read back from it."""

    kind: str
    file: Path
    reference: str
    xpkg: Xpkg
    flavour: str | None = None


def build_package(
    cli: Path,
    root: Path,
    files: Iterable[str],
    out: Path,
    work: Path,
    *,
    runtime_image: Path | None = None,
) -> Xpkg:
    """``crossplane xpkg build`` of ``root`` (exactly ``files``) into ``out``, read back."""
    files = sorted(files)
    _refuse(tree_problems(root, files))
    args = [
        "xpkg",
        "build",
        f"--package-root={root}",
        # A folder that does not exist: no examples (the default, ./examples, is the
        # working directory's, which would embed this repository's examples/).
        f"--examples-root={work / 'no-examples'}",
        f"--package-file={out}",
    ]
    if runtime_image is not None:
        args.append(f"--embed-runtime-image-tarball={runtime_image}")
    run_cli(cli, *args)
    package = read_xpkg(out)
    problems = content_problems(package, root, files)
    if runtime_image is not None:
        problems += runtime_problems(package, runtime_image)
    problems += extract_problems(cli, out, package, work)
    _refuse([f"{out.name}: {p}" for p in problems])
    return package


def production_function(source: PackageSource) -> str:
    """examples/production/function.yaml for ``source``: its package and Function name."""
    text = PRODUCTION_FUNCTION.read_text(encoding="utf-8")
    home_ref = f"{HOME_SOURCE.function_package}:{HOME_SOURCE.tag}"
    if home_ref not in text:
        msg = (
            f"{PRODUCTION_FUNCTION}: does not install {home_ref} (the committed packages' function)"
        )
        raise ReleaseError(msg)
    text = text.replace(home_ref, f"{source.function_package}:{source.tag}")
    text = text.replace(HOME_SOURCE.function_name, source.function_name)
    docs = [d for d in yaml.safe_load_all(text) if d]
    (function,) = [d for d in docs if d.get("kind") == "Function"]
    if (function["metadata"]["name"], function["spec"]["package"]) != (
        source.function_name,
        f"{source.function_package}:{source.tag}",
    ):
        msg = f"{PRODUCTION_FUNCTION}: the Function is not named {HOME_SOURCE.function_name}"
        raise ReleaseError(msg)
    return text


# install/<folder>/ per flavour: what one `kubectl apply -f` of the folder installs.
FLAVOUR_FOLDERS = {True: "namespaced", False: "legacy"}
# Below the flavour's folder, so `kubectl apply -f install/<flavour>/` (not recursive) leaves
# it out: its CRD exists only once the providers are installed.
PROVIDER_CONFIG_FOLDER = "provider-config"
CLUSTER_ROLE = "clusterrole.yaml"


def flavour_folder(xr: XRType) -> str:
    """The folder under ``install/`` holding what a user applies for ``xr``'s flavour."""
    return FLAVOUR_FOLDERS[xr.namespaced]


def aws_provider_config(xr: XRType) -> dict[str, Any]:
    """The AWS provider config the Composition's resources name by default, with IRSA.

    The group is the one of the flavour's composed AWS kinds (``aws.m.upbound.io`` for
    namespaced managed resources, ``aws.upbound.io`` for legacy ones); namespaced ones name
    the step input's default kind, legacy ones a ProviderConfig.
    """
    ref = StepInput().aws_provider_config
    group = KINDS["Role"][1 if xr.namespaced else 0].split("/")[0].partition(".")[2]
    return {
        "apiVersion": f"{group}/v1beta1",
        "kind": ref.kind if xr.namespaced else "ProviderConfig",
        "metadata": {"name": ref.name},
        "spec": {"credentials": {"source": "IRSA"}},
    }


def install_files(source: PackageSource) -> dict[str, str]:
    """What a user applies, by path under ``install/``.

    Per flavour, ``<flavour>/`` holds the RBAC and the Configuration (one ``kubectl apply -f``
    of the folder), and ``<flavour>/provider-config/`` the AWS provider config with IRSA,
    applied once the Configuration is healthy. Beside them: the Function's production wiring
    (``function.yaml``) and the optional ClusterRoles of apis/rbac/.
    """
    files = {}
    providers = ", ".join(f"{name} {tag}" for name, tag in PROVIDERS)
    rbac = {path.name: path.read_text(encoding="utf-8") for path in sorted(RBAC.glob("*.yaml"))}
    for xr in XR_TYPES:
        package = apigen.configuration_package(xr)
        folder = flavour_folder(xr)
        body = {
            "apiVersion": "pkg.crossplane.io/v1",
            "kind": "Configuration",
            "metadata": {"name": package.name},
            "spec": {"package": f"{source.package(package.name)}:{source.tag}"},
        }
        header = (
            f"{package.description}\n\n"
            f"kubectl apply -f install/{folder}/ (one flavour only: both define the same kind). "
            f"Crossplane then installs {source.function_package} {source.tag} as the Function "
            f"{source.function_name}, the name the Composition calls, and from "
            f"{PROVIDER_REGISTRY}: {providers} (unless they are installed already: aws "
            "provider-role prints the AWS ones using the providers' IRSA role). Where those "
            "cannot be fetched, see docs/installing.md (spec.skipDependencyResolution)."
        )
        files[f"{folder}/configuration.yaml"] = apigen.to_yaml(body, header)
        files[f"{folder}/{CLUSTER_ROLE}"] = rbac[CLUSTER_ROLE]
        config = aws_provider_config(xr)
        header = (
            f"The provider config of the composed AWS resources ({config['kind']} "
            f"{config['metadata']['name']}, the step input's awsProviderConfig default), with "
            "the providers' IRSA role (aws provider-role). Its CRD comes with the providers: "
            f"apply it once configuration/{package.name} is Healthy."
        )
        files[f"{folder}/{PROVIDER_CONFIG_FOLDER}/provider-config.yaml"] = apigen.to_yaml(
            config, header
        )
    files["function.yaml"] = production_function(source)
    for name, text in rbac.items():
        if name != CLUSTER_ROLE:
            files[name] = text
    return files


def build(
    source: PackageSource,
    out_root: Path,
    *,
    cli: Path | None = None,
) -> dict[str, Any]:
    """Build the release of ``source`` into ``out_root/VERSION``; returns release.json."""
    if source.version != HOME_SOURCE.version:
        # The image holds the checkout's function, which reports its own version (--version,
        # the build_info metric): a package tagged otherwise would misname what it runs.
        msg = (
            f"VERSION {source.version} is not the checkout's version {HOME_SOURCE.version} "
            "(function/__version__.py): set __version__ there and run make generate, or leave "
            "VERSION unset"
        )
        raise ReleaseError(msg)
    cli = cli or crossplane_cli()
    final = out_root / source.version
    if final.exists() and not (final / RECORD).is_file():
        msg = f"{final} exists and is not a release folder (no {RECORD}): not replacing it"
        raise ReleaseError(msg)
    out_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{source.version}.", dir=out_root))
    work = Path(tempfile.mkdtemp(prefix="release-work."))
    try:
        say(f"release {source.version} for {source.registry}: the image")
        image_record = build_image.build(staging, source.version, source.function_package)
        image_archive = staging / str(image_record["archive"])
        packages = []
        say("the function package")
        function_file = staging / f"{FUNCTION_PACKAGE}-{source.version}.xpkg"
        packages.append(
            BuiltPackage(
                "Function",
                function_file,
                f"{source.function_package}:{source.tag}",
                build_package(
                    cli,
                    FUNCTION_ROOT,
                    FUNCTION_FILES,
                    function_file,
                    work,
                    runtime_image=image_archive,
                ),
            )
        )
        roots = write_configuration_roots(source, work / "roots")
        for xr in XR_TYPES:
            flavour = apigen.package_folder(xr).name
            root = roots[flavour]
            name = apigen.configuration_package(xr).name
            say(f"the Configuration {name}")
            _refuse(configuration_problems(root, source))
            file = staging / f"{name}-{source.version}.xpkg"
            xpkg = build_package(cli, root, CONFIGURATION_FILES, file, work)
            packages.append(
                BuiltPackage(
                    "Configuration", file, f"{source.package(name)}:{source.tag}", xpkg, flavour
                )
            )
        for rel, text in install_files(source).items():
            (staging / "install" / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / "install" / rel).write_text(text, encoding="utf-8")
        record = _record(source, cli, staging, image_record, packages)
        (staging / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)


def _record(
    source: PackageSource,
    cli: Path,
    folder: Path,
    image_record: Mapping[str, Any],
    packages: Sequence[BuiltPackage],
) -> dict[str, Any]:
    by_file = {p.file.name: p for p in packages}
    artifacts = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        entry: dict[str, Any] = {
            "file": rel,
            "size": path.stat().st_size,
            "sha256": build_image.sha256_file(path),
        }
        if rel == image_record["archive"]:
            entry |= {
                "kind": "image",
                "reference": image_record["reference"],
                "manifest_digest": image_record["digests"]["manifest"],
                "config_digest": image_record["digests"]["config"],
            }
        elif rel in by_file:
            package = by_file[rel]
            entry |= {
                "kind": package.kind,
                "reference": package.reference,
                "digest": package.xpkg.pushed_digest,
                "config_digest": package.xpkg.config_digest,
            }
            if package.flavour:
                entry["flavour"] = package.flavour
        artifacts.append(entry)
    cli_version = run_cli(cli, "version", "--client").strip().rpartition(" ")[2]
    image = read_oci_image(folder / str(image_record["archive"]))
    labels = image["config"]["config"].get("Labels") or {}
    return {
        "version": source.version,
        "registry": source.registry,
        "tag": source.tag,
        "function": {"package": source.function_package, "name": source.function_name},
        # The commit the image says it was built from (its org.opencontainers label).
        "revision": labels.get("org.opencontainers.image.revision", "unknown"),
        "crossplane_cli": cli_version,
        "artifacts": artifacts,
        "push": [
            f"crossplane xpkg push --package-files={p.file.name} {p.reference}" for p in packages
        ],
    }


# --- Pushing -------------------------------------------------------------------------------


def pushed_packages(folder: Path) -> Iterator[dict[str, Any]]:
    """The packages of a built release, the function first, as release.json lists them."""
    record_path = folder / RECORD
    if not record_path.is_file():
        msg = f"{folder}: no {RECORD}; build the release first (make release)"
        raise ReleaseError(msg)
    record = json.loads(record_path.read_text(encoding="utf-8"))
    packages = [a for a in record["artifacts"] if a.get("kind") in {"Function", "Configuration"}]
    yield from sorted(packages, key=lambda a: a["kind"] != "Function")


def push(
    folder: Path,
    source: PackageSource,
    *,
    cli: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """``crossplane xpkg push`` every package of ``source``'s release in ``folder``."""
    record_path = folder / RECORD
    if record_path.is_file():
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if (record["registry"], record["version"]) != (source.registry, source.version):
            msg = (
                f"{folder} holds the release {record['version']} for {record['registry']}, not "
                f"{source.version} for {source.registry}: its packages name their registry, so "
                "build the release for this one (make release REGISTRY=... VERSION=...)"
            )
            raise ReleaseError(msg)
    cli = cli or crossplane_cli()
    pushed = []
    for artifact in pushed_packages(folder):
        path = folder / artifact["file"]
        if build_image.sha256_file(path) != artifact["sha256"]:
            msg = f"{path}: not the file {RECORD} lists (sha256 differs); build the release again"
            raise ReleaseError(msg)
        say(f"push {artifact['reference']} ({artifact['digest']})")
        run_cli(cli, "xpkg", "push", f"--package-files={path}", artifact["reference"], env=env)
        pushed.append(artifact["reference"])
    return pushed


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build or push a release."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("build", "push"))
    parser.add_argument("--registry", default=LOCAL_REGISTRY, help="default: %(default)s")
    parser.add_argument("--version", default=HOME_SOURCE.version, help="default: %(default)s")
    parser.add_argument("--out", type=Path, default=DIST, help="default: %(default)s")
    args = parser.parse_args(argv)
    try:
        source = PackageSource(args.registry, args.version)
        if args.command == "build":
            record = build(source, args.out)
            folder = args.out / source.version
            for artifact in record["artifacts"]:
                digest = artifact.get("digest") or artifact.get("manifest_digest") or ""
                say(f"{folder / artifact['file']}: {artifact['size']} bytes {digest}")
            say(f"push with: make release-push VERSION={source.version} REGISTRY={source.registry}")
        else:
            push(args.out / source.version, source)
    except (SourceError, ReleaseError) as e:
        say(f"FATAL: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
