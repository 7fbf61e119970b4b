"""A release's names and checks, without the crossplane CLI (e2e/test_release.py runs it).

- The name Crossplane gives a package it installs as a dependency, as its source computes
  it (function_tools/packaging.py cites where): the upstream test table of ``ToDNSLabel`` and
  go-containerregistry's registry/repository split.
- A REGISTRY or VERSION the packages cannot be published under is refused, saying why.
- The Configuration files generated for a registry agree: ``dependsOn`` names that
  registry's function package, the Compositions call the name Crossplane will give it;
  every edit that breaks that agreement is refused by the release's check.
- The release's package-root and package-file checks refuse what they must.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from function.flavour import KINDS, LEGACY_XR, NAMESPACED_XR, XR_TYPES
from function.step_input import StepInput
from function_tools import apigen
from function_tools.packaging import (
    HOME_SOURCE,
    PROVIDER_REGISTRY,
    PackageSource,
    SourceError,
    dns_label,
    object_name,
    split_reference,
)
from scripts import release
from tests.kube_schema import validate
from tests.readme import README, quick_start, yaml_blocks

ACME = PackageSource("ghcr.io/acme", HOME_SOURCE.version)

# --- Names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label"),
    [
        # crossplane-runtime v2.4.0 pkg/xpkg/name_test.go, TestToDNSLabel.
        ("-hi/my.name/is-", "hi-my-name-is"),
        ("a" * 64, "a" * 63),
        ("a" * 60 + "----", "a" * 60),
        # Uppercase and other characters are dropped, not replaced.
        ("Ab_c", "bc"),
    ],
)
def test_dns_label_is_crossplanes(text: str, label: str) -> None:
    assert dns_label(text) == label


@pytest.mark.parametrize(
    ("package", "host", "path"),
    [
        ("xpkg.crossplane.io/crossplane-contrib/provider-helm", "xpkg.crossplane.io", "crossplane-contrib/provider-helm"),
        ("localhost:5000/a/b", "localhost:5000", "a/b"),
        ("localhost/a", "localhost", "a"),
        ("127.0.0.1:5000/fcp/function-cluster-plugin", "127.0.0.1:5000", "fcp/function-cluster-plugin"),
        # No host: Docker Hub, whose one-component paths are under library/.
        ("acme/fn", "index.docker.io", "acme/fn"),
        ("busybox", "index.docker.io", "library/busybox"),
        ("docker.io/busybox", "index.docker.io", "library/busybox"),
    ],
)
def test_the_registry_host_is_split_off_as_go_containerregistry_does(
    package: str, host: str, path: str
) -> None:
    assert split_reference(package) == (host, path)


@pytest.mark.parametrize(
    ("registry", "name"),
    [
        ("xpkg.crossplane.io/function-cluster-plugin", "function-cluster-plugin-function-cluster-plugin"),
        ("localhost:5000/function-cluster-plugin", "function-cluster-plugin-function-cluster-plugin"),
        ("ghcr.io/acme", "acme-function-cluster-plugin"),
        ("registry.example.com:8443/platform/crossplane", "platform-crossplane-function-cluster-plugin"),
        # Cut after 63 characters, as Crossplane cuts it.
        (
            "ghcr.io/a-very-long-organisation-name/and-a-team",
            "a-very-long-organisation-name-and-a-team-function-cluster-plugi",
        ),
    ],
)
def test_the_function_name_follows_the_registry_path(registry: str, name: str) -> None:
    source = PackageSource(registry, "1.2.3")
    assert source.function_name == name == object_name(source.function_package)
    assert len(name) <= 63


def test_the_committed_files_name_the_projects_home() -> None:
    assert HOME_SOURCE.function_name == "function-cluster-plugin-function-cluster-plugin"
    assert HOME_SOURCE.tag == f"v{HOME_SOURCE.version}"


@pytest.mark.parametrize(
    ("registry", "version", "message"),
    [
        ("acme/fn", "1.0.0", "'acme' is not a registry host"),
        ("ghcr.io", "1.0.0", "no path after the registry host"),
        ("ghcr.io/", "1.0.0", "no path after the registry host"),
        ("ghcr.io/Acme", "1.0.0", "path component 'Acme'"),
        ("ghcr.io/a//b", "1.0.0", "path component ''"),
        ("ghcr.io/a/:v1", "1.0.0", "path component ':v1'"),
        ("Ghcr.io/a", "1.0.0", "'Ghcr.io' is not a registry host[:port]"),
        ("ghcr.io:x/a", "1.0.0", "is not a registry host[:port]"),
        ("ghcr.io/acme", "v1.0.0", "without the v"),
        ("ghcr.io/acme", "1.0", "want a semantic version"),
        ("ghcr.io/acme", "1.0.0+build.1", "want a semantic version"),
        ("ghcr.io/acme", "01.0.0", "want a semantic version"),
    ],
)
def test_a_source_the_packages_cannot_use_is_refused(registry: str, version: str, message: str) -> None:
    with pytest.raises(SourceError, match=r"^(REGISTRY|VERSION) ") as refused:
        PackageSource(registry, version)
    assert message in str(refused.value)


def test_a_prerelease_version_is_a_tag() -> None:
    assert PackageSource("ghcr.io/acme", "0.2.0-rc.1").tag == "v0.2.0-rc.1"


# --- The generated Configurations agree -------------------------------------------------


@pytest.mark.parametrize("xr", XR_TYPES, ids=lambda xr: xr.kind)
def test_generated_files_depend_on_and_call_the_registrys_function(xr: Any, tmp_path: Path) -> None:
    root = release.write_configuration_roots(ACME, tmp_path)[apigen.package_folder(xr).name]
    meta = yaml.safe_load((root / "crossplane.yaml").read_text())
    composition = yaml.safe_load((root / "composition.yaml").read_text())
    assert release.function_dependencies(meta) == [("ghcr.io/acme/function-cluster-plugin", ACME.tag)]
    assert {s["functionRef"]["name"] for s in composition["spec"]["pipeline"]} == {"acme-function-cluster-plugin"}
    assert release.configuration_problems(root, ACME) == []
    # The dependency form each flavour's Crossplane releases read.
    (function_dep,) = [d for d in meta["spec"]["dependsOn"] if "function" in d or d.get("kind") == "Function"]
    assert ("function" in function_dep) is (xr is LEGACY_XR)
    # Apart from the function, the files are the committed ones.
    committed = yaml.safe_load((apigen.ROOT / apigen.package_folder(xr) / "crossplane.yaml").read_text())
    assert meta["spec"]["dependsOn"][1:] == committed["spec"]["dependsOn"][1:]
    assert (root / "definition.yaml").read_text() == (apigen.ROOT / apigen.package_folder(xr) / "definition.yaml").read_text()


def _edit(path: Path, edit: Any) -> None:
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    path.write_text(yaml.safe_dump(doc))


EDITS = [
    (
        "dependency on another registry",
        "crossplane.yaml",
        lambda d: d["spec"]["dependsOn"][0].update(package="ghcr.io/other/function-cluster-plugin"),
        [
            "names the function ghcr.io/other/function-cluster-plugin",
            (
                "functionRef.name is 'acme-function-cluster-plugin', but Crossplane installs the "
                "dependency ghcr.io/other/function-cluster-plugin as 'other-function-cluster-plugin'"
            ),
        ],
    ),
    (
        "dependency on another version",
        "crossplane.yaml",
        lambda d: d["spec"]["dependsOn"][0].update(version="v9.9.9"),
        ["names the function ghcr.io/acme/function-cluster-plugin v9.9.9"],
    ),
    (
        "Composition calling another name",
        "composition.yaml",
        lambda d: d["spec"]["pipeline"][0]["functionRef"].update(name="function-cluster-plugin"),
        ["functionRef.name is 'function-cluster-plugin'"],
    ),
    (
        "no function dependency",
        "crossplane.yaml",
        lambda d: d["spec"]["dependsOn"].pop(0),
        ["names 0 Functions, not one"],
    ),
    (
        "two function dependencies",
        "crossplane.yaml",
        lambda d: d["spec"]["dependsOn"].append(dict(d["spec"]["dependsOn"][0])),
        ["names 2 Functions, not one"],
    ),
]


@pytest.mark.parametrize(("case", "file", "edit", "expected"), EDITS, ids=[e[0] for e in EDITS])
def test_an_edit_breaking_the_agreement_is_refused(
    case: str, file: str, edit: Any, expected: list[str], tmp_path: Path
) -> None:
    root = release.write_configuration_roots(ACME, tmp_path)[apigen.package_folder(NAMESPACED_XR).name]
    _edit(root / file, edit)
    problems = release.configuration_problems(root, ACME)
    for want in expected:
        assert any(want in p for p in problems), f"{case}: {problems}"


def test_a_package_root_must_hold_exactly_its_files(tmp_path: Path) -> None:
    root = release.write_configuration_roots(ACME, tmp_path)["v2"]
    assert release.tree_problems(root, release.CONFIGURATION_FILES) == []
    (root / "clusterrole.yaml").write_text("kind: ClusterRole\n")
    (root / "composition.yaml").unlink()
    (root / "more").mkdir()
    (root / "more" / "x.yaml").symlink_to(root / "definition.yaml")
    problems = release.tree_problems(root, release.CONFIGURATION_FILES)
    assert problems == [
        f"{root}/clusterrole.yaml: stray file in the package root",
        f"{root}/more/x.yaml: a symlink (crossplane xpkg build would not follow it)",
        f"{root}/composition.yaml: missing",
    ]
    # The function package is built from package/ as committed: exactly its two files.
    assert release.tree_problems(release.FUNCTION_ROOT, release.FUNCTION_FILES) == []


# --- Package files read back --------------------------------------------------------------


def _gz_tar(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _package_file(path: Path, layers: list[bytes], labelled: list[int], *, rename: bool = False) -> None:
    """A package file laid out as go-containerregistry's tarball.Write lays it out."""
    digests = [hashlib.sha256(b).hexdigest() for b in layers]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Labels": {f"io.crossplane.xpkg:sha256:{digests[i]}": "base" for i in labelled}},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(gzip.decompress(b)).hexdigest()}" for b in layers]},
    }
    config_bytes = json.dumps(config).encode()
    config_name = f"sha256:{hashlib.sha256(config_bytes).hexdigest()}"
    names = [f"{d}.tar.gz" for d in digests]
    if rename:
        names[0] = f"{'0' * 64}.tar.gz"
    members = {config_name: config_bytes, **dict(zip(names, layers, strict=True))}
    members["manifest.json"] = json.dumps([{"Config": config_name, "RepoTags": None, "Layers": names}]).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


