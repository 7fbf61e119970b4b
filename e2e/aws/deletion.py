"""How deletions went through provider-aws: in Usage order, in the control plane and in moto,
with nothing refused by Crossplane's usage webhook.

- ``DeletionWatch`` (the played providers of the AWS tests) also records, for every composed
  object, the etcd revision at which it first carried a ``deletionTimestamp`` ("deleting") and
  whether Crossplane's usage webhook ever marked it with a refused deletion attempt ("refused":
  the webhook patches ``usage.crossplane.io/deletion-attempt-with-policy`` onto the object
  whose deletion it refuses, internal/webhook/protection/usage/handler.go in Crossplane v2.4).
- ``deletion_key``/``deletion_key_of``: the Delete call moto records for a composed AWS
  resource, and the composed resource a recorded call deletes, named the same way
  (``role demo-efs``, ``object <bucket>/<key>``...).
- ``usage_order_problems``: for each Usage (by -> of) whose ``of`` was withdrawn: ``by`` was
  gone before ``of`` was marked for deletion, and (withdrawn by the function) so was the
  Usage (etcd revisions); where both ends are AWS resources, every Delete call of ``by``
  reached moto before the first of ``of``.
- ``refusals``: every trace of a refused deletion of the given objects: the webhook's debug
  log line, its annotation, and Warning events in the namespace that say "in-use".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from e2e.aws.provider import AWS_KINDS, Call
from e2e.controlplane.checks import usage_ends
from e2e.controlplane.driver import Event, Providers
from e2e.controlplane.harness import ControlPlane

DELETION_ATTEMPT = "usage.crossplane.io/deletion-attempt-with-policy"
# What Crossplane v2.4's usage webhook logs (at debug) when it refuses a deletion.
REFUSAL_LOG = "Usages found, deletion not allowed"
# S3 sub-resources a DELETE names by its query, and the label deletion keys give them.
S3_SUBRESOURCES = {"policy": "bucket-policy", "publicAccessBlock": "public-access-block", "ownershipControls": "ownership-controls"}
IAM_DELETES = {
    "DeleteRole": ("role", ("RoleName",)),
    "DetachRolePolicy": ("attachment", ("RoleName", "PolicyArn")),
    "DeletePolicy": ("policy", ("PolicyArn",)),
    "DeleteOpenIDConnectProvider": ("oidc", ("OpenIDConnectProviderArn",)),
}


class DeletionWatch(Providers):
    """The played providers, also recording the first "deleting" and "refused" event of each object."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._marked: set[tuple[str, str]] = set()

    def _on(self, event_type: str, obj: dict[str, Any], *, manage: bool) -> None:
        meta = obj["metadata"]
        if event_type != "DELETED":
            marks = {"deleting": bool(meta.get("deletionTimestamp")), "refused": DELETION_ATTEMPT in (meta.get("annotations") or {})}
            for what, now in marks.items():
                # One watch thread per kind: an object's events come in order, from one thread.
                if now and (what, meta["uid"]) not in self._marked:
                    self._marked.add((what, meta["uid"]))
                    self._record(what, obj)
        super()._on(event_type, obj, manage=manage)


