#!/usr/bin/env python3
"""Build the function's image without a Docker engine, as an OCI image layout archive.

What goes in is ``image.toml`` (the Dockerfile says the same; a test holds them
together). The steps, all from Debian's and PyPI's packages:

1. **Build root.** ``debootstrap`` of the Debian release with the build packages,
   cached outside the checkout (``scripts/debian_root.py``); the first build makes it,
   later ones only find it.
2. **Venv.** In that root (``chroot``), the Dockerfile's build stage: ``python3 -m venv``,
   ``pip wheel --no-deps`` of the checkout, ``pip install`` of the wheel with the pinned
   runtime dependencies (``-c constraints.txt``, wheels only, no .pyc), then the
   installers and any ``__pycache__`` removed. The venv is made in a work folder mounted
   at the venv's path, so the cached root never changes; pip's downloads are cached too.
3. **Runtime root.** The runtime packages and their ``Depends``/``Pre-Depends`` closure
   in the build root's dpkg database, without the Essential packages (shell, coreutils,
   dpkg, perl-base, ...) and the listed excludes, which only maintainer scripts need.
   Each package contributes the files of its dpkg file list (docs other than copyright
   files and man pages dropped) and its status stanza under ``/var/lib/dpkg/status.d/``
   (where image scanners read distroless images' packages); then passwd/group with the
   nonroot user and the venv. No shell, no package manager. Checked before it is
   packed: every ELF file's libraries resolve in it (its own ``ld.so --list``), and
   ``serve --help`` runs in it as the image's user.
4. **Layer and layout.** One layer, a tar with sorted entries, every mtime the commit's
   time (``SOURCE_DATE_EPOCH``), owners root but the nonroot home, gzip without name or
   time; the config (entrypoint, user, exposed port, labels), manifest and index; and
   Docker's ``manifest.json`` beside them (as ``docker save`` writes since Docker 25), so
   the one archive is an OCI layout for skopeo and umoci (``oci-archive:``) and a
   ``docker save`` archive for what reads those (skopeo's ``docker-archive:`` does; so
   does go-containerregistry's tarball reader, behind ``crossplane xpkg build
   --embed-runtime-image-tarball``).

Output, in the folder given::

    function-cluster-plugin-<version>.oci.tar   the image
    image.json                                  digests, sizes, packages, seconds

Usage (root; debootstrap from Debian)::

    python -m scripts.build_image OUT [--version X.Y.Z] [--registry HOST/ORG] [--keep-work]

The same commit gives the same digest while the cached root and PyPI's files are the
same: delete the root's cache folder to take a Debian point release.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scripts import debian_root

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFINITION = REPO_ROOT / "image.toml"
IMAGE_NAME = "function-cluster-plugin"
DEFAULT_REGISTRY = "localhost:5000/function-cluster-plugin"
NONROOT_HOME = "/home/nonroot"
# Files of a package the image does without: documentation (the copyright files stay,
# as the licences ask), manual pages, lintian overrides, bug-report hooks.
DROPPED = re.compile(
    r"^/usr/share/(doc/(?!.*/copyright$).*|doc-base/.*|man/.*|info/.*|lintian/.*|bug/.*)$"
)
# Empty mount points a container runtime (and the image test's chroot) mounts over.
MOUNT_POINTS = ("/dev", "/proc", "/sys", "/tmp")  # noqa: S108 - folders inside the image
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


# --- The definition ----------------------------------------------------------------


@dataclass(frozen=True)
class ImageDefinition:
    """``image.toml``: what goes into the image."""

    release: int
    build_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]
    runtime_exclude: tuple[str, ...]
    venv: str
    pip_install_options: tuple[str, ...]
    uninstall: tuple[str, ...]
    user: str
    exposed_port: int
    entrypoint: tuple[str, ...]
    workdir: str

    @classmethod
    def load(cls, path: Path = DEFINITION) -> ImageDefinition:
        """Read and check ``image.toml``."""
        data = tomllib.loads(path.read_text())
        debian, venv, config = data["debian"], data["venv"], data["config"]
        definition = cls(
            release=int(debian["release"]),
            build_packages=tuple(debian["build-packages"]),
            runtime_packages=tuple(debian["runtime-packages"]),
            runtime_exclude=tuple(debian.get("runtime-exclude", ())),
            venv=venv["path"].rstrip("/"),
            pip_install_options=tuple(venv["pip-install-options"]),
            uninstall=tuple(venv["uninstall"]),
            user=str(config["user"]),
            exposed_port=int(config["exposed-port"]),
            entrypoint=tuple(config["entrypoint"]),
            workdir=config["workdir"],
        )
        if not definition.entrypoint[0].startswith(definition.venv + "/"):
            entry = definition.entrypoint[0]
            msg = f"{path}: entrypoint {entry} is not in the venv {definition.venv}"
            raise ValueError(msg)
        uid = definition.user.split(":")[0]
        if not uid.isdigit() or int(uid) == 0:
            msg = f"{path}: user must be a numeric non-root uid[:gid], not {definition.user!r}"
            raise ValueError(msg)
        return definition

    @property
    def uid_gid(self) -> tuple[int, int]:
        """The user as numbers (gid defaults to uid)."""
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)


def project_metadata() -> dict[str, Any]:
    """``[project]`` of pyproject.toml and the version from function/__version__.py."""
    project = dict(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"])
    version_file = (REPO_ROOT / "function" / "__version__.py").read_text()
    match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", version_file)
    if match is None:
        sys.exit("FATAL: function/__version__.py has no __version__")
    project["version"] = match.group(1)
    return project


def static_labels(project: Mapping[str, Any]) -> dict[str, str]:
    """The labels that do not change between builds (the Dockerfile's LABELs)."""
    return {
        "org.opencontainers.image.title": str(project["name"]),
        "org.opencontainers.image.description": str(project["description"]),
        "org.opencontainers.image.licenses": str(project["license"]),
    }


# --- Debian packages: the runtime closure --------------------------------------------


def parse_status(text: str) -> dict[str, dict[str, str]]:
    """Installed packages of a dpkg status file: name -> fields (and the raw stanza)."""
    packages: dict[str, dict[str, str]] = {}
    for stanza in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
            else:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Status", "").endswith(" installed"):
            fields["_stanza"] = stanza.strip() + "\n"
            packages[fields["Package"]] = fields
    return packages


def _names(relation: str) -> Iterator[list[str]]:
    """``a (>= 1) | b:any, c`` -> [a, b], [c]: each group of alternatives, names only."""
    for group in relation.split(","):
        names = [re.split(r"[\s(:\[]", alt.strip(), maxsplit=1)[0] for alt in group.split("|")]
        if any(names):
            yield [n for n in names if n]


def _installed_alternative(
    group: list[str], installed: Mapping[str, Any], providers: Mapping[str, str]
) -> str | None:
    """The installed package that satisfies one of ``group`` (itself or a provider)."""
    for name in group:
        if name in installed:
            return name
        if name in providers:
            return providers[name]
    return None


def runtime_closure(
    installed: Mapping[str, Mapping[str, str]], roots: Iterable[str], exclude: Iterable[str]
) -> tuple[list[str], dict[str, str]]:
    """The packages ``roots`` need at run time, and why each left-out dependency is out.

    Follows Depends and Pre-Depends; an alternative or virtual package resolves to the
    installed package that is or provides it. Essential packages (the ones dpkg and
    maintainer scripts need) and ``exclude`` are left out unless they are roots.
    """
    providers: dict[str, str] = {}
    for name, fields in sorted(installed.items()):
        for provided in _names(fields.get("Provides", "")):
            providers.setdefault(provided[0], name)
    excluded = set(exclude)
    todo = list(roots)
    missing = [r for r in todo if r not in installed]
    if missing:
        sys.exit(f"FATAL: runtime packages {missing} are not installed in the build root")
    chosen: set[str] = set()
    left_out: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in chosen:
            continue
        chosen.add(name)
        fields = installed[name]
        relations = ", ".join(filter(None, (fields.get("Pre-Depends"), fields.get("Depends"))))
        for group in _names(relations):
            dep = _installed_alternative(group, installed, providers)
            if dep is None:
                sys.exit(f"FATAL: {name} depends on {' | '.join(group)}, none installed")
            if dep in excluded:
                left_out.setdefault(dep, f"excluded in image.toml (needed by {name})")
            elif installed[dep].get("Essential") == "yes":
                left_out.setdefault(dep, f"Essential (needed by {name})")
            else:
                todo.append(dep)
    return sorted(chosen), {k: v for k, v in sorted(left_out.items()) if k not in chosen}


def package_files(root: Path, package: str, arch: str) -> list[str]:
    """The paths of a package's dpkg file list, without the dropped documentation."""
    info = root / "var/lib/dpkg/info"
    for name in (f"{package}:{arch}.list", f"{package}.list"):
        if (info / name).exists():
            paths = (info / name).read_text().splitlines()
            return [p for p in paths if p not in ("/.", "") and not DROPPED.match(p)]
    sys.exit(f"FATAL: no dpkg file list for {package} in {info}")


def resolve_inside(root: Path, path: str) -> str:
    """``path`` with symlinked parent folders resolved within ``root`` (merged /usr)."""
    parts = [p for p in path.split("/") if p]
    resolved: list[str] = []
    for index, part in enumerate(parts):
        candidate = root.joinpath(*resolved, part)
        if index < len(parts) - 1 and candidate.is_symlink():
            target = os.readlink(candidate)
            base = [] if target.startswith("/") else resolved
            resolved = resolve_inside(root, "/".join([*base, target])).strip("/").split("/")
        elif part == "..":
            resolved = resolved[:-1]
        elif part != ".":
            resolved.append(part)
    return "/" + "/".join(resolved)


# --- Building -------------------------------------------------------------------------


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("git") is None:
        return subprocess.CompletedProcess(args, 1, "", "")
    return debian_root.run_host(
        ["git", "-C", str(REPO_ROOT), *args], capture_output=True, check=False
    )


def _source_date_epoch() -> int:
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = _git("log", "-1", "--format=%ct")
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else 0


def _revision() -> str:
    head = _git("rev-parse", "HEAD")
    if head.returncode != 0:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + ("-dirty" if dirty else "")


def build_venv(root: Path, definition: ImageDefinition, work: Path, epoch: int) -> Path:
    """The venv of the Dockerfile's build stage, made in ``root`` into ``work/venv``."""
    venv, dist = work / "venv", work / "dist"
    venv.mkdir()
    dist.mkdir()
    pip_cache = debian_root.cache_dir() / "pip"
    pip_cache.mkdir(parents=True, exist_ok=True)
    network_binds, network_env = debian_root.host_network()
    binds = [
        *network_binds,
        debian_root.Bind(venv, definition.venv),
        debian_root.Bind(dist, "/dist"),
        debian_root.Bind(REPO_ROOT, "/src", read_only=True),
        debian_root.Bind(pip_cache, "/root/.cache/pip"),
    ]
    env = {
        "PATH": debian_root.PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_PROGRESS_BAR": "off",
        # hatchling dates the wheel's entries with it: the same commit, the same wheel.
        "SOURCE_DATE_EPOCH": str(epoch),
        **network_env,
    }
    pip = f"{definition.venv}/bin/pip"

    def run(*argv: str) -> None:
        debian_root.run_in_root(root, argv, binds=binds, env=env)

    run("python3", "-m", "venv", definition.venv)
    run(pip, "wheel", "--no-deps", "--wheel-dir", "/dist", "/src")
    wheels = sorted(p.name for p in dist.glob("*.whl"))
    if len(wheels) != 1:
        sys.exit(f"FATAL: expected one wheel from pip wheel, got {wheels}")
    run(
        pip,
        "install",
        *definition.pip_install_options,
        "-c",
        "/src/constraints.txt",
        f"/dist/{wheels[0]}",
    )
    run(f"{definition.venv}/bin/python3", "-m", "pip", "uninstall", "--yes", *definition.uninstall)
    for cache in sorted(venv.rglob("__pycache__"), reverse=True):
        shutil.rmtree(cache)
    return venv


def _copy_entry(source: Path, dest: Path) -> None:
    """Hard-link a file (same filesystem: no copy), recreate a link or folder."""
    if dest.is_symlink() or dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_symlink():
        dest.symlink_to(os.readlink(source))
    elif source.is_dir():
        dest.mkdir()
        dest.chmod(source.stat().st_mode & 0o7777)
    else:
        os.link(source, dest)


def assemble_runtime_root(
    build_root: Path, definition: ImageDefinition, venv: Path, staging: Path
) -> dict[str, Any]:
    """Lay out the runtime root in ``staging``; returns what went in."""
    arch = debian_root.architecture()
    installed = parse_status((build_root / "var/lib/dpkg/status").read_text())
    packages, left_out = runtime_closure(
        installed, definition.runtime_packages, definition.runtime_exclude
    )
    staging.mkdir()
    missing: list[str] = []
    for package in packages:
        for listed in package_files(build_root, package, arch):
            inside = resolve_inside(build_root, listed)
            source = build_root / inside.lstrip("/")
            if not (source.exists() or source.is_symlink()):
                missing.append(f"{package}: {listed}")
                continue
            _copy_entry(source, staging / inside.lstrip("/"))
        status_d = staging / "var/lib/dpkg/status.d"
        status_d.mkdir(parents=True, exist_ok=True)
        (status_d / package).write_text(installed[package]["_stanza"])
    if missing:
        sys.exit(
            "FATAL: files of the dpkg lists are missing in the build root:\n  "
            + "\n  ".join(missing)
        )
    uid, gid = definition.uid_gid
    etc = staging / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/sbin/nologin\n"
        f"nonroot:x:{uid}:{gid}:nonroot:{NONROOT_HOME}:/sbin/nologin\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    )
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{gid}:\nnobody:x:65534:\n")
    for folder in (*MOUNT_POINTS, NONROOT_HOME, "/root"):
        (staging / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
    (staging / "tmp").chmod(0o1777)
    (staging / "root").chmod(0o700)
    (staging / NONROOT_HOME.lstrip("/")).chmod(0o700)
    target = staging / definition.venv.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    venv.rename(target)
    versions = {p: installed[p]["Version"] for p in packages}
    return {"packages": versions, "left_out": left_out}


# Run in the runtime root by its own python3: every ELF file's libraries must resolve
# (ld.so --list says "not found" otherwise), and no shell or package manager is there.
_ROOT_CHECK = r"""
import glob, os, subprocess, sys
loader = sorted(glob.glob("/usr/lib64/ld-linux-*.so.*") + glob.glob("/usr/lib/ld-linux-*.so.*"))[0]
problems = []
for top in ("/usr", "/venv"):
    for folder, _, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
            out = subprocess.run([loader, "--list", path], capture_output=True, text=True)
            said = out.stdout + out.stderr
            if "not found" in said or (out.returncode and "not a dynamic" not in said):
                problems.append(f"{path}: {said.strip()}")
for tool in ("sh", "bash", "dash", "busybox", "apt", "apt-get", "dpkg", "pip", "pip3"):
    for folder in ("/usr/bin", "/usr/sbin", "/usr/local/bin", sys.argv[1] + "/bin"):
        if os.path.lexists(os.path.join(folder, tool)):
            problems.append(f"{folder}/{tool} is in the image")
print("\n".join(problems))
sys.exit(1 if problems else 0)
"""


def check_runtime_root(staging: Path, definition: ImageDefinition) -> None:
    """Libraries resolve, no shell or installer, and the entrypoint runs as the user."""
    checks = {
        "the runtime root is incomplete or has tools it must not": [
            "/usr/bin/python3", "-c", _ROOT_CHECK, definition.venv,
        ],
        f"{' '.join(definition.entrypoint)} --help fails in the runtime root": [
            *definition.entrypoint, "--help",
        ],
    }  # fmt: skip
    env = {"PATH": debian_root.PATH, "HOME": NONROOT_HOME}
    for failure, argv in checks.items():
        done = debian_root.run_in_root(
            staging, argv, env=env, user=definition.user, check=False, capture_output=True
        )
        if done.returncode != 0:
            sys.exit(f"FATAL: {failure}:\n{done.stdout}{done.stderr}")


# --- OCI ----------------------------------------------------------------------------


def write_layer(staging: Path, layer_tar: Path, epoch: int, owner: tuple[int, int]) -> None:
    """The root as one tar: sorted, every mtime ``epoch``, root-owned but the nonroot home."""
    owned = NONROOT_HOME.lstrip("/")
    with tarfile.open(layer_tar, "w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(
            (
                Path(folder, name)
                for folder, dirs, files in os.walk(staging)
                for name in (*dirs, *files)
            ),
            key=lambda p: p.relative_to(staging).as_posix(),
        )
        for path in paths:
            name = path.relative_to(staging).as_posix()
            info = tar.gettarinfo(str(path), arcname=name)
            info.mtime = epoch
            info.uid, info.gid = owner if name == owned else (0, 0)
            info.uname = info.gname = ""
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _gzip(source: Path, dest: Path) -> None:
    # No file name and mtime 0 in the header: the same tar, the same bytes. Level 6, as
    # Docker and go-containerregistry use: level 9 took 3x as long for 0.5 % less.
    with (
        source.open("rb") as raw,
        dest.open("wb") as out,
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as packed,
    ):
        shutil.copyfileobj(raw, packed, 1 << 20)


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(
    out: Path, layer_gz: Path, config: dict[str, Any], *, tag: str, reference: str
) -> dict[str, Any]:
    """An OCI image layout with Docker's manifest.json, as one reproducible tar."""
    layer_digest = sha256_file(layer_gz)
    config_bytes = _json_bytes(config)
    config_digest = hashlib.sha256(config_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": OCI_CONFIG,
            "digest": f"sha256:{config_digest}",
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": OCI_LAYER,
                "digest": f"sha256:{layer_digest}",
                "size": layer_gz.stat().st_size,
            }
        ],
    }
    manifest_bytes = _json_bytes(manifest)
    manifest_digest = hashlib.sha256(manifest_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": OCI_MANIFEST,
                "digest": f"sha256:{manifest_digest}",
                "size": len(manifest_bytes),
                "platform": {"architecture": config["architecture"], "os": config["os"]},
                "annotations": {
                    "org.opencontainers.image.ref.name": tag,
                    "io.containerd.image.name": reference,
                },
            }
        ],
    }
    docker_manifest = [
        {
            "Config": f"blobs/sha256/{config_digest}",
            "RepoTags": [reference],
            "Layers": [f"blobs/sha256/{layer_digest}"],
        }
    ]
    small = {
        "oci-layout": _json_bytes({"imageLayoutVersion": "1.0.0"}),
        "index.json": _json_bytes(index),
        "manifest.json": _json_bytes(docker_manifest),
        f"blobs/sha256/{config_digest}": config_bytes,
        f"blobs/sha256/{manifest_digest}": manifest_bytes,
    }
    layer_name = f"blobs/sha256/{layer_digest}"
    names = sorted([*small, layer_name, "blobs", "blobs/sha256"])
    mtime = int(datetime.fromisoformat(config["created"]).timestamp())
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if name in ("blobs", "blobs/sha256"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif name == layer_name:
                info.size, info.mode = layer_gz.stat().st_size, 0o644
                with layer_gz.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                info.size, info.mode = len(small[name]), 0o644
                tar.addfile(info, io.BytesIO(small[name]))
    return {
        "manifest": f"sha256:{manifest_digest}",
        "config": f"sha256:{config_digest}",
        "layer": f"sha256:{layer_digest}",
        "diff_id": config["rootfs"]["diff_ids"][0],
    }


def image_config(
    definition: ImageDefinition, labels: dict[str, str], diff_id: str, epoch: int, arch: str
) -> dict[str, Any]:
    """The OCI image config: what a runtime starts and as whom."""
    created = datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            "User": definition.user,
            "ExposedPorts": {f"{definition.exposed_port}/tcp": {}},
            "Env": [f"PATH={debian_root.PATH}"],
            "Entrypoint": list(definition.entrypoint),
            "WorkingDir": definition.workdir,
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [
            {
                "created": created,
                "created_by": f"scripts/build_image.py: Debian {definition.release} "
                f"{' '.join(definition.runtime_packages)} and the venv {definition.venv}",
            }
        ],
    }


