"""The scale run's control planes: Crossplane as it runs by default, one function replica for both.

- ``FleetControlPlane``: the harness's control plane with Crossplane's own default circuit
  breaker (burst 100, not the e2e's 1,000) and the function serving its metrics.
- ``SharedFunctionControlPlane``: a second control plane (its own etcd, API server and
  Crossplane) whose Crossplane calls the first one's function: same endpoint, and the first
  one's client certificate and CA, so one replica serves both. The real subset lives here with
  provider-helm, which reconciles every Release of its API server: the played bulk's Releases
  must not be on it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.controlplane.harness import ControlPlane
from e2e.controlplane.processes import free_port

# Crossplane v2.4's own default (cmd/crossplane/core/core.go).
CROSSPLANE_CIRCUIT_BREAKER_BURST = 100.0


class FleetControlPlane(ControlPlane):
    """Crossplane's default circuit breaker (or ``circuit_breaker_burst``); the function's
    metrics on ``function_metrics``."""

    def __init__(
        self, root: Path, tool: Callable[[str], Path], *, circuit_breaker_burst: float = CROSSPLANE_CIRCUIT_BREAKER_BURST, **kwargs: Any
    ) -> None:
        self.circuit_breaker_burst = circuit_breaker_burst
        self.function_metrics_port = free_port()
        args = (*kwargs.pop("function_args", ()), f"--metrics-address=127.0.0.1:{self.function_metrics_port}")
        super().__init__(root, tool, function_args=args, **kwargs)

    @property
    def function_metrics(self) -> str:
        return f"http://127.0.0.1:{self.function_metrics_port}/metrics"


class SharedFunctionControlPlane(ControlPlane):
    """A control plane whose Crossplane calls ``function_of``'s function (no function of its own)."""

    def __init__(
        self,
        root: Path,
        tool: Callable[[str], Path],
        *,
        function_of: ControlPlane,
        circuit_breaker_burst: float = CROSSPLANE_CIRCUIT_BREAKER_BURST,
        **kwargs: Any,
    ) -> None:
        self.circuit_breaker_burst = circuit_breaker_burst
        super().__init__(root, tool, **kwargs)
        self.function_of = function_of

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        return [step for step in super().steps() if step[0] != "function"]

    def _certificates(self) -> None:
        super()._certificates()
        # The function trusts clients of its own CA; Crossplane trusts the function through it.
        self.function_cert = self.function_of.function_cert
        self.crossplane_client = self.function_of.crossplane_client
        self.function_address = self.function_of.function_address
