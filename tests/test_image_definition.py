"""One definition of the image: image.toml, which the Dockerfile must not contradict.

``scripts/build_image.py`` builds the image from ``image.toml`` without a Docker engine;
the Dockerfile is for those with one. ``definition_mismatches`` reads the Dockerfile with
the parser of ``test_dockerfile`` and returns one ``[key] message`` per property where it
says something else than ``image.toml``: the Debian release, the build packages, the
venv path, pip's install options and the uninstalled installers, the runtime base (Debian's
python3), user, exposed port, entrypoint, working directory and the static labels. The
tests show it finds nothing in the real files and the right key in broken copies.

The builder's own logic that needs no root is tested here too: the runtime package
closure from a dpkg status file, merged-/usr path resolution, the documentation filter,
and that the layer and the archive are byte-for-byte reproducible and well-formed.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import tarfile
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from scripts import build_image
from scripts.build_image import ImageDefinition
from tests.test_dockerfile import DOCKERFILE, PYPROJECT, Stage, parse_instructions, parse_stages

APT_INSTALL = re.compile(r"\bapt-get\s+install\s+(?P<args>[^&;|]+)")
VENV_CREATE = re.compile(r"\bpython3\s+-m\s+venv\s+(?P<path>\S+)")
PIP_INSTALL = re.compile(r"\bpip\s+install\s+(?P<args>[^&;|]+)")
PIP_UNINSTALL = re.compile(r"\bpip\s+uninstall\s+(?P<args>[^&;|]+)")


def _words(match: re.Match[str] | None) -> list[str]:
    return shlex.split(match.group("args")) if match else []


def _global_arg(text: str, name: str) -> str | None:
    for instruction in parse_instructions(text):
        if instruction.keyword == "FROM":
            return None
        if instruction.keyword == "ARG" and instruction.args.partition("=")[0].strip() == name:
            return instruction.args.partition("=")[2].strip().strip("\"'")
    return None


def _build_stage_mismatches(build: Stage, definition: ImageDefinition) -> list[str]:
    problems = []
    runs = " && ".join(r.args for r in build.of("RUN"))
    packages = {w for w in _words(APT_INSTALL.search(runs)) if not w.startswith("-")}
    if packages != set(definition.build_packages):
        problems.append(
            f"[build-packages] apt-get installs {sorted(packages)}, "
            f"image.toml says {sorted(definition.build_packages)}"
        )
    venv = VENV_CREATE.search(runs)
    if venv is None or venv.group("path").rstrip("/") != definition.venv:
        found = venv.group("path") if venv else None
        problems.append(f"[venv] python3 -m venv {found}, image.toml says {definition.venv}")
    install = _words(PIP_INSTALL.search(runs))
    wanted = [*definition.pip_install_options, "-c"]
    if missing := [o for o in wanted if o not in install]:
        problems.append(f"[pip-install] pip install lacks {missing}: {install}")
    elif not install[install.index("-c") + 1].endswith("/constraints.txt"):
        problems.append(f"[pip-install] pip install -c is not constraints.txt: {install}")
    uninstalled = {w for w in _words(PIP_UNINSTALL.search(runs)) if not w.startswith("-")}
    if uninstalled != set(definition.uninstall):
        problems.append(
            f"[uninstall] pip uninstalls {sorted(uninstalled)}, "
            f"image.toml says {sorted(definition.uninstall)}"
        )
    return problems


def _final_stage_mismatches(
    final: Stage, definition: ImageDefinition, labels: dict[str, str]
) -> list[str]:
    problems = []
    # Distroless python3 is Debian's python3 of that release; the builder takes it (and
    # what it depends on) from the same release's packages.
    runtime = f"distroless/python3-debian{definition.release}"
    if runtime not in final.image or "python3" not in definition.runtime_packages:
        problems.append(
            f"[runtime] final image {final.image} vs image.toml's Debian "
            f"{definition.release} {list(definition.runtime_packages)}"
        )
    copies = [c.args.split() for c in final.of("COPY")]
    if not any(words[-2:] == [definition.venv] * 2 for words in copies):
        problems.append(f"[venv] the final stage copies no {definition.venv} to itself: {copies}")
    users = [u.args for u in final.of("USER")]
    if users[-1:] != [definition.user]:
        problems.append(f"[user] USER {users}, image.toml says {definition.user}")
    ports = {p.split("/")[0] for e in final.of("EXPOSE") for p in e.args.split()}
    if ports != {str(definition.exposed_port)}:
        problems.append(f"[port] EXPOSE {sorted(ports)}, image.toml says {definition.exposed_port}")
    entrypoints = [json.loads(e.args) for e in final.of("ENTRYPOINT")]
    if entrypoints[-1:] != [list(definition.entrypoint)]:
        problems.append(f"[entrypoint] {entrypoints}, image.toml says {definition.entrypoint}")
    workdirs = [w.args for w in final.of("WORKDIR")]
    if workdirs[-1:] != [definition.workdir]:
        problems.append(f"[workdir] WORKDIR {workdirs}, image.toml says {definition.workdir}")
    found = dict(
        word.split("=", 1) for label in final.of("LABEL") for word in shlex.split(label.args)
    )
    if found != labels:
        problems.append(f"[labels] LABEL {found}, the builder sets {labels}")
    return problems


def definition_mismatches(
    dockerfile_text: str, definition: ImageDefinition, labels: dict[str, str]
) -> list[str]:
    """Where the Dockerfile contradicts image.toml, one ``[key] message`` each."""
    problems = []
    release = _global_arg(dockerfile_text, "DEBIAN_RELEASE")
    if release != str(definition.release):
        problems.append(
            f"[release] ARG DEBIAN_RELEASE={release}, image.toml says {definition.release}"
        )
    stages = parse_stages(dockerfile_text)
    problems += _build_stage_mismatches(stages[0], definition)
    problems += _final_stage_mismatches(stages[-1], definition, labels)
    return problems


def keys(problems: list[str]) -> set[str]:
    return {p.split("]", 1)[0] + "]" for p in problems}


@pytest.fixture(scope="module")
def real() -> tuple[str, ImageDefinition, dict[str, str]]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return DOCKERFILE.read_text(), ImageDefinition.load(), build_image.static_labels(project)


def test_the_dockerfile_says_what_image_toml_says(real):
    assert definition_mismatches(*real) == []


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        # The release is the distroless runtime's too.
        ("ARG DEBIAN_RELEASE=13", "ARG DEBIAN_RELEASE=12", "[release] [runtime]"),
        (
            "install --yes --no-install-recommends python3 python3-venv",
            "install --yes --no-install-recommends python3 python3-venv curl",
            "[build-packages]",
        ),
        ("RUN python3 -m venv /venv/fn", "RUN python3 -m venv /opt/venv", "[venv]"),
        ("COPY --from=build /venv/fn /venv/fn", "COPY --from=build /venv/fn /venv/other", "[venv]"),
        ("--no-compile --only-binary=:all:", "--no-compile", "[pip-install]"),
        ("-c /src/constraints.txt", "-c /src/other.txt", "[pip-install]"),
        ("uninstall --yes pip setuptools", "uninstall --yes pip", "[uninstall]"),
        (
            "python3-debian${DEBIAN_RELEASE}:nonroot",
            "static-debian${DEBIAN_RELEASE}:nonroot",
            "[runtime]",
        ),
        ("USER 65532:65532", "USER 65532", "[user]"),
        ("EXPOSE 9443", "EXPOSE 9443 8080", "[port]"),
        ('"serve"]', '"serve", "--debug"]', "[entrypoint]"),
        ("WORKDIR /", "WORKDIR /venv", "[workdir]"),
        ('licenses="Apache-2.0"', 'licenses="MIT"', "[labels]"),
    ],
)
def test_each_contradiction_is_found(real, old, new, key):
    text, definition, labels = real
    assert old in text, old
    found = keys(definition_mismatches(text.replace(old, new, 1), definition, labels))
    assert found == set(key.split())


def test_image_toml_changes_are_found_too(real, tmp_path):
    text, _, labels = real
    toml = (build_image.DEFINITION).read_text()
    broken = tmp_path / "image.toml"
    broken.write_text(toml.replace('"python3-venv"]', '"python3-venv", "make"]', 1))
    assert keys(definition_mismatches(text, ImageDefinition.load(broken), labels)) == {
        "[build-packages]"
    }
    broken.write_text(toml.replace('user = "65532:65532"', 'user = "0"', 1))
    with pytest.raises(ValueError, match="non-root"):
        ImageDefinition.load(broken)


# --- The builder's logic that needs no root ----------------------------------------------

STATUS = """\
Package: base-files
Status: install ok installed
Essential: yes
Pre-Depends: awk
Version: 13

