#!/usr/bin/env python3
"""The system commands each make target needs besides Python, checked before any work.

``make e2e`` and ``make release`` call ``check TARGET`` first: when a command is missing it
prints one line naming every missing one and the Debian packages that bring them, and exits
1 before anything is built. ``.ci/run`` (root on Debian) calls ``install TARGET``, which
installs the missing packages with apt-get. The list lives here only.

Usage::

    python3 scripts/system_packages.py check e2e|release|image
    python3 scripts/system_packages.py install e2e|release|image
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

# Command -> the Debian package that provides it.
IMAGE = {"debootstrap": "debootstrap", "umoci": "umoci", "unshare": "util-linux", "git": "git"}
NEEDS: dict[str, dict[str, str]] = {
    # make e2e also builds and runs the image (e2e/test_image.py) and pushes a release to a
    # registry on loopback (e2e/test_release.py); Go builds the upstream tools; node and npm
    # install and run the IAM policy evaluator of the token e2e (e2e/aws/tokens.py).
    "e2e": {
        "go": "golang-go",
        **IMAGE,
        "docker-registry": "docker-registry",
        "node": "nodejs",
        "npm": "npm",
    },
    "release": {"go": "golang-go", **IMAGE},
    "image": dict(IMAGE),
}
# Debian's golang-go may be older than the go directive of e2e/tools.json; say so.
GO_NOTE = " (Go 1.26 or newer: Debian's golang-go may be older; https://go.dev/doc/install)"


def missing(target: str) -> dict[str, str]:
    """The commands ``target`` needs that are not on PATH, with their packages."""
    return {cmd: pkg for cmd, pkg in NEEDS[target].items() if shutil.which(cmd) is None}


def main(argv: list[str] | None = None) -> int:
    """Check or install what a target needs; one line and exit 1 when something is missing."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("check", "install"))
    parser.add_argument("target", choices=sorted(NEEDS))
    args = parser.parse_args(argv)
    absent = missing(args.target)
    if args.action == "install":
        packages = sorted({pkg for cmd, pkg in absent.items() if cmd != "go"})
        if packages:
            subprocess.run(["apt-get", "update", "-qq"], check=True)  # noqa: S607
            apt_install = ["apt-get", "install", "-y", "-qq", *packages]
            subprocess.run(apt_install, check=True)  # noqa: S603
        absent = missing(args.target)
    if not absent:
        return 0
    packages = " ".join(sorted(set(absent.values())))
    note = GO_NOTE if "go" in absent else ""
    sys.stderr.write(
        f"FATAL: make {args.target} needs {', '.join(sorted(absent))}, not found on PATH;"
        f" on Debian (as root): apt-get install {packages}{note}\n"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
