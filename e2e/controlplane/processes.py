"""Child processes of the control plane: started with their output in a log file, stopped always.

Every process is started in its own process group and stopped by its pid (SIGTERM, then
SIGKILL after a grace period), never by name. Logs stay in the run's directory so a failing
test can print them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StartError(RuntimeError):
    """A process did not come up: the message carries the end of its log."""


@dataclass
class Process:
    """One running child and where its output goes."""

    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes]
    started_at: float = field(default_factory=time.monotonic)
    # What ``start`` added to the environment: a restart runs with the same.
    env: dict[str, str] | None = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def _signal(self, sig: signal.Signals) -> bool:
        """Send ``sig`` to the process group; False if the process is already gone."""
        if self.proc.poll() is not None:
            return False
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace_s``."""
        if not self._signal(signal.SIGTERM):
            return
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to the process group at once: no drain, no cleanup (the fault suite's crash)."""
        if self._signal(signal.SIGKILL):
            self.proc.wait(timeout=10)

    def restart(self) -> None:
        """Run the same command again (argv, environment, log file) in place of the stopped
        process: whoever holds this ``Process`` (a fixture that stops it at the end) holds
        the new one."""
        if self.alive():
            msg = f"{self.name} is still running (pid {self.proc.pid})"
            raise RuntimeError(msg)
        fresh = start(self.name, self.argv, self.log_path.parent, env=self.env)
        self.proc, self.started_at = fresh.proc, fresh.started_at


def start(
    name: str,
    argv: Sequence[str],
    log_dir: Path,
    *,
    env: dict[str, str] | None = None,
) -> Process:
    """Start ``argv`` with stdout and stderr in ``log_dir/<name>.log``."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Process(name, list(argv), log_path, proc, env=env)


def wait_until(
    process: Process, ready: Callable[[], bool], what: str, timeout_s: float = 60.0
) -> float:
    """Poll ``ready`` until it holds; seconds it took. Fails with the log if the process dies."""
    start_at = time.monotonic()
    deadline = start_at + timeout_s
    while True:
        if not process.alive():
            msg = f"{process.name} exited with {process.proc.returncode} before {what}:\n{process.log_tail()}"
            raise StartError(msg)
        try:
            if ready():
                return time.monotonic() - start_at
        except Exception:  # noqa: S110 - not up yet: any error means try again
            pass
        if time.monotonic() > deadline:
            msg = f"{process.name}: no {what} after {timeout_s:.0f}s:\n{process.log_tail()}"
            raise StartError(msg)
        time.sleep(0.1)
