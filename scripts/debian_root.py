#!/usr/bin/env python3
"""Debian roots made by debootstrap, cached outside the checkout, and commands run in them.

The image is built in one (``scripts/build_image.py``), and the test suite runs on the
Python the image ships by running ``make test`` in one (``make test-debian``). A root is
``debootstrap --variant=minbase`` of a Debian release plus a list of packages, kept at::

    ${XDG_CACHE_HOME:-~/.cache}/function-cluster-plugin/debian-roots/<codename>-<key>/root

where ``<key>`` hashes the codename, architecture and sorted package list: another list
makes another root. A root is made beside its final place and renamed into it when
debootstrap has finished, under a lock, so an interrupted run leaves nothing that looks
complete. ``packages.txt`` beside ``root`` lists what was installed (name, version), and
``made.json`` when and in how many seconds. A root is never updated in place: delete its
folder to take a Debian point release.

Commands run by ``chroot`` inside a private mount namespace (``unshare --mount``): /proc,
/dev, the host's resolv.conf (pip needs DNS) and the bind mounts asked for exist only for
that command and vanish with it, even when it is killed, so nothing is left mounted on
the cache. All of this needs root, which CI and the developers' machines have.

Usage::

    python -m scripts.debian_root path [--release 13] [PACKAGE...]  # make (or find) a root
    python -m scripts.debian_root make-test [--release 13] [-- MAKE ARGS]

The release defaults to the image's (``image.toml``). ``make-test`` runs this checkout's
``make test`` (or the make arguments given) on that release's own ``python3``, with
nothing beside the checkout, as a user who clones it has (no ``../shared``); its venv is
cached per release and per ``pyproject.toml``/``constraints.txt`` content.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Codename and python3 minor of each Debian release this project builds on.
RELEASES = {12: ("bookworm", "3.11"), 13: ("trixie", "3.13")}
VENV_UNUSED_SECONDS = 24 * 3600
# Packages make-test needs besides python3: the venv module and make.
TEST_PACKAGES = ("python3", "python3-venv", "make")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# The Debian package of each host command these scripts run.
TOOL_PACKAGES = {"unshare": "util-linux", "chroot": "coreutils", "umoci": "umoci"}
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def say(message: str) -> None:
    """Progress and results for the person running the command, on stderr."""
    sys.stderr.write(message + "\n")


def host_tool(name: str) -> str:
    """The absolute path of a host command, or exit naming the Debian package to install."""
    path = shutil.which(name)
    if path is None:
        sys.exit(
            f"FATAL: {name} not found; on Debian: apt-get install {TOOL_PACKAGES.get(name, name)}"
        )
    return path


def run_host(argv: Sequence[str], **options: Any) -> subprocess.CompletedProcess[str]:
    """Run a host command (looked up on PATH) with text output; ``options`` go to run."""
    check = options.pop("check", True)
    command = [host_tool(argv[0]), *argv[1:]]
    return subprocess.run(command, text=True, check=check, **options)  # noqa: S603


def architecture() -> str:
    """The Debian architecture of this machine (amd64, arm64, ...)."""
    return run_host(["dpkg", "--print-architecture"], capture_output=True).stdout.strip()


def cache_dir() -> Path:
    """The project's cache folder outside any checkout (the XDG base directory rule)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "function-cluster-plugin"


def codename(release: int) -> str:
    """The codename of a Debian release number, or exit naming the known ones."""
    if release not in RELEASES:
        known = ", ".join(f"{n} ({c})" for n, (c, _) in sorted(RELEASES.items()))
        sys.exit(f"FATAL: Debian release {release} is unknown here; known: {known}")
    return RELEASES[release][0]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _require_root() -> None:
    if os.geteuid() != 0:
        sys.exit("FATAL: Debian roots need root (debootstrap, chroot, mount namespaces)")


@dataclass(frozen=True)
class Bind:
    """A host path bind-mounted at ``target`` inside the root for one command."""

    source: Path
    target: str
    read_only: bool = False


