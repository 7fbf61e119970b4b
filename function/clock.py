"""Times as Kubernetes writes them, and back: the one clock format of day two and the fleet."""

from __future__ import annotations

import datetime as dt


def rfc3339(seconds: float) -> str:
    """``seconds`` since the epoch as Kubernetes writes times."""
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds_of(text: str) -> float:
    """An RFC 3339 time as seconds since the epoch (0 if it is not one)."""
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0
