"""The built image runs: unpacked by umoci, started as its own user in a chroot, it serves.

``make image-test`` builds the image (``scripts/build_image.py``) into ``IMAGE_DIR`` and
runs this module; without ``IMAGE_DIR`` the module builds one into a temporary folder.
Needs root, ``umoci`` and debootstrap (Debian packages); no Docker engine.

What it shows, reading the image the way a container runtime would:

- umoci (Debian's OCI image tool, not our code) unpacks the archive; the runtime spec it
  writes (``config.json``, what runc would start) has image.toml's entrypoint, user,
  environment and working directory, and the image config exposes 9443;
- the unpacked root has no shell, no package manager, no installer, and only the
  nonroot home belongs to the nonroot user;
- the spec's process, started with its args, env and user in a chroot of that root (its
  own mount namespace, /proc and /dev mounted as a runtime does), plus ``--insecure`` and
  loopback addresses: it runs as uid 65532, gRPC health says SERVING on the function's
  port and on the probe listener, and every RunFunction call of an example's whole
  lifecycle (the project's InMemoryCrossplane, as ``render`` and ``simulate`` build requests) gets the
  same response from the image as from the checkout's ``fn.run``; on SIGTERM it drains
  and exits 0;
- a second build of the same commit is byte-for-byte the same archive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from function import fn
from function_tools import input_files
from function_tools.in_memory_crossplane import InMemoryCrossplane
from scripts import build_image, debian_root
from tests.test_serve import free_port, wait_port

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "selfhosted-full"
# Reconciles of the example's InMemoryCrossplane: enough for every stage to become ready (the XR's
# Ready condition is asserted, so a shorter lifecycle fails rather than passes quietly).
RECONCILES = 12


@dataclass(frozen=True)
class Unpacked:
    """The image as umoci unpacked it: its root, runtime spec and image config."""

    folder: Path
    rootfs: Path
    spec: dict[str, Any]
    config: dict[str, Any]
    record: dict[str, Any]


def _build(out: Path, *options: str) -> dict[str, Any]:
    build_image.main([str(out), *options])
    return dict(json.loads((out / "image.json").read_text()))


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Unpacked:
    given = os.environ.get("IMAGE_DIR")
    folder = Path(given) if given else tmp_path_factory.mktemp("image")
    if not (folder / "image.json").exists():
        _build(folder)
    record = json.loads((folder / "image.json").read_text())
    work = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(folder / record["archive"]) as archive:
        archive.extractall(work / "layout", filter="data")
    tag = record["reference"].rsplit(":", 1)[1]
    umoci = debian_root.host_tool("umoci")
    debian_root.run_host(
        [umoci, "unpack", "--image", f"{work / 'layout'}:{tag}", str(work / "bundle")]
    )
    spec = json.loads((work / "bundle" / "config.json").read_text())
    index = json.loads((work / "layout" / "index.json").read_text())
    blobs = work / "layout" / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"].split(":")[1]).read_text())
    return Unpacked(folder, work / "bundle" / "rootfs", spec, config, record)


def test_the_runtime_spec_is_image_toml(image: Unpacked) -> None:
    definition = build_image.ImageDefinition.load()
    process = image.spec["process"]
    assert process["args"] == list(definition.entrypoint)
    assert (process["user"]["uid"], process["user"]["gid"]) == definition.uid_gid
    assert process["cwd"] == definition.workdir
    assert any(e.startswith("PATH=") for e in process["env"])
    assert image.config["config"]["ExposedPorts"] == {f"{definition.exposed_port}/tcp": {}}
    labels = image.config["config"]["Labels"]
    assert labels["org.opencontainers.image.version"] == image.record["version"]


def test_no_shell_no_package_manager_and_root_owned(image: Unpacked) -> None:
    root = image.rootfs
    for tool in ("sh", "bash", "dash", "busybox", "apt", "apt-get", "dpkg", "perl", "awk"):
        for folder in ("usr/bin", "usr/sbin", "usr/local/bin"):
            assert not (root / folder / tool).exists(), f"/{folder}/{tool} is in the image"
    venv_bin = root / "venv" / "fn" / "bin"
    assert not list(venv_bin.glob("pip*")), "pip is in the image"
    assert (root / "usr/bin/python3").resolve().name.startswith("python3.")
    not_root = {
        "/" + str(p.relative_to(root))
        for p in root.rglob("*")
        if not p.is_symlink() and (p.stat().st_uid, p.stat().st_gid) != (0, 0)
    }
    assert not_root == {"/home/nonroot"}


@dataclass
class Running:
    """The image's entrypoint serving on loopback."""

    proc: subprocess.Popen[bytes]
    address: str
    health_address: str
    log: Path

    def health(self, address: str) -> int:
        with grpc.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)