def chroot_command(
    root: Path,
    argv: Sequence[str],
    *,
    binds: Sequence[Bind] = (),
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    mount_system: bool = True,
) -> list[str]:
    """The host command that runs ``argv`` chrooted into ``root`` in a private mount namespace.

    ``env`` is the whole environment of the command (nothing leaks from the host's);
    ``user`` is ``uid:gid`` for ``chroot --userspec``. The root needs no shell: the
    host's ``env`` and ``chroot`` start ``argv`` directly, and every step ``exec``s the
    next, so the returned command's process ends up being ``argv``'s (a signal sent to
    it reaches ``argv``). With ``mount_system`` the host's /dev and a fresh /proc are
    mounted, as a container runtime would.
    """
    script = ["set -e"]
    root_q = shlex.quote(str(root))
    if mount_system:
        script += [
            f"mount -t proc proc {root_q}/proc",
            f"mount --rbind /dev {root_q}/dev",
        ]
        if (root / "etc/resolv.conf").is_file() and Path("/etc/resolv.conf").exists():
            script.append(f"mount --bind /etc/resolv.conf {root_q}/etc/resolv.conf")
    for bind in binds:
        target = shlex.quote(f"{root}/{bind.target.lstrip('/')}")
        if bind.source.is_dir():
            script.append(f"mkdir -p {target}")
        else:
            script.append(f"mkdir -p $(dirname {target}) && touch {target}")
        script.append(f"mount --bind {shlex.quote(str(bind.source))} {target}")
        if bind.read_only:
            script.append(f"mount -o remount,bind,ro {target}")
    environment = [f"{k}={v}" for k, v in sorted((env or {"PATH": PATH}).items())]
    chroot = ["chroot", *([f"--userspec={user}"] if user else []), str(root), *argv]
    script.append(shlex.join(["exec", "env", "-i", *environment, *chroot]))
    unshare = [host_tool("unshare"), "--mount", "--propagation", "private"]
    return [*unshare, "/bin/sh", "-c", "\n".join(script)]


