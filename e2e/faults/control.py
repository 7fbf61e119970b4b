"""Process faults on the real control plane: a part crashed (SIGKILL) or stopped, then started
again with the same command, ports, certificates and data, and waited for until it serves.

Each part is found by its name in ``ControlPlane.processes`` (the harness's, provider-helm's,
provider-aws's) and probed the way its own start waits for it: the function's port, Crossplane's
``/readyz``, etcd's ``/health``, the API server's ``/readyz``, provider-aws's ``/readyz``, and
provider-helm's log line for its Release controller (it serves no probe out of cluster). Every
port and path is read back from the process's own command line, so a restart answers where the
clients (Crossplane's FunctionRevision endpoint, the kubeconfigs, the usage webhook's URL)
already point. Processes are stopped by their own pid, never by name.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from e2e.controlplane.harness import ControlPlane
from e2e.controlplane.processes import Process, wait_until

# provider-helm's Release controller starts once its CRD is seen (crossplane-runtime's CRD gate).
PROVIDER_HELM_READY = '"gvk": "helm.m.crossplane.io/v1beta1, Kind=Release"'
START_TIMEOUT_S = 180


def flag(argv: list[str], name: str) -> str:
    """The value of ``--name=value`` or ``--name value`` in ``argv``."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    msg = f"--{name} not in {argv}"
    raise KeyError(msg)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as rsp:  # noqa: S310 - loopback
        return rsp.status == 200


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=0.5):
        return True


def _etcd_healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/health", timeout=2) as rsp:  # noqa: S310 - loopback
        return bool(json.load(rsp).get("health") == "true")


@dataclass
class Outage:
    """One part down: when it went, when it was started again, and when it served again.

    The fault table counts a part down until it was started again (the fault as the test
    made it) and its recovery from then (its own start-up included: the repair is the start)."""

    part: str
    down_at: float
    started_at: float | None = None
    serving_at: float | None = None

    @property
    def seconds(self) -> float:
        """How long the part was down (until it was started again)."""
        return (self.started_at or time.monotonic()) - self.down_at

    def since_repair(self) -> float:
        """Seconds from the start of the part again until now."""
        return time.monotonic() - (self.started_at or time.monotonic())


class Parts:
    """Crash, stop and start the processes of one control plane."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp

    def process(self, name: str) -> Process:
        return self.cp.processes[name]

    def log_offset(self, name: str) -> int:
        """Where the part's log ends now (``log_since`` reads what comes after)."""
        path = self.process(name).log_path
        return path.stat().st_size if path.exists() else 0

    def log_since(self, name: str, offset: int) -> list[str]:
        """The part's log lines written since ``offset``."""
        return self.process(name).log_path.read_bytes()[offset:].decode(errors="replace").splitlines()

    def probe(self, name: str, log_offset: int = 0) -> Callable[[], bool]:
        """What says that the part ``name`` serves again."""
        argv = self.process(name).argv
        if name == "function":
            return lambda: _listening(flag(argv, "address"))
        if name == "crossplane":
            return lambda: _http_ok(f"http://127.0.0.1:{flag(argv, 'health-probe-port')}/readyz")
        if name == "etcd":
            return lambda: _etcd_healthy(flag(argv, "listen-client-urls"))
        if name == "kube-apiserver":
            return self.cp.kube.ready
        if name == "provider-aws":
            return lambda: _http_ok(f"http://{flag(argv, 'health-probe-bind-addr')}/readyz")
        if name == "provider-helm":
            log = self.process(name).log_path
            return lambda: PROVIDER_HELM_READY in log.read_bytes()[log_offset:].decode(errors="replace")
        msg = f"no readiness probe for {name}"
        raise KeyError(msg)

    def crash(self, *names: str) -> Outage:
        """SIGKILL each part, in the order given (no drain, nothing flushed)."""
        outage = Outage("+".join(names), time.monotonic())
        for name in names:
            self.process(name).kill()
        return outage

    def stop(self, *names: str) -> Outage:
        """SIGTERM each part and wait for it to exit (SIGKILL after 30 s)."""
        outage = Outage("+".join(names), time.monotonic())
        for name in names:
            self.process(name).stop(grace_s=30)
        return outage

    def start(self, outage: Outage, *names: str) -> Outage:
        """Start each part again, in the order given (etcd before the API server), each waited
        for until it serves; ``outage`` completed with when."""
        outage.started_at = time.monotonic()
        for name in names or tuple(outage.part.split("+"))[::-1]:
            process = self.process(name)
            offset = self.log_offset(name)
            process.restart()
            wait_until(process, self.probe(name, offset), f"{name} serving again", timeout_s=START_TIMEOUT_S)
        outage.serving_at = time.monotonic()
        return outage