STREAM = b"---\napiVersion: meta.pkg.crossplane.io/v1\nkind: Configuration\nmetadata:\n  name: x\n"


def test_a_package_file_is_read_back_with_its_stream_and_push_manifest(tmp_path: Path) -> None:
    runtime = _gz_tar({"bin/x": b"x"})
    package_layer = _gz_tar({"package.yaml": STREAM})
    _package_file(tmp_path / "p.xpkg", [runtime, package_layer], labelled=[1])
    package = release.read_xpkg(tmp_path / "p.xpkg")
    assert package.stream == STREAM
    assert package.objects == [yaml.safe_load(STREAM)]
    manifest = json.loads(package.pushed_manifest())
    assert manifest["mediaType"] == release.DOCKER_MANIFEST
    assert [layer.get("annotations") for layer in manifest["layers"]] == [None, {"io.crossplane.xpkg": "base"}]
    assert package.pushed_digest == f"sha256:{hashlib.sha256(package.pushed_manifest()).hexdigest()}"


@pytest.mark.parametrize(
    ("layers", "labelled", "rename", "message"),
    [
        ("one", [], False, "0 layers are labelled"),
        ("two", [0, 1], False, "2 layers are labelled"),
        ("extra", [0], False, r"holds \['package.yaml', 'extra'\], not just package.yaml"),
        ("one", [0], True, "has the digest"),
    ],
)
def test_a_malformed_package_file_is_refused(
    tmp_path: Path, layers: str, labelled: list[int], rename: bool, message: str
) -> None:
    package_layer = _gz_tar({"package.yaml": STREAM, **({"extra": b"x"} if layers == "extra" else {})})
    second = _gz_tar({"package.yaml": STREAM + b"# another\n"})
    blobs = [package_layer, second] if layers == "two" else [package_layer]
    _package_file(tmp_path / "p.xpkg", blobs, labelled, rename=rename)
    with pytest.raises(release.ReleaseError, match=message):
        release.read_xpkg(tmp_path / "p.xpkg")


