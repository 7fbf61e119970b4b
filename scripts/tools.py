#!/usr/bin/env python3
"""Build the upstream Go tools of the end-to-end tests from the Go module proxy.

Every tool (Crossplane's CLI and core, the 1.x CLI, etcd, the Kubernetes control plane,
provider-helm, kwok) is a ``go build`` of a published module, pinned in ``e2e/tools.json``:
for each tool its module, version, the package to build and the linker flags that stamp
its version; for each scratch module the tools are built in, its inputs (``require``,
``replace``) and what ``update`` resolved from them (the full ``go.mod`` requirement list
and the ``go.sum`` lines). A build writes that scratch ``go.mod``/``go.sum`` and runs
``go build -mod=readonly``, so Go checks every downloaded module against the recorded
hashes and refuses anything the lock does not name. Never a downloaded binary.

Executables are cached outside the checkout (a fresh clone finds them again)::

    ${XDG_CACHE_HOME:-~/.cache}/function-cluster-plugin/tools/<tool>-<version>/<tool>

with ``build.json`` beside each (seconds, Go version, what ``--version`` said) and a
stamp of the lock entry it was built from: editing the entry rebuilds it.

Usage::

    python scripts/tools.py build [TOOL...]   # build what is missing (all by default)
    python scripts/tools.py path TOOL         # absolute path, building it first if missing
    python scripts/tools.py source TOOL       # the tool's module directory (its CRDs etc.)
    python scripts/tools.py list              # tools, versions, cached or not
    python scripts/tools.py update [TOOL...]  # re-resolve scratch modules into the lock

``path`` prints nothing but the path on stdout and exits non-zero with the reason when
the tool cannot be built. To move a tool to another version, edit its ``version`` and its
scratch module's ``require`` (and ``staging`` for Kubernetes) in ``e2e/tools.json``, then
``python scripts/tools.py update TOOL``: it writes the scratch module, runs
``go mod tidy`` against the proxy (checked by the checksum database) and rewrites that
module's ``go``, ``requires``, ``replaces`` and ``go_sum`` in the lock. The proxy here
answers ``go list -m -versions`` with 403 for some modules; ask for one version instead
(``go list -m MODULE@VERSION``).

A ``replace`` input is ``PATH: VERSION`` (the same module at another version) or
``PATH: "NEW_PATH VERSION"`` (another module, e.g. provider-aws's Terraform fork). A fork
is not in the checksum database; ``update`` takes its hashes from the go.sum of the module
that replaces it, which the checksum database did verify.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK_PATH = REPO_ROOT / "e2e" / "tools.json"
SCRATCH_MODULE_PREFIX = "local.invalid/function-cluster-plugin/tools/"


def say(message: str) -> None:
    """Progress and errors go to stderr; stdout carries only what a command answers."""
    sys.stderr.write(f"tools: {message}\n")


class ToolError(RuntimeError):
    """A tool could not be resolved or built: the message says which step failed."""


def cache_root() -> Path:
    """Where built tools live: outside the checkout, shared by every clone."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "function-cluster-plugin" / "tools"


def load_lock() -> dict[str, Any]:
    """The lock, checked: every tool's version is what its scratch module requires."""
    lock = json.loads(LOCK_PATH.read_text())
    for name, tool in lock["tools"].items():
        module = lock["modules"].get(tool["scratch"])
        if module is None:
            raise ToolError(f"{name}: scratch module {tool['scratch']!r} is not in the lock")
        pinned = module["require"].get(tool["module"])
        if pinned != tool["version"]:
            raise ToolError(
                f"{name}: version {tool['version']} but scratch module {tool['scratch']} "
                f"requires {tool['module']} {pinned}; edit one and run update"
            )
    return lock


def write_lock(lock: dict[str, Any]) -> None:
    """Replace the lock file in one rename."""
    text = json.dumps(lock, indent=1) + "\n"
    tmp = LOCK_PATH.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(LOCK_PATH)


def go_env() -> dict[str, str]:
    """The environment of every go command: local toolchain, module mode, no cgo."""
    if shutil.which("go") is None:
        raise ToolError(
            "go is not on PATH: the end-to-end tools are built from the Go module proxy "
            "and need Go 1.26 (https://go.dev/doc/install)"
        )
    env = dict(os.environ)
    env.update(
        {
            "CGO_ENABLED": "0",
            # Never fetch another toolchain: a go directive newer than the local Go fails.
            "GOTOOLCHAIN": "local",
            "GOWORK": "off",
            "GOFLAGS": "-mod=readonly -buildvcs=false",
        }
    )
    return env


