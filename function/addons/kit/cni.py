"""The cluster's CNI, whichever add-on installs it (the VPC CNI or Calico).

Both install it as the same node, so that the other add-ons, whose pods need the
pod network, wait for it and are deleted before it without knowing which it is.
"""

from __future__ import annotations

from function.context import CallContext
from function.graph import Usage, Wait, after, control_plane_available

RELEASE = "cni-release"

_RELEASE_READY = after(RELEASE)


def ready(ctx: CallContext) -> Wait | None:
    """Gate: the CNI this XR installs is ready; without one, the control plane is available.

    With no networking plugin in the spec the user brings their own CNI; the
    best signal we have that pods can run is an available control plane.
    """
    n = ctx.spec.networking
    if n.amazon_vpc is None and n.calico is None:
        return control_plane_available(ctx)
    return _RELEASE_READY(ctx)


def needed_by(node: str, reason: str) -> Usage:
    """Deletion order: ``node`` (its pods) goes before the CNI."""
    return Usage(node, RELEASE, reason)