@pytest.fixture(scope="module")
def running(image: Unpacked, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    process = image.spec["process"]
    port, health_port = free_port(), free_port()
    address, health_address = f"127.0.0.1:{port}", f"127.0.0.1:{health_port}"
    argv = [
        *process["args"], "--insecure", "--address", address, "--health-address", health_address,
    ]  # fmt: skip
    env = dict(e.split("=", 1) for e in process["env"])
    user = f"{process['user']['uid']}:{process['user']['gid']}"
    command = debian_root.chroot_command(image.rootfs, argv, env=env, user=user)
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        wait_port("127.0.0.1", port, proc, log, timeout=60)
        wait_port("127.0.0.1", health_port, proc, log, timeout=60)
        sys.stderr.write(f"image serving after {time.monotonic() - started:.2f} s\n")
        yield Running(proc, address, health_address, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_it_serves_as_the_nonroot_user_and_health_says_serving(running: Running) -> None:
    status = Path(f"/proc/{running.proc.pid}/status").read_text()
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert set(uids) == {"65532"}, status
    cmdline = Path(f"/proc/{running.proc.pid}/cmdline").read_bytes().split(b"\0")
    assert b"/venv/fn/bin/function-cluster-plugin" in cmdline, cmdline
    serving = health_pb2.HealthCheckResponse.SERVING
    assert running.health(running.address) == serving
    assert running.health(running.health_address) == serving


def test_run_function_answers_as_the_checkout_does(running: Running) -> None:
    xr = input_files.load_one(EXAMPLE / "xr.yaml", "composite resource")
    required = input_files.load_documents([EXAMPLE / "required"])
    calls: list[tuple[fnv1.RunFunctionRequest, fnv1.RunFunctionResponse, fnv1.RunFunctionResponse]]
    calls = []
    with grpc.insecure_channel(running.address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)

        def both(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
            from_image = stub.RunFunction(req, timeout=30)
            calls.append(
                (
                    fnv1.RunFunctionRequest.FromString(req.SerializeToString()),
                    from_image,
                    fn.run(req),
                )
            )
            return from_image

        world = InMemoryCrossplane(xr, required, capabilities=True, runner=both)
        reconciles = world.run(RECONCILES)
    # Not vacuous: the lifecycle went somewhere, through the image's answers.
    assert world.xr_ready, [(r.step, r.fatal, r.created) for r in reconciles]
    assert all(r.fatal is None for r in reconciles)
    assert sum(len(r.created) for r in reconciles) >= 10
    assert len(calls) > RECONCILES  # required-resources iterations included
    for number, (req, from_image, from_checkout) in enumerate(calls):
        if from_image != from_checkout:
            pytest.fail(
                f"call {number} (tag {req.meta.tag}) differs:\nimage: "
                f"{json_format.MessageToJson(from_image)[:3000]}\ncheckout: "
                f"{json_format.MessageToJson(from_checkout)[:3000]}"
            )


def test_sigterm_drains_and_exits_zero(running: Running) -> None:
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(timeout=60) == 0, running.log.read_text()[-3000:]


def test_the_same_commit_builds_the_same_archive(image: Unpacked, tmp_path: Path) -> None:
    record = image.record
    again = _build(
        tmp_path / "again", "--version", record["version"], "--registry", record["registry"]
    )
    assert again["digests"] == image.record["digests"]
    first = (image.folder / image.record["archive"]).read_bytes()
    assert (tmp_path / "again" / again["archive"]).read_bytes() == first
