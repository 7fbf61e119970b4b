"""Plain-dict access to the test API server through lightkube.

Objects go in and come out as dicts (``apiVersion``, ``kind``, ``metadata``...), so the
tests compare them with what the function and ``render`` produce without model classes.
Custom kinds are known from the CRDs the API server serves (re-read when one is missing).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from lightkube import ApiError, Client, KubeConfig, codecs
from lightkube.core.exceptions import LoadResourceError
from lightkube.core.resource import NamespacedResource
from lightkube.core.resource_registry import resource_registry
from lightkube.generic_resource import load_in_cluster_generic_resources
from lightkube.types import CascadeType, PatchType

T = TypeVar("T")
FIELD_MANAGER = "e2e"


def _namespaced(res: Any) -> bool:
    return issubclass(res, NamespacedResource)


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


class Kube:
    """A client of one API server, authenticated by a client certificate."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        config = KubeConfig.from_dict(
            {
                "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
                "users": [{"name": "admin", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
                "current-context": "e2e",
            }
        )
        self.config = config
        self._readyz = f"{server}/readyz"
        self._tls = ssl.create_default_context(cafile=str(ca))
        self._tls.load_cert_chain(str(cert), str(key))
        self.client = Client(config=config, field_manager=FIELD_MANAGER, trust_env=False)
        self.watch_client = self.new_watch_client()

    @property
    def tls(self) -> ssl.SSLContext:
        """This client's TLS (the CA and its client certificate), for the server's other endpoints."""
        return self._tls

    def new_watch_client(self) -> Client:
        """A client for watches: they wait on the server, so no read timeout of their own."""
        return Client(config=self.config, field_manager=FIELD_MANAGER, trust_env=False, timeout=httpx2.Timeout(10.0, read=None))

    # --- kinds -----------------------------------------------------------------------------

    def kind(self, api_version: str, kind: str) -> Any:
        """The lightkube resource class of a kind (custom kinds re-read from the server if new)."""
        try:
            return resource_registry.load(api_version, kind)
        except LoadResourceError:
            load_in_cluster_generic_resources(self.client)
            return resource_registry.load(api_version, kind)

    def ready(self) -> bool:
        """The API server's /readyz answers ok."""
        rsp = httpx2.get(self._readyz, verify=self._tls, timeout=5, trust_env=False)
        return rsp.status_code == 200

    # --- objects -----------------------------------------------------------------------------

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply as field manager ``e2e`` (conflicts forced)."""
        self.kind(obj["apiVersion"], obj["kind"])
        return _as_dict(self.client.apply(codecs.from_dict(obj), force=True))

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.kind(obj["apiVersion"], obj["kind"])
        return _as_dict(self.client.create(codecs.from_dict(obj)))

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None if it is not found."""
        res = self.kind(api_version, kind)
        try:
            return _as_dict(self.client.get(res, name, namespace=namespace))
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        res = self.kind(api_version, kind)
        if namespace is None and _namespaced(res):
            namespace = "*"
        return [_as_dict(o) for o in self.client.list(res, namespace=namespace, labels=labels)]

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        *,
        status: bool = False,
    ) -> dict[str, Any]:
        """A JSON merge patch of the object (of its status subresource with ``status``)."""
        res = self.kind(api_version, kind)
        return _as_dict(
            self.client.patch(res.Status if status else res, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
        )

    def patch_status(
        self, api_version: str, kind: str, name: str, patch: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """A JSON merge patch through the status subresource."""
        return self.patch(api_version, kind, name, patch, namespace, status=True)

    def apply_status(self, obj: dict[str, Any], field_manager: str) -> dict[str, Any]:
        """Server-side apply of ``obj``'s status as ``field_manager``: its fields only (conditions merge by type)."""
        res = self.kind(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        return _as_dict(
            self.client.patch(
                res.Status,
                meta["name"],
                obj,
                namespace=meta.get("namespace"),
                patch_type=PatchType.APPLY,
                field_manager=field_manager,
                force=True,
            )
        )

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        cascade: CascadeType | None = None,
    ) -> None:
        res = self.kind(api_version, kind)
        self.client.delete(res, name, namespace=namespace, cascade=cascade)

    def watch(
        self, api_version: str, kind: str, resource_version: str | None = None, client: Client | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events of every object of a kind, in every namespace (through ``client`` if given)."""
        res = self.kind(api_version, kind)
        for event, obj in (client or self.watch_client).watch(
            res,
            namespace="*" if _namespaced(res) else None, resource_version=resource_version, server_timeout=300
        ):
            yield event, _as_dict(obj)

    def follow(
        self,
        api_version: str,
        kind: str,
        on_event: Callable[[str, dict[str, Any]], None],
        stop: threading.Event,
        on_error: Callable[[Exception], None],
    ) -> None:
        """Call ``on_event`` for every change of an object of a kind until ``stop`` is set, as an
        informer sees them: a list (ADDED for each object), then a watch from the list's
        resourceVersion. A watch that breaks is reported to ``on_error`` and resumed from the
        last resourceVersion it delivered. Where the API server no longer has that version (410:
        it restarted, and its watch cache begins where it listed) the kind is listed again: an
        object known before and missing now gets a DELETED event at the list's resourceVersion
        (it went at or before it), one that changed meanwhile a MODIFIED event."""
        res = self.kind(api_version, kind)
        namespace = "*" if _namespaced(res) else None
        known: dict[str, dict[str, Any]] = {}
        resource_version: str | None = None
        # A client of its own, replaced after every error: lightkube does not close the
        # streamed response of a watch the server answers with an error (a 503 while its watch
        # cache starts), so each would keep a pooled connection until the pool is exhausted.
        client = self.new_watch_client()
        try:
            while not stop.is_set():
                try:
                    if resource_version is None:
                        resource_version = self._relist(client, res, namespace, known, on_event)
                    for event_type, obj in self.watch(api_version, kind, resource_version, client):
                        if stop.is_set():
                            return
                        resource_version = obj["metadata"].get("resourceVersion", resource_version)
                        uid = obj["metadata"]["uid"]
                        if event_type == "DELETED":
                            known.pop(uid, None)
                        else:
                            known[uid] = obj
                        on_event(event_type, obj)
                except Exception as err:
                    if stop.is_set():
                        return
                    on_error(err)
                    client.close()
                    client = self.new_watch_client()
                    if isinstance(err, ApiError) and err.status.code == 410:
                        resource_version = None
                    else:
                        time.sleep(0.1)
        finally:
            client.close()

    @staticmethod
    def _relist(
        client: Client,
        res: Any,
        namespace: str | None,
        known: dict[str, dict[str, Any]],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> str:
        """List the kind and tell ``on_event`` how it differs from ``known`` (updated); the list's resourceVersion."""
        listed = client.list(res, namespace=namespace)
        items = {o["metadata"]["uid"]: o for o in (_as_dict(i) for i in listed)}
        version = str(listed.resourceVersion)
        for uid in [u for u in known if u not in items]:
            gone = known.pop(uid)
            on_event("DELETED", {**gone, "metadata": {**gone["metadata"], "resourceVersion": version}})
        for uid, obj in items.items():
            before = known.get(uid)
            if before is None or before["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                on_event("ADDED" if before is None else "MODIFIED", obj)
            known[uid] = obj
        return version

    # --- CRDs --------------------------------------------------------------------------------

    def apply_crd(self, crd: dict[str, Any]) -> str:
        self.apply(crd)
        return str(crd["metadata"]["name"])

    def wait_established(self, names: list[str], timeout_s: float = 60) -> None:
        """Every named CRD reports Established; then their kinds are loaded."""

        def established() -> bool:
            for name in names:
                crd = self.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
                conditions = (crd or {}).get("status", {}).get("conditions", [])
                if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                    return False
            return True

        self.wait_for(established, f"CRDs {', '.join(names[:3])}... established", timeout_s)
        load_in_cluster_generic_resources(self.client)

    # --- waiting -----------------------------------------------------------------------------

    @staticmethod
    def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 60, interval_s: float = 0.2) -> T:
        """Poll ``probe`` until it returns something truthy; that thing. TimeoutError names ``what``."""
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                got = probe()
            except ApiError as err:
                last_error, got = err, None
            if got:
                return got
            time.sleep(interval_s)
        msg = f"timed out after {timeout_s:.0f}s waiting for {what}"
        if last_error is not None:
            msg += f" (last error: {last_error})"
        raise TimeoutError(msg)
