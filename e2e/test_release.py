"""``make release`` and ``make release-push`` with the real ``crossplane`` CLI and a real registry.

One release is built and pushed (the ``published_release`` fixture) for a registry path of a loopback registry (``e2e/registry.py``:
Debian's docker-registry, TLS from a test CA) under an organisation other than the
project's, ``REGISTRY=127.0.0.1:PORT/acme/platform``, so the Function's object name
(``acme-platform-function-cluster-plugin``) differs from the committed files' and must
have been computed for this registry. Then:

- the release folder lists every file with its size and sha256, and each package's
  reference and digest;
- read back from the ``.xpkg`` files: each Configuration depends on the function package
  of this registry at this version, and its Composition calls the Function by the name
  Crossplane gives that dependency; the function package carries the image (image.toml's
  entrypoint and user) and the step Input CRD;
- broken package roots are refused: a ClusterRole by the CLI itself (and by the release
  before it runs), a dependsOn that disagrees with the Composition only by the release
  (the CLI builds it without complaint);
- ``crossplane xpkg push`` (trusting the CA through SSL_CERT_FILE) puts each package in
  the registry under exactly the digest release.json computed from the file; pulled back
  by that digest (the registry's API, and ``crossplane xpkg extract``) it is the same
  package; without the CA the CLI refuses to push;
- stand-ins for the providers pushed beside it, with the ImageConfig that mirrors
  xpkg.crossplane.io/crossplane-contrib there, answer for every provider dependency of
  each Configuration at its pinned version.

Needs root and debootstrap (the image), docker-registry, and the pinned CLI (Go).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import RELEASE_PATH
from e2e.registry import MIRROR_PATH, PublishedRelease
from function.flavour import XR_TYPES
from function_tools import apigen
from function_tools.packaging import (
    HOME_SOURCE,
    PROVIDER_REGISTRY,
    PROVIDERS,
    PackageSource,
    object_name,
)
from scripts import build_image, release
from tests.test_mtls import make_ca


@pytest.fixture(scope="module")
def published(published_release: PublishedRelease) -> PublishedRelease:
    return published_release


# --- The release folder --------------------------------------------------------------


def test_the_record_lists_every_file_with_size_and_sha256(published: PublishedRelease) -> None:
    files = {
        p.relative_to(published.folder).as_posix()
        for p in published.folder.rglob("*")
        if p.is_file() and p.name != release.RECORD
    }
    assert {a["file"] for a in published.record["artifacts"]} == files
    for artifact in published.record["artifacts"]:
        path = published.folder / artifact["file"]
        assert artifact["size"] == path.stat().st_size
        assert artifact["sha256"] == build_image.sha256_file(path)
    version = published.source.version
    assert {
        f"function-cluster-plugin-{version}.oci.tar",
        f"function-cluster-plugin-{version}.xpkg",
        f"configuration-cluster-plugin-{version}.xpkg",
        f"configuration-cluster-plugin-legacy-{version}.xpkg",
        "install/namespaced/configuration.yaml",
        "install/namespaced/clusterrole.yaml",
        "install/namespaced/provider-config/provider-config.yaml",
        "install/legacy/configuration.yaml",
        "install/legacy/clusterrole.yaml",
        "install/legacy/provider-config/provider-config.yaml",
        "install/function.yaml",
    } <= files
    assert published.record["crossplane_cli"] == "v2.5.0"


def test_the_function_name_follows_the_registry(published: PublishedRelease) -> None:
    name = published.record["function"]["name"]
    assert name == "acme-platform-function-cluster-plugin"
    assert name != HOME_SOURCE.function_name
    assert published.record["function"]["package"] == f"{published.registry.host}/{RELEASE_PATH}/function-cluster-plugin"


@pytest.mark.parametrize("xr", XR_TYPES, ids=lambda xr: apigen.package_folder(xr).name)
def test_each_configuration_depends_on_the_function_it_calls(published: PublishedRelease, xr: Any) -> None:
    flavour = apigen.package_folder(xr).name
    objects = published.xpkg("Configuration", flavour).objects
    (meta,) = [o for o in objects if o["kind"] == "Configuration"]
    # The ClusterPlugin's Composition and XRD, beside the ClusterPluginRollout's (same function).
    (xrd,) = [o for o in objects if o["kind"] == "CompositeResourceDefinition" and o["spec"]["names"]["kind"] == xr.kind]
    (composition,) = [
        o for o in objects if o["kind"] == "Composition" and o["spec"]["compositeTypeRef"]["kind"] == xr.kind
    ]
    assert meta["metadata"]["name"] == apigen.configuration_package(xr).name
    assert xrd["spec"]["names"]["kind"] == xr.kind
    functions = release.function_dependencies(meta)
    assert functions == [(published.source.function_package, published.source.tag)]
    (step,) = composition["spec"]["pipeline"]
    assert step["functionRef"]["name"] == object_name(functions[0][0]) == published.record["function"]["name"]
    # What a user applies names the same package and Function.
    install = published.folder / "install" / release.flavour_folder(xr) / "configuration.yaml"
    applied = yaml.safe_load(install.read_text())
    assert applied["spec"]["package"] == published.artifact("Configuration", flavour)["reference"]


def test_the_production_wiring_names_the_function_of_this_registry(published: PublishedRelease) -> None:
    docs = [d for d in yaml.safe_load_all((published.folder / "install" / "function.yaml").read_text()) if d]
    (function,) = [d for d in docs if d["kind"] == "Function"]
    name = published.record["function"]["name"]
    assert function["metadata"]["name"] == name
    assert function["spec"]["package"] == published.artifact("Function")["reference"]
    (pdb,) = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["selector"]["matchLabels"] == {"pkg.crossplane.io/function": name}
    assert HOME_SOURCE.function_name not in (published.folder / "install" / "function.yaml").read_text()


def test_the_function_package_carries_the_image_and_the_input_crd(published: PublishedRelease) -> None:
    package = published.xpkg("Function")
    definition = build_image.ImageDefinition.load()
    runtime = package.config["config"]
    assert runtime["Entrypoint"] == list(definition.entrypoint)
    assert runtime["User"] == definition.user
    assert f"{definition.exposed_port}/tcp" in runtime["ExposedPorts"]
    image = release.read_oci_image(published.folder / published.artifact("image")["file"])
    assert [layer.digest for layer in package.layers[:-1]] == image["layers"]
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in package.objects)
    assert kinds == [("CustomResourceDefinition", f"inputs.{apigen.INPUT_GROUP}"), ("Function", "function-cluster-plugin")]


# --- Refused ------------------------------------------------------------------------------


def _configuration_root(published: PublishedRelease, tmp_path: Path) -> Path:
    return release.write_configuration_roots(published.source, tmp_path / "roots")["v2"]


def test_a_cluster_role_in_a_package_root_is_refused(published: PublishedRelease, crossplane: Path, tmp_path: Path) -> None:
    root = _configuration_root(published, tmp_path)
    shutil.copy(release.RBAC / "clusterrole.yaml", root / "clusterrole.yaml")
    # The CLI itself refuses it: no ClusterRole kind in a package's object scheme.
    done = subprocess.run(
        [str(crossplane), "xpkg", "build", f"--package-root={root}", f"--examples-root={tmp_path / 'none'}", f"--package-file={tmp_path / 'x.xpkg'}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert 'no kind "ClusterRole" is registered for version "rbac.authorization.k8s.io/v1"' in done.stderr
    # The release refuses it before the CLI runs, naming the file.
    with pytest.raises(release.ReleaseError, match=r"clusterrole\.yaml: stray file in the package root"):
        release.build_package(crossplane, root, release.CONFIGURATION_FILES, tmp_path / "y.xpkg", tmp_path)
    assert not (tmp_path / "y.xpkg").exists()


def test_a_crd_in_a_configuration_is_refused_by_the_cli(published: PublishedRelease, crossplane: Path, tmp_path: Path) -> None:
    root = _configuration_root(published, tmp_path)
    shutil.copy(apigen.ROOT / apigen.INPUT_CRD_PATH, root / "input.yaml")
    with pytest.raises(release.ReleaseError, match="object did not pass any of the linters"):
        release.build_package(crossplane, root, [*release.CONFIGURATION_FILES, "input.yaml"], tmp_path / "x.xpkg", tmp_path)


def test_a_dependency_that_disagrees_with_the_composition_is_refused(published: PublishedRelease, crossplane: Path, tmp_path: Path) -> None:
    root = _configuration_root(published, tmp_path)
    assert release.configuration_problems(root, published.source) == []
    meta_path = root / "crossplane.yaml"
    meta = yaml.safe_load(meta_path.read_text())
    other = f"{published.registry.host}/other/function-cluster-plugin"
    meta["spec"]["dependsOn"][0]["package"] = other
    meta_path.write_text(yaml.safe_dump(meta))
    # Crossplane builds it without complaint: nothing in a package says which name a
    # dependency will be installed under.
    built_anyway = release.build_package(crossplane, root, release.CONFIGURATION_FILES, tmp_path / "x.xpkg", tmp_path)
    assert built_anyway.objects
    problems = release.configuration_problems(root, published.source)
    assert any(f"names the function {other} {published.source.tag}, this release publishes" in p for p in problems)
    assert any(
        "functionRef.name is 'acme-platform-function-cluster-plugin', but Crossplane installs the "
        f"dependency {other} as 'other-function-cluster-plugin'" in p
        for p in problems
    )


# --- Pushed and pulled back ----------------------------------------------------------------


@pytest.mark.parametrize(("kind", "flavour"), [("Function", None), ("Configuration", "v2"), ("Configuration", "v1")])
def test_a_pushed_package_is_resolved_by_the_digest_the_release_computed(
    published: PublishedRelease, kind: str, flavour: str | None, crossplane: Path, tmp_path: Path
) -> None:
    artifact = published.artifact(kind, flavour)
    repository, tag = published.repository(kind, flavour)
    assert tag == published.source.tag
    assert tag in published.registry.tags(repository)
    by_tag = published.registry.manifest(repository, tag)
    assert by_tag.digest == artifact["digest"]
    by_digest = published.registry.manifest(repository, artifact["digest"])
    assert by_digest.body == by_tag.body
    package = release.read_xpkg(published.folder / artifact["file"])
    assert by_digest.body == package.pushed_manifest()
    manifest = by_digest.json
    assert manifest["config"]["digest"] == artifact["config_digest"]
    assert [layer["digest"] for layer in manifest["layers"]] == [layer.digest for layer in package.layers]
    config = json.loads(published.registry.blob(repository, artifact["config_digest"]))
    assert config == package.config
    # The CLI pulls it back by digest, through the CA, and reads the same package.yaml.
    out = tmp_path / "pulled.gz"
    reference = f"{published.registry.host}/{repository}@{artifact['digest']}"
    release.run_cli(crossplane, "xpkg", "extract", reference, "-o", str(out), env=published.registry.cli_env)
    assert gzip.decompress(out.read_bytes()) == package.stream


def test_a_push_without_the_registry_ca_is_refused(published: PublishedRelease, crossplane: Path, tmp_path: Path) -> None:
    stranger, _, _ = make_ca("not the registry's CA")
    (tmp_path / "other.crt").write_bytes(stranger.cert)
    artifact = published.artifact("Configuration", "v2")
    with pytest.raises(release.ReleaseError, match="x509: certificate signed by unknown authority"):
        release.run_cli(
            crossplane,
            "xpkg",
            "push",
            f"--package-files={published.folder / artifact['file']}",
            artifact["reference"].replace(published.source.tag, "v9.9.9"),
            env={"SSL_CERT_FILE": str(tmp_path / "other.crt")},
        )
    repository, _ = published.repository("Configuration", "v2")
    assert "v9.9.9" not in published.registry.tags(repository)


def test_push_refuses_another_registry_than_the_release_was_built_for(published: PublishedRelease, crossplane: Path) -> None:
    other = PackageSource(f"{published.registry.host}/elsewhere", published.source.version)
    with pytest.raises(release.ReleaseError, match="its packages name their registry"):
        release.push(published.folder, other, cli=crossplane)


def test_push_sends_the_function_first(published: PublishedRelease) -> None:
    kinds = [a["kind"] for a in release.pushed_packages(published.folder)]
    assert kinds == ["Function", "Configuration", "Configuration"]
    assert published.record["push"][0].endswith(published.artifact("Function")["reference"])


@pytest.mark.parametrize("flavour", ["v2", "v1"])
def test_the_provider_mirror_answers_for_every_provider_dependency(
    published: PublishedRelease, provider_mirror: dict[str, Any], flavour: str
) -> None:
    (match,) = provider_mirror["spec"]["matchImages"]
    prefix, rewrite = match["prefix"], provider_mirror["spec"]["rewriteImage"]["prefix"]
    assert (match["type"], prefix, rewrite) == ("Prefix", PROVIDER_REGISTRY, f"{published.registry.host}/{MIRROR_PATH}")
    (meta,) = [o for o in published.xpkg("Configuration", flavour).objects if o["kind"] == "Configuration"]
    providers = [
        (d.get("package") or d["provider"], d["version"])
        for d in meta["spec"]["dependsOn"]
        if d.get("kind") == "Provider" or "provider" in d
    ]
    assert [(p.rpartition("/")[2], v) for p, v in providers] == list(PROVIDERS)
    for package, version in providers:
        assert package.startswith(prefix)
        mirrored = rewrite + package.removeprefix(prefix)
        repository = mirrored.removeprefix(f"{published.registry.host}/")
        manifest = published.registry.manifest(repository, version).json
        annotated = [layer for layer in manifest["layers"] if layer.get("annotations")]
        assert [layer["annotations"] for layer in annotated] == [{"io.crossplane.xpkg": "base"}]
