"""provider-aws's lost creates, adopted as its users are told to (upjet#632, upjet#722).

provider-aws v2.5.0 creates an IAM OIDC provider or policy asynchronously; its identity (the
ARN) is known only from the create's answer. Upjet can lose track of it: its callback's status
write loses a resourceVersion race with another writer of the managed resource (Crossplane's
apply; seen in these logs as "Async create callback failed ... the object has been
modified"), and an in-flight create can run against state another reconcile refilled. The
object then exists in AWS with no external-name on its managed resource, and every later
create answers ``EntityAlreadyExists``: the resource never turns Synced. CI met it once (the
namespaced suite's OIDC provider, 900 s stuck; provider-aws's log shows the 409 on the first
create it logged, so what made the object is not in the logs kept). Upjet's maintainers'
answer is to set ``crossplane.io/external-name`` to the object's identity.

:class:`LostCreates` does that, and only where it is provably the same resource: the managed
resource's Synced condition says ``EntityAlreadyExists``, and the IAM object carries the tags
provider-aws gives everything it creates naming this very managed resource
(``crossplane-kind``, ``crossplane-name``). Anything else stays stuck, to fail its test, and
what IAM holds under that kind is printed once (``refused``), so that the next such failure
says who made the object. Each adoption is printed and kept (``adopted``): a lost create is
provider-aws's fault, not the function's, and is reported as such.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from e2e.controlplane.kube import Kube
from function.flavour import KINDS

ALREADY_EXISTS = "EntityAlreadyExists"
EXTERNAL_NAME = "crossplane.io/external-name"
# The kinds provider-aws names by an identity AWS gives at creation (IdentifierFromProvider)
# whose names AWS keeps unique: a lost create of one blocks every later create.
KINDS_AT_RISK = ("OpenIDConnectProvider", "Policy")


@dataclass(frozen=True)
class Adoption:
    api_version: str
    kind: str
    namespace: str
    name: str
    arn: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name} -> {self.arn}"


def crossplane_kind(api_version: str, kind: str) -> str:
    """The ``crossplane-kind`` tag provider-aws writes: ``<kind, lower case>.<group>``."""
    return f"{kind.lower()}.{api_version.split('/', maxsplit=1)[0]}"


def tagged_iam_objects(iam: Any, kind: str) -> dict[str, dict[str, str]]:
    """ARN -> tags of every IAM object of ``kind`` (OpenIDConnectProvider or Policy)."""
    out: dict[str, dict[str, str]] = {}
    if kind == "OpenIDConnectProvider":
        for ref in iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]:
            tags = iam.list_open_id_connect_provider_tags(OpenIDConnectProviderArn=ref["Arn"])["Tags"]
            out[ref["Arn"]] = {t["Key"]: t["Value"] for t in tags}
    else:
        for page in iam.get_paginator("list_policies").paginate(Scope="Local"):
            for pol in page["Policies"]:
                tags = iam.list_policy_tags(PolicyArn=pol["Arn"])["Tags"]
                out[pol["Arn"]] = {t["Key"]: t["Value"] for t in tags}
    return out


def stuck_on_a_lost_create(obj: dict[str, Any]) -> bool:
    """No external-name, and its create answered that the object already exists."""
    if obj["metadata"].get("annotations", {}).get(EXTERNAL_NAME):
        return False
    synced: dict[str, Any] = next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == "Synced"), {})
    return synced.get("status") == "False" and ALREADY_EXISTS in synced.get("message", "")


@dataclass
class LostCreates:
    """Polls the managed resources of ``KINDS_AT_RISK`` (both flavours) every ``interval_s``;
    asks AWS (``iam``: a boto3 IAM client at moto) only about one stuck on a lost create, so
    that moto's request recordings hold nothing of it otherwise."""

    kube: Kube
    iam: Any
    interval_s: float = 5.0
    say: Callable[[str], None] = print
    adopted: list[Adoption] = field(default_factory=list)
    # "<kind> <namespace/name>" -> what IAM held when it was found stuck and not adopted.
    refused: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LostCreates:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Adoption]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        return list(self.adopted)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.mend()
            except Exception as err:  # a poll that fails is retried; kept for the report
                self.errors.append(f"{time.strftime('%H:%M:%S')} {type(err).__name__}: {err}")

    def mend(self) -> list[Adoption]:
        """One pass: adopt every managed resource stuck on its own lost create; the adoptions."""
        done = []
        for kind in KINDS_AT_RISK:
            for api_version in KINDS[kind]:
                stuck = [o for o in self.kube.list(api_version, kind) if stuck_on_a_lost_create(o)]
                if not stuck:
                    continue
                held = tagged_iam_objects(self.iam, kind)
                for obj in stuck:
                    adoption = self._adopt(api_version, kind, obj, held)
                    if adoption is not None:
                        done.append(adoption)
        return done

    def _adopt(self, api_version: str, kind: str, obj: dict[str, Any], held: dict[str, dict[str, str]]) -> Adoption | None:
        meta = obj["metadata"]
        own = crossplane_kind(api_version, kind)
        arns = [a for a, tags in held.items() if tags.get("crossplane-kind") == own and tags.get("crossplane-name") == meta["name"]]
        if len(arns) != 1:
            key = f"{kind} {meta.get('namespace', '')}/{meta['name']}"
            if key not in self.refused:
                self.refused[key] = f"{len(arns)} tagged for it; IAM holds {held}"
                self.say(f"\n{key} stuck on {ALREADY_EXISTS}, not adopted: {self.refused[key]}")
            return None
        self.kube.patch(api_version, kind, meta["name"], {"metadata": {"annotations": {EXTERNAL_NAME: arns[0]}}}, meta.get("namespace"))
        adoption = Adoption(api_version, kind, meta.get("namespace", ""), meta["name"], arns[0])
        self.adopted.append(adoption)
        self.say(f"\nprovider-aws lost its own create (upjet#632): adopted {adoption}")
        return adoption