def build(
    out: Path, version: str | None, registry: str, *, keep_work: bool = False
) -> dict[str, Any]:
    """Build the image into ``out``; returns what image.json records."""
    started = time.monotonic()
    seconds: dict[str, float] = {}
    last = [started]

    def lap(step: str) -> None:
        now = time.monotonic()
        seconds[step] = round(now - last[0], 1)
        last[0] = now

    definition = ImageDefinition.load()
    project = project_metadata()
    version = version or project["version"]
    epoch = _source_date_epoch()
    arch = debian_root.architecture()
    codename = debian_root.codename(definition.release)
    build_root = debian_root.ensure_root(definition.release, definition.build_packages)
    lap("build root")
    work_parent = debian_root.cache_dir() / "image-work"
    work_parent.mkdir(parents=True, exist_ok=True)
    # Beside the cached roots: the runtime root hard-links their files instead of copying.
    work = Path(tempfile.mkdtemp(dir=work_parent))
    try:
        venv = build_venv(build_root, definition, work, epoch)
        lap("venv")
        staging = work / "rootfs"
        contents = assemble_runtime_root(build_root, definition, venv, staging)
        check_runtime_root(staging, definition)
        lap("runtime root")
        layer_tar, layer_gz = work / "layer.tar", work / "layer.tar.gz"
        write_layer(staging, layer_tar, epoch, definition.uid_gid)
        diff_id = f"sha256:{sha256_file(layer_tar)}"
        _gzip(layer_tar, layer_gz)
        labels = {
            **static_labels(project),
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.revision": _revision(),
            "org.opencontainers.image.created": datetime.fromtimestamp(epoch, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
            "org.opencontainers.image.base.name": f"debian:{codename}",
        }
        config = image_config(definition, labels, diff_id, epoch, arch)
        out.mkdir(parents=True, exist_ok=True)
        archive = out / f"{IMAGE_NAME}-{version}.oci.tar"
        reference = f"{registry}:v{version}"
        digests = write_archive(archive, layer_gz, config, tag=f"v{version}", reference=reference)
        lap("layer and archive")
        record = {
            "archive": archive.name,
            "version": version,
            "registry": registry,
            "reference": reference,
            "digests": digests,
            "sizes": {
                "layer_uncompressed": layer_tar.stat().st_size,
                "layer_compressed": layer_gz.stat().st_size,
                "archive": archive.stat().st_size,
            },
            "debian": {"release": definition.release, **contents},
            "source_date_epoch": epoch,
            "seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
        }
        (out / "image.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        return record
    finally:
        if keep_work:
            debian_root.say(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Command line: the output folder, version and registry."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write the archive and image.json into")
    parser.add_argument("--version", help="image version (default: function/__version__.py)")
    parser.add_argument(
        "--registry",
        default=DEFAULT_REGISTRY,
        help=f"repository the archive names the image in (default {DEFAULT_REGISTRY})",
    )
    parser.add_argument(
        "--keep-work", action="store_true", help="keep the work folder (rootfs, layer)"
    )
    args = parser.parse_args(argv)
    record = build(args.out, args.version, args.registry, keep_work=args.keep_work)
    sizes = record["sizes"]
    debian_root.say(
        f"{args.out / record['archive']}: {record['reference']} "
        f"manifest {record['digests']['manifest']}\n"
        f"layer {sizes['layer_uncompressed'] / 2**20:.1f} MiB, "
        f"gzip {sizes['layer_compressed'] / 2**20:.1f} MiB; "
        f"{len(record['debian']['packages'])} Debian packages; seconds {record['seconds']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
