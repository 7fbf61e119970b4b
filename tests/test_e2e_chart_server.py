"""The e2e chart repository on loopback (e2e/controlplane/workload.py ChartServer) serves every
vendored package, the older versions too: what provider-helm installs an upgrade from.

Real HTTP against the real server, read as helm reads a repository: index.yaml, then a
package by the URL its entry gives, checked against the entry's digest.
"""

from __future__ import annotations

import hashlib
import urllib.request
from pathlib import Path

import yaml

from e2e.controlplane.workload import ChartServer, chart_packages
from tests.kube_schema import vendored_charts


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - http://127.0.0.1 only
        return bytes(response.read())


def test_the_chart_server_serves_every_vendored_version(tmp_path: Path) -> None:
    server = ChartServer(tmp_path / "charts")
    server.start()
    try:
        index = yaml.safe_load(_get(f"{server.url}/index.yaml"))
        served = {(name, str(e["version"])): e for name, entries in index["entries"].items() for e in entries}
        assert set(served) == set(vendored_charts())
        assert len(chart_packages()) == len(served) == 17
        for chart, old, new in (("aws-vpc-cni", "1.21.1", "1.22.4"), ("aws-load-balancer-controller", "1.12.0", "3.5.0")):
            assert {(chart, old), (chart, new)} <= set(served)
            entry = served[(chart, old)]
            (url,) = entry["urls"]
            assert url.startswith(server.url)
            package = _get(url)
            assert hashlib.sha256(package).hexdigest() == entry["digest"]
            assert package == vendored_charts()[(chart, old)].read_bytes()
        assert "/aws-vpc-cni-1.21.1.tgz" in server.requests
    finally:
        server.stop()