def _name(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return str((meta.get("annotations") or {}).get("crossplane.io/external-name") or meta["name"])


def deletion_key_of(obj: dict[str, Any]) -> str:
    """The Delete call that withdraws the composed AWS resource ``obj`` (as ``deletion_key`` names calls)."""
    kind = obj["kind"]
    fp = obj["spec"]["forProvider"]
    at = obj.get("status", {}).get("atProvider", {})
    keys = {
        "Role": lambda: f"role {_name(obj)}",
        "RolePolicyAttachment": lambda: f"attachment {fp['role']} {fp['policyArn']}",
        "Policy": lambda: f"policy {at['arn']}",
        "OpenIDConnectProvider": lambda: f"oidc {at['arn']}",
        "Bucket": lambda: f"bucket {_name(obj)}",
        "Object": lambda: f"object {fp['bucket']}/{fp['key']}",
        "BucketPolicy": lambda: f"bucket-policy {fp['bucket']}",
        "BucketPublicAccessBlock": lambda: f"public-access-block {fp['bucket']}",
        "BucketOwnershipControls": lambda: f"ownership-controls {fp['bucket']}",
    }
    if kind not in keys:
        msg = f"{kind} {obj['metadata']['name']}: no Delete call known for its kind"
        raise KeyError(msg)
    return keys[kind]()


def deletion_key(call: Call) -> str | None:
    """What a recorded call deletes (``deletion_key_of``'s name), or None for any other call."""
    params = dict(call.params)
    if call.service == "iam" and call.action in IAM_DELETES:
        label, fields = IAM_DELETES[call.action]
        return " ".join([label, *(params.get(f, "?") for f in fields)])
    if call.service == "s3" and call.method == "DELETE":
        path = unquote(call.path.split("?", 1)[0]).strip("/")
        bucket, _, key = path.partition("/")
        sub = [label for q, label in S3_SUBRESOURCES.items() if q in params]
        if sub:
            return f"{sub[0]} {bucket}"
        return f"object {bucket}/{key}" if key else f"bucket {bucket}"
    return None


def deletions(calls: list[Call]) -> list[str]:
    """The Delete calls moto recorded, in order, by what they delete."""
    return [k for k in map(deletion_key, calls) if k is not None]


@dataclass
class Order:
    """How the Usages' ends were withdrawn; ``checked`` names the (usage, evidence) pairs looked at."""

    problems: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    # What the same evidence says against the Usages reversed (assert_withdrawn_in_usage_order).
    reversed_problems: list[str] = field(default_factory=list)


def _by_ref(composed: dict[str, dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {(o["kind"], o["metadata"]["name"]): n for n, o in composed.items()}


def usage_order_problems(
    usages: dict[str, dict[str, Any]],
    composed: dict[str, dict[str, Any]],
    events: list[Event],
    moto_deletions: list[str] | None,
    *,
    collected: bool = False,
) -> Order:
    """For each Usage whose ``of`` end was withdrawn (deleted from the control plane):

    - control plane, withdrawn by the function (a removed plugin, the cluster's own deletion):
      ``by`` was gone before ``of`` was marked for deletion (its first deletionTimestamp), and
      so was the Usage. Crossplane forgets a resource as soon as it deletes it and strips the
      composite label from a Usage it deletes, so the Usage no longer waits for its user
      (v2.4: DeletingComposedResourceGarbageCollector, the usage controller): the function
      keeps the Usage while the API server still has ``by`` (asked for by name), and ``of``
      while the API server still has a Usage of it;
    - control plane, ``collected`` (deleting the XR: the garbage collector deletes everything
      at once and the usage webhook holds back what is used): ``by`` was gone before ``of``
      was marked. The Usage itself may go a revision after: the usage controller takes the
      ``crossplane.io/in-use`` label off ``of`` (the webhook's objectSelector) before it
      drops the Usage's finalizer, so a retried deletion of ``of`` can land in between;
    - moto, when both ends are AWS resources: every Delete call of ``by`` came before the
      first Delete call of ``of``, and both were made: what AWS saw is the Usage order
      (``moto_deletions`` None: the AWS provider is played, there is no moto to ask).
    """
    deleted = {(e.kind, e.name): e.revision for e in events if e.what == "deleted"}
    deleting: dict[tuple[str, str], int] = {}
    for e in events:
        if e.what == "deleting":
            deleting.setdefault((e.kind, e.name), e.revision)
    names = _by_ref(composed)
    out = Order()
    for name, usage in sorted(usages.items()):
        by, of, itself = usage_ends(usage)
        if of not in deleted:
            continue
        of_marked = deleting.get(of, deleted[of])
        out.checked.append(f"{name}: control plane")
        broken = [] if by in deleted and deleted[by] < of_marked else [f"{by} gone at {deleted.get(by)}"]
        if not collected:
            broken += [] if itself in deleted and deleted[itself] < of_marked else [f"the Usage gone at {deleted.get(itself)}"]
        out.problems += [f"{name}: {of} marked for deletion at revision {of_marked}, {b}" for b in broken]
        if moto_deletions is not None and by[0] in AWS_KINDS and of[0] in AWS_KINDS:
            out.checked.append(f"{name}: moto")
            out.problems += _moto_problems(name, composed[names[by]], composed[names[of]], moto_deletions)
    return out


def _moto_problems(name: str, by: dict[str, Any], of: dict[str, Any], moto_deletions: list[str]) -> list[str]:
    """Unless every Delete call of ``by`` came before the first of ``of`` (both made): what moto got."""
    by_key, of_key = deletion_key_of(by), deletion_key_of(of)
    by_at = [i for i, k in enumerate(moto_deletions) if k == by_key]
    of_at = [i for i, k in enumerate(moto_deletions) if k == of_key]
    if by_at and of_at and max(by_at) < min(of_at):
        return []
    return [f"{name}: moto got {by_key!r} at calls {by_at}, {of_key!r} at {of_at}"]


def reversed_usages(usages: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The same Usages with their ends swapped: what a wrong expectation of the order looks like."""
    out = {}
    for name, usage in usages.items():
        spec = usage["spec"]
        out[name] = {**usage, "spec": {**spec, "by": spec["of"], "of": spec["by"]}}
    return out


def refused_objects(watch: Providers, namespace: str | None) -> set[tuple[str, str]]:
    """(kind, name) of every object whose deletion the usage webhook refused (its annotation)."""
    return {(e.kind, e.name) for e in watch.history(namespace) if e.what == "refused"}


def refusals(cp: ControlPlane, watch: Providers, composed: dict[str, dict[str, Any]], namespace: str | None) -> list[str]:
    """Every trace of a deletion of these objects that Crossplane's usage webhook refused."""
    names = {o["metadata"]["name"] for o in composed.values()}
    logged = [
        line
        for line in cp.log_lines("crossplane", REFUSAL_LOG)
        if any(f'"name": "{n}"' in line for n in names)
    ]
    marked = [f"{kind} {name} carried {DELETION_ATTEMPT}" for kind, name in sorted(refused_objects(watch, namespace)) if name in names]
    warned = []
    if namespace:
        for ev in cp.kube.list("v1", "Event", namespace):
            if ev.get("type") == "Warning" and "in-use" in (ev.get("message") or ""):
                warned.append(f"event {ev.get('reason')} on {ev['involvedObject'].get('name')}: {ev.get('message')}")
    return logged + marked + warned


def wait_recorded(watch: Providers, gone: dict[str, dict[str, Any]], namespace: str | None, timeout_s: float = 30) -> list[Event]:
    """The watch's history once it holds the DELETED event of every object in ``gone`` (the
    API server may answer 404 a moment before the watch delivers the deletion)."""
    wanted = {(o["kind"], o["metadata"]["name"]) for o in gone.values()}

    def recorded() -> list[Event] | None:
        events = watch.history(namespace)
        return events if wanted <= {(e.kind, e.name) for e in events if e.what == "deleted"} else None

    return watch.kube.wait_for(recorded, f"the watch's DELETED events of {len(wanted)} objects", timeout_s=timeout_s)


def named_deletions(moto_deletions: list[str], composed: dict[str, dict[str, Any]]) -> list[str]:
    """The Delete calls in order, each with the composition-resource-name it withdraws."""
    names = {deletion_key_of(o): n for n, o in composed.items() if o["kind"] in AWS_KINDS}
    return [f"{names.get(k, '(not composed)')}: {k}" for k in moto_deletions]


def assert_withdrawn_in_usage_order(
    watch: Providers,
    namespace: str | None,
    composed: dict[str, dict[str, Any]],
    gone: set[str],
    calls: list[Call],
    *,
    collected: bool = False,
) -> Order:
    """Everything in ``gone`` (composition-resource-names of ``composed``) was withdrawn in Usage
    order (``usage_order_problems``, over the Usages among ``gone``), each AWS resource through
    a Delete call moto recorded; and the same evidence refutes the reversed order, so the check
    is not vacuous."""
    withdrawn = {n: composed[n] for n in gone}
    events = wait_recorded(watch, withdrawn, namespace)
    moto_deletions = deletions(calls)
    aws = {n: o for n, o in withdrawn.items() if o["kind"] in AWS_KINDS}
    not_called = sorted(n for n, o in aws.items() if deletion_key_of(o) not in moto_deletions)
    assert not not_called, f"withdrawn without a Delete call in moto: {not_called}; moto got {moto_deletions}"
    not_ours = [k for k in moto_deletions if k not in {deletion_key_of(o) for o in aws.values()}]
    assert not not_ours, f"moto got Delete calls for what was not withdrawn: {not_ours}"
    usages = {n: o for n, o in withdrawn.items() if o["kind"] == "Usage"}
    order = usage_order_problems(usages, composed, events, moto_deletions, collected=collected)
    assert order.checked, f"no Usage's used end was withdrawn: {sorted(usages)}"
    assert any(c.endswith(": moto") for c in order.checked), order.checked
    assert not order.problems, "\n".join(order.problems)
    order.reversed_problems = usage_order_problems(reversed_usages(usages), composed, events, moto_deletions, collected=collected).problems
    assert order.reversed_problems, "the reversed Usage order fits the evidence too: the check cannot tell"
    return order


def order_report(order: Order, calls: list[Call], composed: dict[str, dict[str, Any]]) -> str:
    """What a test prints of a withdrawal: moto's Delete calls by name, and what the check saw."""
    named = "\n  ".join(named_deletions(deletions(calls), composed))
    return (
        f"moto's Delete calls, in order:\n  {named}\nUsage order checked: {order.checked}\n"
        f"the reversed order refuted {len(order.reversed_problems)} times, "
        f"e.g. {order.reversed_problems[:2]}"
    )
