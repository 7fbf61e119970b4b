"""Whether a ClusterPluginRollout is acceptable: one FATAL naming the field, as for a ClusterPlugin.

The rollout's own answer refuses a bad rollout with it; every ClusterPlugin parses the
rollouts it reads with it too (cached) and ignores one that is refused.
"""

from __future__ import annotations

import functools

from google.protobuf import struct_pb2
from pydantic import ValidationError

from function import registry
from function.addons.kit.helm import owned_problems
from function.graph import Addon
from function.rollout.spec import RolloutSpec
from function.spec import invalid_input
from function.spec_base import CROSSPLANE_SPEC_FIELDS, InvalidInputError
from function.structs import to_python

# status.plugins[] name -> the add-on a target may name (one a ClusterPlugin's spec asks for).
TARGETABLE: dict[str, Addon] = {a.name: a for a in registry.REQUESTABLE if a.release is not None}


def parse(spec: struct_pb2.Struct) -> RolloutSpec:
    """The rollout's spec, judged; InvalidInputError naming each bad field."""
    return _parse(spec.SerializeToString(deterministic=True))


@functools.lru_cache(maxsize=256)
def _parse(serialized: bytes) -> RolloutSpec:
    s = struct_pb2.Struct()
    s.ParseFromString(serialized)
    raw = {k: to_python(v) for k, v in s.fields.items() if k not in CROSSPLANE_SPEC_FIELDS}
    try:
        spec = RolloutSpec.model_validate(raw)
    except ValidationError as err:
        raise invalid_input("spec", RolloutSpec, err) from None
    problems: list[tuple[str, str]] = []
    for i, plugin in enumerate(spec.target.plugins):
        where = f"spec.target.plugins[{i}]"
        addon = TARGETABLE.get(plugin.name)
        if addon is None:
            known = ", ".join(TARGETABLE)
            problems.append(
                (f"{where}.name", f"{plugin.name!r} is not an add-on with a chart; one of {known}")
            )
            continue
        unusable = addon.version_problem(plugin.version) if addon.version_problem else None
        if unusable:
            problems.append((f"{where}.version", unusable))
        if addon.owned_values:
            problems += owned_problems(plugin.values, addon.owned_values, f"{where}.values")
    if problems:
        raise InvalidInputError.of(problems)
    return spec


def cache_clear() -> None:
    """Forget every parsed rollout (tests)."""
    _parse.cache_clear()
