"""The CAPA cluster template (``templates/cluster-template-clusterplugin.yaml``) as the tests use it.

- ``variables``: the ``${NAME}`` / ``${NAME:=default}`` variables the template holds;
- ``substitute``: what clusterctl's variable processor (drone/envsubst) makes of it for
  those two forms (the only ones the template uses; anything else is refused);
- ``settled``: the template's Cluster API objects with the status Cluster API and CAPA
  give them once the control plane is available (CAPA's security groups from
  ``tests/capa.py``, its model of what CAPA makes of ``spec.network``), and the
  ``<cluster>-sa`` Secret CAPI generates: what the function reads of a running cluster.

The unit test (``tests/test_capa_template.py``) and the end-to-end test
(``e2e/controlplane/test_capa_template.py``, clusterctl and a real API server) share it.
"""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from function_tools.in_memory_crossplane import set_control_plane
from tests import capa

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "templates" / "cluster-template-clusterplugin.yaml"
# CRDs of the template's kinds that tests/fixtures/crds (a copy of ../shared) lacks.
TEMPLATE_CRDS = ROOT / "tests" / "fixtures" / "template-crds"
DOC = ROOT / "docs" / "capa-template.md"

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")
SINCE = "2026-01-01T00:00:00Z"
# Security group ids CAPA would have made, by role.
GROUPS = {
    capa.CONTROL_PLANE: "sg-0000000000000c001",
    capa.NODE: "sg-0000000000000c002",
    capa.APISERVER_LB: "sg-0000000000000c003",
}
CLUSTER_API_KINDS = ("Cluster", "KubeadmControlPlane", "AWSCluster")


def text() -> str:
    return TEMPLATE.read_text(encoding="utf-8")


def variables(source: str) -> dict[str, str | None]:
    """Variable -> its default (None: required), in order of first use."""
    out: dict[str, str | None] = {}
    for match in _VARIABLE.finditer(source):
        out.setdefault(match.group(1), match.group(2))
    return out


def substitute(source: str, values: dict[str, str]) -> str:
    """The template with every variable replaced (its default where ``values`` has none)."""

    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in values:
            return values[name]
        if default is None:
            msg = f"required variable {name} has no value"
            raise KeyError(msg)
        return default

    out = _VARIABLE.sub(one, source)
    left = [line for line in out.splitlines() if "$" in line]
    assert not left, f"variables in a form this substitution does not know: {left}"
    return out


def objects(source: str, namespace: str) -> list[dict[str, Any]]:
    """The documents, each in ``namespace`` as clusterctl's --target-namespace puts them."""
    docs = [d for d in yaml.safe_load_all(source) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    return docs


def by_kind(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in objs:
        out.setdefault(obj["kind"], []).append(obj)
    return out


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = by_kind(objs)[kind]
    return found


def api_server_args(kcp: dict[str, Any]) -> dict[str, str]:
    """The KubeadmControlPlane's kube-apiserver extraArgs (v1beta2 list), by name."""
    args = kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["extraArgs"]
    return {a["name"]: a["value"] for a in args}


def _condition(typ: str, reason: str) -> dict[str, Any]:
    return {
        "type": typ,
        "status": "True",
        "reason": reason,
        "message": "",
        "lastTransitionTime": SINCE,
    }


def status_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The status Cluster API or CAPA writes on ``obj`` once the control plane is available."""
    kind = obj["kind"]
    if kind == "Cluster":
        return {
            "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
            "conditions": [
                _condition("Available", "Available"),
                _condition("InfrastructureReady", "Ready"),
                _condition("ControlPlaneInitialized", "Initialized"),
                _condition("ControlPlaneAvailable", "Available"),
            ],
        }
    if kind == "KubeadmControlPlane":
        shaped = {"apiVersion": obj["apiVersion"], "kind": kind, "status": {}}
        set_control_plane(shaped, initialized=True, available=True)
        return {**shaped["status"], "version": obj["spec"]["version"]}
    if kind == "AWSCluster":
        rules = capa.published_rules(obj, GROUPS)
        name = obj["metadata"]["name"]
        groups = {
            role: {"id": GROUPS[role], "name": f"{name}-{role}", "ingressRule": rules.get(role, [])}
            for role in GROUPS
        }
        return {"ready": True, "networkStatus": {"securityGroups": groups}}
    return None


def settled(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Cluster, KubeadmControlPlane and AWSCluster of ``objs`` with their status."""
    out = []
    for obj in objs:
        if obj["kind"] in CLUSTER_API_KINDS:
            with_status = copy.deepcopy(obj)
            with_status["status"] = status_of(obj)
            out.append(with_status)
    return out


def sa_secret(namespace: str, cluster: str) -> dict[str, Any]:
    """``<cluster>-sa`` as Cluster API generates it: the service-account key pair."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{cluster}-sa",
            "namespace": namespace,
            "labels": {"cluster.x-k8s.io/cluster-name": cluster},
        },
        "type": "cluster.x-k8s.io/secret",
        "data": {
            "tls.crt": base64.b64encode(public).decode(),
            "tls.key": base64.b64encode(private).decode(),
        },
    }