Package: mawk
Status: install ok installed
Provides: awk
Version: 1

Package: python3
Status: install ok installed
Depends: python3.13 (>= 3.13.5-1~), libpython3-stdlib (= 3.13.5-1), dpkg (>= 1.13)
Version: 3.13.5-1

Package: python3.13
Status: install ok installed
Depends: media-types | mime-support, tzdata, libc6:any (>= 2.38)
Version: 3.13.5-2

Package: libpython3-stdlib
Status: install ok installed
Version: 3.13.5-1

Package: mime-support
Status: install ok installed
Version: 1

Package: tzdata
Status: install ok installed
Depends: debconf (>= 0.5) | debconf-2.0
Version: 2026f

Package: debconf
Status: install ok installed
Provides: debconf-2.0
Version: 1.5

Package: libc6
Status: install ok installed
Depends: libgcc-s1
Description: the C library
 with a continued line
Version: 2.41

Package: libgcc-s1
Status: install ok installed
Version: 14

Package: dpkg
Status: install ok installed
Essential: yes
Version: 1.22

Package: removed-one
Status: deinstall ok config-files
Version: 0
"""


def test_runtime_closure_follows_depends_but_not_what_maintainer_scripts_need():
    installed = build_image.parse_status(STATUS)
    assert "removed-one" not in installed
    assert installed["libc6"]["Description"] == "the C library\n with a continued line"
    packages, left_out = build_image.runtime_closure(
        installed, ["base-files", "python3"], ["debconf", "mawk"]
    )
    # mime-support: the installed alternative of media-types; libc6:any -> libc6.
    assert packages == [
        "base-files", "libc6", "libgcc-s1", "libpython3-stdlib", "mime-support",
        "python3", "python3.13", "tzdata",
    ]  # fmt: skip
    assert left_out == {
        "debconf": "excluded in image.toml (needed by tzdata)",
        "dpkg": "Essential (needed by python3)",
        "mawk": "excluded in image.toml (needed by base-files)",
    }
    # Without the excludes, the virtual awk resolves to its provider.
    packages, _ = build_image.runtime_closure(installed, ["base-files"], [])
    assert packages == ["base-files", "mawk"]


def test_runtime_closure_stops_at_a_dependency_nothing_satisfies():
    installed = build_image.parse_status(STATUS.replace("Package: libgcc-s1", "Package: other"))
    with pytest.raises(SystemExit, match="libc6 depends on libgcc-s1, none installed"):
        build_image.runtime_closure(installed, ["python3"], [])


def test_paths_resolve_through_merged_usr_and_docs_are_dropped(tmp_path):
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "usr/lib64").mkdir()
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "lib64").symlink_to("/usr/lib64")
    resolve = build_image.resolve_inside
    assert (
        resolve(tmp_path, "/lib/x86_64-linux-gnu/libc.so.6")
        == "/usr/lib/x86_64-linux-gnu/libc.so.6"
    )
    assert resolve(tmp_path, "/lib64/ld-linux-x86-64.so.2") == "/usr/lib64/ld-linux-x86-64.so.2"
    assert resolve(tmp_path, "/lib") == "/lib"  # the link itself is kept
    dropped = build_image.DROPPED
    assert dropped.match("/usr/share/doc/python3/changelog.gz")
    assert dropped.match("/usr/share/man/man1/python3.1.gz")
    assert not dropped.match("/usr/share/doc/python3/copyright")
    assert not dropped.match("/usr/share/zoneinfo/UTC")


def _staging(root: Path) -> None:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_bytes(b"\x7fELF not really")
    (root / "usr/bin/python3").chmod(0o755)
    (root / "bin").symlink_to("usr/bin")
    (root / "home/nonroot").mkdir(parents=True)
    (root / "tmp").mkdir()
    (root / "tmp").chmod(0o1777)


def test_layer_and_archive_are_reproducible_and_well_formed(tmp_path):
    definition = ImageDefinition.load()
    epoch = 1_700_000_000
    digests = []
    for attempt in ("a", "b"):
        work = tmp_path / attempt
        _staging(work / "rootfs")
        # Another build touches files at another time: the bytes must not change.
        stamp = time.time() - (1000 if attempt == "a" else 0)
        os.utime(work / "rootfs/usr/bin/python3", (stamp, stamp))
        build_image.write_layer(work / "rootfs", work / "layer.tar", epoch, definition.uid_gid)
        build_image._gzip(work / "layer.tar", work / "layer.tar.gz")
        diff_id = f"sha256:{hashlib.sha256((work / 'layer.tar').read_bytes()).hexdigest()}"
        config = build_image.image_config(definition, {"a": "b"}, diff_id, epoch, "amd64")
        record = build_image.write_archive(
            work / "image.tar", work / "layer.tar.gz", config, tag="v1", reference="r/x:v1"
        )
        digests.append((record, hashlib.sha256((work / "image.tar").read_bytes()).hexdigest()))
    assert digests[0] == digests[1]

    with tarfile.open(tmp_path / "a/layer.tar") as layer:
        members = {m.name: m for m in layer.getmembers()}
    assert list(members) == sorted(members)
    assert {m.mtime for m in members.values()} == {epoch}
    assert (members["home/nonroot"].uid, members["usr/bin/python3"].uid) == (65532, 0)
    assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
    assert members["tmp"].mode == 0o1777

    with tarfile.open(tmp_path / "a/image.tar") as archive:

        def blob(digest: str) -> bytes:
            handle = archive.extractfile(f"blobs/sha256/{digest.split(':')[1]}")
            assert handle is not None
            return handle.read()

        def read(name: str) -> Any:
            handle = archive.extractfile(name)
            assert handle is not None
            return json.loads(handle.read())

        assert read("oci-layout") == {"imageLayoutVersion": "1.0.0"}
        (entry,) = read("index.json")["manifests"]
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == "v1"
        manifest_bytes = blob(entry["digest"])
        assert hashlib.sha256(manifest_bytes).hexdigest() == entry["digest"].split(":")[1]
        manifest = json.loads(manifest_bytes)
        config = json.loads(blob(manifest["config"]["digest"]))
        layer_gz = blob(manifest["layers"][0]["digest"])
        assert len(layer_gz) == manifest["layers"][0]["size"]
        assert config["rootfs"]["diff_ids"] == [digests[0][0]["diff_id"]]
        assert config["config"]["Entrypoint"] == list(definition.entrypoint)
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["ExposedPorts"] == {"9443/tcp": {}}
        # docker load and go-containerregistry read manifest.json beside the layout.
        (docker,) = read("manifest.json")
        assert docker["Config"] == f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"
        assert docker["RepoTags"] == ["r/x:v1"]
        with tarfile.open(fileobj=io.BytesIO(layer_gz)) as unpacked:
            assert "usr/bin/python3" in unpacked.getnames()
