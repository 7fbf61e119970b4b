"""The workload cluster, read for ``aws preflight --workload-kubeconfig``: ServiceAccounts only.

lightkube (in the ``aws`` extra) reads the kubeconfig (client certificates, tokens, exec
plugins such as ``aws eks get-token``) and talks to the API server. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import ApiError, Client, ConfigError, KubeConfig
from lightkube.resources.core_v1 import ServiceAccount

from function_tools.aws.preflight import WorkloadUnreadError

TIMEOUT_S = 10.0


class KubeconfigError(ValueError):
    """The kubeconfig file cannot be used: one line naming the file and why."""


class WorkloadCluster:
    """A client of the workload cluster from a kubeconfig file (its current context)."""

    def __init__(self, path: Path) -> None:
        """Reads the file; KubeconfigError when it is not a usable kubeconfig."""
        self.path = path
        _judge(path)
        try:
            config = KubeConfig.from_file(path).get()
            self.server = config.cluster.server if config else ""
            self.client = Client(config, timeout=httpx2.Timeout(TIMEOUT_S), trust_env=False)
        except OSError as err:
            msg = f"--workload-kubeconfig {path}: {err.strerror}: {err.filename}"
            raise KubeconfigError(msg) from err
        except (ConfigError, ValueError, TypeError, KeyError, AttributeError) as err:
            msg = f"--workload-kubeconfig {path}: not a usable kubeconfig ({err})"
            raise KubeconfigError(msg) from err

    def annotations(
        self, keys: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[str, str] | None]:
        """(namespace, name) -> the ServiceAccount's annotations, None when it does not exist."""
        out: dict[tuple[str, str], dict[str, str] | None] = {}
        for namespace, name in keys:
            try:
                sa = self.client.get(ServiceAccount, name, namespace=namespace)
            except ApiError as err:
                if err.status.code == 404:  # HTTP Not Found
                    out[(namespace, name)] = None
                    continue
                msg = f"{self.server}: get serviceaccount {namespace}/{name}: {err}"
                raise WorkloadUnreadError(msg) from err
            except (httpx2.HTTPError, OSError, ConfigError) as err:
                msg = f"{self.server}: {err}"
                raise WorkloadUnreadError(msg) from err
            meta = sa.metadata
            out[(namespace, name)] = dict((meta.annotations if meta else None) or {})
        return out


def _named(doc: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    """The entry ``name`` of a kubeconfig's ``clusters``, ``users`` or ``contexts``."""
    for entry in doc.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    return None


def _judge(path: Path) -> None:
    """The kubeconfig's shape, in one line naming the file and what is wrong."""
    where = f"--workload-kubeconfig {path}"
    try:
        doc = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        msg = f"{where}: not YAML{at}"
        raise KubeconfigError(msg) from err
    if not isinstance(doc, dict) or doc.get("kind", "Config") != "Config" or "clusters" not in doc:
        msg = f"{where}: not a kubeconfig (kind: Config with clusters, users and contexts)"
        raise KubeconfigError(msg)
    current = doc.get("current-context")
    if not current:
        msg = f"{where}: no current-context (the context to read the workload cluster with)"
        raise KubeconfigError(msg)
    context = _named(doc, "contexts", str(current))
    if context is None:
        msg = f"{where}: current-context {current} is not in contexts"
        raise KubeconfigError(msg)
    cluster = (context.get("context") or {}).get("cluster")
    entry = _named(doc, "clusters", str(cluster))
    if entry is None:
        msg = f"{where}: context {current} names cluster {cluster}, which is not in clusters"
        raise KubeconfigError(msg)
    user = _named(doc, "users", str((context.get("context") or {}).get("user"))) or {}
    files = {
        "certificate-authority": (entry.get("cluster") or {}).get("certificate-authority"),
        "client-certificate": (user.get("user") or {}).get("client-certificate"),
        "client-key": (user.get("user") or {}).get("client-key"),
    }
    for field, name in files.items():
        if name and not (path.parent / str(name)).is_file():
            msg = f"{where}: its {field} {name} is not a file"
            raise KubeconfigError(msg)