def run_in_root(
    root: Path,
    argv: Sequence[str],
    *,
    check: bool = True,
    capture_output: bool = False,
    **options: Any,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``root`` (``chroot_command``'s options) and wait; output as text."""
    command = chroot_command(root, argv, **options)
    return run_host(command, check=check, capture_output=capture_output)


def host_network() -> tuple[list[Bind], dict[str, str]]:
    """What pip inside a root needs to reach the index the way the host does.

    The host's CA bundle (a proxy that re-signs TLS is trusted there, and a minbase root
    has no CA certificates at all) and its proxy and index settings.
    """
    env = {
        name: os.environ[name]
        for name in (
            "PIP_INDEX_URL",
            "PIP_EXTRA_INDEX_URL",
            "PIP_TRUSTED_HOST",
            "PIP_DEFAULT_TIMEOUT",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "NO_PROXY",
            "http_proxy",
            "https_proxy",
            "no_proxy",
        )
        if name in os.environ
    }
    binds = []
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        CA_BUNDLE,
    ):
        if candidate and Path(candidate).is_file():
            binds.append(Bind(Path(candidate), CA_BUNDLE, read_only=True))
            env["PIP_CERT"] = CA_BUNDLE
            break
    return binds, env


def _root_key(name: str, packages: Sequence[str]) -> str:
    spec = {
        "codename": name,
        "arch": architecture(),
        "variant": "minbase",
        "packages": sorted(set(packages)),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def ensure_root(release: int, packages: Sequence[str]) -> Path:
    """The cached root of ``release`` with ``packages``, made by debootstrap if missing."""
    name = codename(release)
    _require_root()
    folder = cache_dir() / "debian-roots" / f"{name}-{_root_key(name, packages)}"
    if (folder / "made.json").exists():
        return folder / "root"
    with locked(folder.with_name(folder.name + ".lock")):
        if (folder / "made.json").exists():
            return folder / "root"
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        say(f"debootstrap {name} with {' '.join(sorted(packages))} into {folder}")
        started = time.monotonic()
        # debootstrap mounts /proc and /sys in the target while it installs: in a private
        # mount namespace they cannot outlive it.
        debootstrap = [
            host_tool("debootstrap"),
            "--variant=minbase",
            f"--include={','.join(sorted(packages))}",
            name,
            str(partial / "root"),
            MIRROR,
        ]
        run_host(["unshare", "--mount", "--propagation", "private", *debootstrap])
        run_in_root(partial / "root", ["apt-get", "clean"], mount_system=False)
        listing = run_in_root(
            partial / "root",
            ["dpkg-query", "-W", "-f", "${Package}\t${Version}\n"],
            mount_system=False,
            capture_output=True,
        ).stdout
        (partial / "packages.txt").write_text("".join(sorted(listing.splitlines(keepends=True))))
        made = {
            "codename": name,
            "packages": sorted(packages),
            "mirror": MIRROR,
            "seconds": round(time.monotonic() - started, 1),
            "made": int(time.time()),
        }
        (partial / "made.json").write_text(json.dumps(made, indent=2) + "\n")
        partial.rename(folder)
    return folder / "root"


def make_test(release: int, make_args: Sequence[str]) -> int:
    """Run ``make test`` (or ``make_args``) of this checkout on the release's python3."""
    root = ensure_root(release, TEST_PACKAGES)
    # The venv follows the dependency files' content, so another checkout (or branch)
    # with other pins never reuses a venv made for different ones.
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "constraints.txt"):
        digest.update((REPO_ROOT / name).read_bytes())
    venv = cache_dir() / "test-venvs" / f"{codename(release)}-{digest.hexdigest()[:12]}"
    venv.mkdir(parents=True, exist_ok=True)
    os.utime(venv)  # in use: kept by the pruning below
    # A venv is half a gigabyte: one left by other pins goes once unused for a day (not at
    # once: another checkout may be running its tests on it).
    for other in venv.parent.glob(f"{codename(release)}-*"):
        if other != venv and time.time() - other.stat().st_mtime > VENV_UNUSED_SECONDS:
            shutil.rmtree(other, ignore_errors=True)
    pip_cache = cache_dir() / "pip"
    pip_cache.mkdir(parents=True, exist_ok=True)
    # Fixed paths inside the root: the editable install in the cached venv points at
    # /src/function-cluster-plugin whichever checkout is mounted there.
    checkout, venv_inside = "/src/function-cluster-plugin", "/src/venv"
    env = {
        "PATH": PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        # Caches of the tools go with the venv, not into the checkout the host's runs use.
        "MYPY_CACHE_DIR": f"{venv_inside}/.cache/mypy",
        "RUFF_CACHE_DIR": f"{venv_inside}/.cache/ruff",
        "PYTHONPYCACHEPREFIX": f"{venv_inside}/.cache/pycache",
        "PYTEST_ADDOPTS": " ".join(
            ["-p no:cacheprovider", os.environ.get("PYTEST_ADDOPTS", "")]
        ).strip(),
    }
    env.update({k: os.environ[k] for k in ("CI", "HYPOTHESIS_PROFILE") if k in os.environ})
    argv = [
        "make",
        "-C",
        checkout,
        f"VENV={venv_inside}",
        "PYTHON=python3",
        *(make_args or ["test"]),
    ]
    network_binds, network_env = host_network()
    env.update(network_env)
    binds = [
        *network_binds,
        Bind(REPO_ROOT, checkout),
        Bind(venv, venv_inside),
        Bind(pip_cache, "/root/.cache/pip"),
    ]
    version = run_in_root(root, ["python3", "--version"], capture_output=True)
    say(f"{codename(release)}: {version.stdout.strip()}; make {' '.join(argv[4:])}")
    return run_in_root(root, argv, binds=binds, env=env, check=False).returncode


def image_release() -> int:
    """The Debian release the image ships (image.toml), the default of ``--release``."""
    definition = tomllib.loads((REPO_ROOT / "image.toml").read_text())
    return int(definition["debian"]["release"])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``path`` or ``make-test``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    path = commands.add_parser("path", help="make (or find) a root and print its path")
    path.add_argument("--release", type=int, default=image_release())
    path.add_argument("packages", nargs="*", default=["python3"])
    test = commands.add_parser("make-test", help="run make test on the release's python3")
    test.add_argument(
        "--release", type=int, default=image_release(), help="default: the image's (image.toml)"
    )
    test.add_argument("make_args", nargs="*", help="make arguments (default: test)")
    args = parser.parse_args(argv)
    if args.command == "path":
        sys.stdout.write(f"{ensure_root(args.release, args.packages)}\n")
        return 0
    return make_test(args.release, args.make_args)


if __name__ == "__main__":
    sys.exit(main())