def test_package_contents_may_differ_from_the_root_by_a_zero_status_only(tmp_path: Path) -> None:
    (tmp_path / "crossplane.yaml").write_text(STREAM.decode())
    (tmp_path / "crd.yaml").write_text("apiVersion: v1\nkind: Thing\nmetadata: {name: t}\nspec: {a: 1}\n")
    thing = {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t"}, "spec": {"a": 1}}

    def package(*objects: dict[str, Any]) -> release.Xpkg:
        stream = "".join("---\n" + yaml.safe_dump(o) for o in objects).encode()
        return release.Xpkg({}, "", 0, (), "", stream)

    meta = yaml.safe_load(STREAM)
    files = ["crossplane.yaml", "crd.yaml"]
    zero_status = {**thing, "status": {"acceptedNames": {"kind": ""}, "conditions": None}}
    assert release.content_problems(package(meta, zero_status), tmp_path, files) == []
    assert release.content_problems(package(meta, {**thing, "status": {"ready": True}}), tmp_path, files) == [
        "package.yaml's ('v1', 'Thing', 't') differs from " + f"{tmp_path}'s"
    ]
    assert release.content_problems(package(meta), tmp_path, files) == [
        f"package.yaml lacks ('v1', 'Thing', 't'), which {tmp_path} holds"
    ]
    assert release.content_problems(package(meta, {**thing, "spec": {"a": 2}}), tmp_path, files)


# --- What a user applies, and refusals before anything runs ----------------------------------


def test_install_files_name_the_registrys_packages_and_function() -> None:
    files = release.install_files(ACME)
    v2 = yaml.safe_load(files["namespaced/configuration.yaml"])
    v1 = yaml.safe_load(files["legacy/configuration.yaml"])
    assert v2["spec"]["package"] == f"ghcr.io/acme/configuration-cluster-plugin:{ACME.tag}"
    assert v1["spec"]["package"] == f"ghcr.io/acme/configuration-cluster-plugin-legacy:{ACME.tag}"
    docs = [d for d in yaml.safe_load_all(files["function.yaml"]) if d]
    (function,) = [d for d in docs if d["kind"] == "Function"]
    assert function["metadata"]["name"] == "acme-function-cluster-plugin"
    assert function["spec"]["package"] == f"ghcr.io/acme/function-cluster-plugin:{ACME.tag}"
    assert "function-cluster-plugin-function-cluster-plugin" not in files["function.yaml"]
    rbac = (release.RBAC / "clusterrole.yaml").read_text()
    assert files["namespaced/clusterrole.yaml"] == files["legacy/clusterrole.yaml"] == rbac
    protect = (release.RBAC / "clusterrole-protect-cluster.yaml").read_text()
    assert files["clusterrole-protect-cluster.yaml"] == protect


def test_one_apply_of_a_flavour_folder_installs_its_rbac_and_configuration_only() -> None:
    """`kubectl apply -f install/<flavour>/` reads that folder's files, not its subfolders."""
    files = release.install_files(ACME)
    for xr in XR_TYPES:
        folder = release.flavour_folder(xr)
        applied = [f for f in files if f.rpartition("/")[0] == folder]
        kinds = sorted(d["kind"] for f in applied for d in yaml.safe_load_all(files[f]) if d)
        assert kinds == ["ClusterRole", "Configuration"], folder
        (configuration,) = [
            d for f in applied for d in yaml.safe_load_all(files[f]) if d and d["kind"] == "Configuration"
        ]
        assert configuration["metadata"]["name"] == apigen.configuration_package(xr).name
    assert set(release.FLAVOUR_FOLDERS.values()) == {"namespaced", "legacy"}


@pytest.mark.parametrize("xr", XR_TYPES, ids=release.flavour_folder)
def test_the_release_creates_the_aws_provider_config_the_resources_use(xr: Any) -> None:
    """Composed AWS resources name their provider config in their provider family's group
    (aws.m.upbound.io for namespaced ones, aws.upbound.io for legacy ones): the kind the step
    input names (namespaced), a ProviderConfig (legacy, which names no kind); with IRSA."""
    files = release.install_files(ACME)
    folder = release.flavour_folder(xr)
    (config,) = yaml.safe_load_all(files[f"{folder}/provider-config/provider-config.yaml"])
    group = KINDS["Role"][1 if xr.namespaced else 0].split("/")[0].partition(".")[2]
    default = StepInput().aws_provider_config
    assert config["apiVersion"] == f"{group}/v1beta1"
    assert config["kind"] == (default.kind if xr.namespaced else "ProviderConfig")
    assert config["metadata"]["name"] == default.name
    assert config["spec"]["credentials"] == {"source": "IRSA"}
    assert validate(config) == []


def test_a_version_other_than_the_checkouts_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    other = PackageSource("ghcr.io/acme", "99.0.0")
    with pytest.raises(release.ReleaseError, match=r"VERSION 99\.0\.0 is not the checkout's version"):
        release.build(other, tmp_path, cli=tmp_path / "no-cli")
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_is_not_a_release_is_not_replaced(tmp_path: Path) -> None:
    (tmp_path / HOME_SOURCE.version).mkdir()
    (tmp_path / HOME_SOURCE.version / "mine.txt").write_text("keep me")
    with pytest.raises(release.ReleaseError, match="is not a release folder"):
        release.build(HOME_SOURCE, tmp_path, cli=tmp_path / "no-cli")
    assert (tmp_path / HOME_SOURCE.version / "mine.txt").read_text() == "keep me"


def test_the_command_refuses_a_bad_registry_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert release.main(["build", "--registry", "acme/fn"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("FATAL: REGISTRY 'acme/fn': 'acme' is not a registry host")
    assert err.count("\n") == 1


def test_push_needs_a_built_release(tmp_path: Path) -> None:
    with pytest.raises(release.ReleaseError, match=r"no release\.json; build the release first"):
        release.push(tmp_path, HOME_SOURCE, cli=tmp_path / "no-cli")


# --- The README's quick start ----------------------------------------------------------


def test_the_quick_start_mirror_rewrites_the_providers_the_packages_depend_on() -> None:
    (image_config,) = [d for d in yaml_blocks(quick_start()) if d.get("kind") == "ImageConfig"]
    assert image_config["spec"]["matchImages"] == [{"type": "Prefix", "prefix": PROVIDER_REGISTRY}]


def test_the_readme_installs_nothing_nobody_published() -> None:
    for doc in (README, *sorted((README.parent / "docs").glob("*.md"))):
        text = doc.read_text(encoding="utf-8")
        assert not re.search(r"xpkg\.crossplane\.io/function-cluster-plugin/[a-z-]+:v", text), doc
    assert "make release REGISTRY=" in quick_start()
    assert "skipDependencyResolution: true" in quick_start()