def run_go(args: list[str], cwd: Path, env: dict[str, str], *, nice: bool = False) -> str:
    """Go's stdout; a ToolError carrying the command and its stderr when it fails."""
    cmd = ["go", *args]
    if nice and shutil.which("nice"):
        cmd = ["nice", "-n", "10", *cmd]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise ToolError(
            f"`{' '.join(cmd)}` in {cwd} exited {proc.returncode}:\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout


def go_version(env: dict[str, str]) -> str:
    """The local Go, e.g. go1.26.8."""
    return run_go(["env", "GOVERSION"], Path.cwd(), env).strip()


def tools_of(lock: dict[str, Any], scratch: str) -> list[str]:
    """The tools built in one scratch module."""
    return sorted(n for n, t in lock["tools"].items() if t["scratch"] == scratch)


def replace_of(entry: str) -> tuple[str, str, str]:
    """A replace entry of the lock as (old path, new path, version).

    ``"PATH VERSION"`` pins PATH at another version of itself (Kubernetes' staging modules);
    ``"PATH NEW VERSION"`` swaps in another module (provider-aws's Terraform fork).
    """
    fields = entry.split(" ")
    if len(fields) == 2:
        return fields[0], fields[0], fields[1]
    if len(fields) == 3:
        return fields[0], fields[1], fields[2]
    raise ToolError(f"replace entry {entry!r}: expected 'PATH VERSION' or 'PATH NEW_PATH VERSION'")


def go_mod_text(lock: dict[str, Any], scratch: str, *, resolved: bool) -> str:
    """The scratch module's go.mod: the inputs only, or everything update resolved."""
    module = lock["modules"][scratch]
    lines = [f"module {SCRATCH_MODULE_PREFIX}{scratch}", ""]
    if resolved:
        lines += [f"go {module['go']}", "", "require ("]
        lines += [f"\t{req}" for req in module["requires"]]
        lines += [")", ""]
        replaces = module["replaces"]
    else:
        lines += ["go 1.26", "", "require ("]
        lines += [f"\t{path} {version}" for path, version in sorted(module["require"].items())]
        lines += [")", ""]
        replaces = [f"{path} {target}" for path, target in sorted(module["replace"].items())]
    if replaces:
        lines += ["replace ("]
        lines += [f"\t{old} => {new} {version}" for old, new, version in map(replace_of, replaces)]
        lines += [")", ""]
    lines += [f"tool {lock['tools'][name]['package']}" for name in tools_of(lock, scratch)]
    return "\n".join(lines) + "\n"


def ldflags(tool: dict[str, Any]) -> str:
    """Stripped, with the version variables the tool reports (``--version``, defaults)."""
    version = tool["version"]
    major, minor, *_ = version.lstrip("v").split(".")
    values = {"version": version, "major": major, "minor": minor}
    flags = ["-s", "-w"]
    flags += [
        f"-X {var}={value.format(**values)}" for var, value in tool.get("ldflags_x", {}).items()
    ]
    return " ".join(flags)


def tool_dir(name: str, tool: dict[str, Any]) -> Path:
    """The cache directory of one tool at its version."""
    return cache_root() / f"{name}-{tool['version']}"


def stamp_of(lock: dict[str, Any], name: str) -> str:
    """A hash of everything in the lock a tool's build depends on."""
    tool = lock["tools"][name]
    # A note documents the choice of version; editing it rebuilds nothing.
    build_inputs = {k: v for k, v in tool.items() if k != "note"}
    entry = {"tool": build_inputs, "module": lock["modules"][tool["scratch"]]}
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def cached_path(lock: dict[str, Any], name: str) -> Path | None:
    """The executable if it was built from the lock entry as it is now."""
    tool = lock["tools"][name]
    directory = tool_dir(name, tool)
    binary = directory / name
    stamp = directory / "lock.sha256"
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == stamp_of(lock, name):
        return binary
    return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """One build of a tool at a time, across the processes of every helper and test."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def version_output(binary: Path, tool: dict[str, Any]) -> str:
    """What a freshly built tool says its version is: proof it runs."""
    args = tool.get("version_args")
    if not args:
        return ""
    # clusterctl's version command asks GitHub for a newer release unless told not to: the
    # build reaches only the package registries.
    env = {**os.environ, "CLUSTERCTL_DISABLE_VERSIONCHECK": "true"}
    proc = subprocess.run(  # noqa: S603
        [str(binary), *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        raise ToolError(f"{binary} {' '.join(args)} exited {proc.returncode}: {out}")
    return out


@contextlib.contextmanager
def scratch_module(lock: dict[str, Any], scratch: str) -> Iterator[Path]:
    """A temporary directory holding the scratch module's go.mod and go.sum from the lock."""
    module = lock["modules"][scratch]
    if not module.get("go_sum"):
        raise ToolError(f"scratch module {scratch} was never resolved; run update")
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{scratch}-", dir=cache_root()) as work:
        work_dir = Path(work)
        (work_dir / "go.mod").write_text(go_mod_text(lock, scratch, resolved=True))
        (work_dir / "go.sum").write_text("\n".join(module["go_sum"]) + "\n")
        yield work_dir


def source(lock: dict[str, Any], name: str) -> Path:
    """The directory of a tool's module in the Go module cache (read-only), checked by go.sum.

    The tests read files the module ships beside the tool, e.g. Crossplane's own CRDs.
    """
    if name not in lock["tools"]:
        raise ToolError(f"unknown tool {name!r}; the lock has: {', '.join(sorted(lock['tools']))}")
    tool = lock["tools"][name]
    with scratch_module(lock, tool["scratch"]) as work_dir:
        out = run_go(["mod", "download", "-json", tool["module"]], work_dir, go_env())
    return Path(json.loads(out)["Dir"])


def build(lock: dict[str, Any], name: str) -> Path:
    """Build one tool into the cache unless it is there already; return its path."""
    if name not in lock["tools"]:
        raise ToolError(f"unknown tool {name!r}; the lock has: {', '.join(sorted(lock['tools']))}")
    found = cached_path(lock, name)
    if found:
        return found
    tool = lock["tools"][name]
    directory = tool_dir(name, tool)
    with locked(cache_root() / f".{name}-{tool['version']}.lock"):
        found = cached_path(lock, name)
        if found:  # another process built it while this one waited
            return found
        env = go_env()
        directory.mkdir(parents=True, exist_ok=True)
        say(f"building {name} {tool['version']} ({tool['package']})")
        started = time.monotonic()
        with scratch_module(lock, tool["scratch"]) as work_dir:
            output = work_dir / name
            run_go(
                [
                    "build",
                    "-trimpath",
                    "-ldflags",
                    ldflags(tool),
                    "-o",
                    str(output),
                    tool["package"],
                ],
                work_dir,
                env,
                nice=True,
            )
            said = version_output(output, tool)
            output.replace(directory / name)
        seconds = round(time.monotonic() - started, 1)
        record = {
            "tool": name,
            "module": tool["module"],
            "version": tool["version"],
            "package": tool["package"],
            "go": go_version(env),
            "build_seconds": seconds,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "version_output": said,
        }
        (directory / "build.json").write_text(json.dumps(record, indent=1) + "\n")
        (directory / "lock.sha256").write_text(stamp_of(lock, name) + "\n")
        say(f"built {name} in {seconds}s -> {directory / name}")
        return directory / name


def staging_replaces(
    kubernetes_version: str, staging_version: str, env: dict[str, str]
) -> dict[str, str]:
    """Replace directives pinning each staging module of k8s.io/kubernetes at its release.

    k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with
    ./staging paths; a consumer must pin each one at the published v0.<minor>.<patch>.
    """
    with tempfile.TemporaryDirectory() as work:
        info = json.loads(
            run_go(
                ["mod", "download", "-json", f"k8s.io/kubernetes@{kubernetes_version}"],
                Path(work),
                env,
            )
        )
        edit = json.loads(run_go(["mod", "edit", "-json", info["GoMod"]], Path(work), env))
    return {
        r["Old"]["Path"]: staging_version
        for r in edit.get("Replace") or []
        if r["New"]["Path"].startswith("./staging/")
    }


def forks_sums(module: dict[str, Any], env: dict[str, str]) -> list[str]:
    """The go.sum lines of each replacement by another module, from the requiring module's go.sum.

    A fork such as provider-aws's Terraform provider is not in the checksum database (its
    lookup answers 404), so ``go mod tidy`` cannot verify it there. The module that replaces
    it was verified by the checksum database and its go.sum names the fork's hashes: seeding
    the scratch go.sum with those lines makes Go check the fork against them.
    """
    entries = (replace_of(f"{path} {target}") for path, target in module["replace"].items())
    forks = sorted((new, version) for old, new, version in entries if old != new)
    if not forks:
        return []
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        for path, version in sorted(module["require"].items()):
            info = json.loads(
                run_go(["mod", "download", "-json", f"{path}@{version}"], Path(work), env)
            )
            sums = (Path(info["Dir"]) / "go.sum").read_text().splitlines()
            lines += [
                line
                for line in sums
                if (line.split(" ")[0], line.split(" ")[1].removesuffix("/go.mod")) in forks
            ]
    missing = [f"{new}@{v}" for new, v in forks if not any(f"{new} {v} " in f"{x} " for x in lines)]
    if missing:
        raise ToolError(
            f"no go.sum of {', '.join(sorted(module['require']))} names {', '.join(missing)}: "
            "a replacement by another module must be hashed by the module that replaces it"
        )
    return lines


def update(lock: dict[str, Any], names: list[str]) -> None:
    """Resolve each scratch module of NAMES with go mod tidy and record the result."""
    env = go_env()
    env["GOFLAGS"] = "-mod=mod -buildvcs=false"
    scratches = sorted({lock["tools"][n]["scratch"] for n in names})
    for scratch in scratches:
        module = lock["modules"][scratch]
        if module.get("staging"):
            module["replace"] = staging_replaces(
                module["require"]["k8s.io/kubernetes"], module["staging"], env
            )
        say(f"resolving scratch module {scratch}")
        with tempfile.TemporaryDirectory() as work:
            work_dir = Path(work)
            (work_dir / "go.mod").write_text(go_mod_text(lock, scratch, resolved=False))
            seeded = forks_sums(module, env)
            (work_dir / "go.sum").write_text("".join(f"{line}\n" for line in seeded))
            run_go(["mod", "tidy"], work_dir, env, nice=True)
            edit = json.loads(run_go(["mod", "edit", "-json"], work_dir, env))
            go_sum = (work_dir / "go.sum").read_text().splitlines()
        module["go"] = edit["Go"]
        module["requires"] = [f"{r['Path']} {r['Version']}" for r in edit["Require"]]
        module["replaces"] = [
            " ".join([*dict.fromkeys([r["Old"]["Path"], r["New"]["Path"]]), r["New"]["Version"]])
            for r in edit.get("Replace") or []
        ]
        module["go_sum"] = [line for line in go_sum if line.strip()]
        for name in tools_of(lock, scratch):
            pinned = next(
                (
                    r.split(" ")[1]
                    for r in module["requires"]
                    if r.split(" ")[0] == lock["tools"][name]["module"]
                ),
                None,
            )
            if pinned != lock["tools"][name]["version"]:
                raise ToolError(
                    f"{name}: go mod tidy resolved {lock['tools'][name]['module']} to {pinned}, "
                    f"not {lock['tools'][name]['version']}"
                )
        write_lock(lock)


def main(argv: list[str] | None = None) -> int:
    """The command line; exit status 1 with the reason on stderr when a tool cannot be had."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build missing tools").add_argument("tools", nargs="*")
    sub.add_parser("path", help="print a tool's executable path").add_argument("tool")
    sub.add_parser("source", help="print a tool's module directory").add_argument("tool")
    sub.add_parser("list", help="tools, versions and whether they are cached")
    sub.add_parser("update", help="re-resolve scratch modules").add_argument("tools", nargs="*")
    args = parser.parse_args(argv)
    try:
        lock = load_lock()
        if args.command == "path":
            sys.stdout.write(f"{build(lock, args.tool)}\n")
        elif args.command == "source":
            sys.stdout.write(f"{source(lock, args.tool)}\n")
        elif args.command == "build":
            started = time.monotonic()
            for name in args.tools or list(lock["tools"]):
                build(lock, name)
            say(f"done in {time.monotonic() - started:.1f}s")
        elif args.command == "list":
            for name, tool in lock["tools"].items():
                found = cached_path(lock, name)
                sys.stdout.write(f"{name:26} {tool['version']:10} {found or 'not built'}\n")
        else:
            unknown = [n for n in args.tools if n not in lock["tools"]]
            if unknown:
                raise ToolError(f"unknown tools: {', '.join(unknown)}")
            update(lock, args.tools or list(lock["tools"]))
    except ToolError as err:
        say(f"{err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
