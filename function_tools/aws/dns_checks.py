"""``aws preflight``: external-dns's hosted zones.

Each exists, is of the expected type, and holds the domain filters.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from function.addons import external_dns
from function.addons.external_dns import ExternalDNSSpec
from function_tools.aws.checks import Check, Status, absent, code, denied, plural

FIELD = external_dns.ADDON.spec_path


def _zone_kind(private: bool) -> str:  # noqa: FBT001  # Route 53's Config.PrivateZone
    return "private" if private else "public"


def check_hosted_zone(
    route53: Any, zone_id: str, spec: ExternalDNSSpec, account: str
) -> tuple[Check, str | None]:
    """One listed hosted zone exists in this account, and is of the type spec.zoneType says.

    Returns the check and, when the zone was read, its name.
    """
    name = f"dns/zone/{zone_id}"
    try:
        zone = route53.get_hosted_zone(Id=zone_id)["HostedZone"]
    except ClientError as err:
        if code(err) in {"NoSuchHostedZone", "InvalidInput"} or absent(err):
            return Check(
                name,
                Status.FAIL,
                f"hosted zone {zone_id} ({FIELD}.hostedZoneIDs) does not exist in "
                f"account {account}: the role would grant changes to a zone that is not there, "
                "and external-dns would manage no record in it",
                "list the zones' ids with aws route53 list-hosted-zones --query "
                "'HostedZones[].[Id,Name,Config.PrivateZone]' and give each without /hostedzone/; "
                "a zone of another account cannot be used (the role lives in this one)",
            ), None
        if denied(err):
            return Check(
                name,
                Status.WARN,
                f"cannot read hosted zone {zone_id} (AccessDenied)",
                "run preflight with route53:GetHostedZone",
            ), None
        raise
    zone_name = str(zone.get("Name", ""))
    kind = _zone_kind(bool(zone.get("Config", {}).get("PrivateZone")))
    want = spec.zone_type.value if spec.zone_type is not None else None
    if want is not None and kind != want:
        return Check(
            name,
            Status.FAIL,
            f"hosted zone {zone_id} ({zone_name}) is {kind}, but {FIELD}.zoneType is "
            f"{want}: external-dns (--aws-zone-type={want}) would ignore it",
            f"list the {want} zone of that name instead (a public and a private zone may share "
            f"it: aws route53 list-hosted-zones-by-name --dns-name {zone_name}), or change "
            "zoneType",
        ), zone_name
    return Check(name, Status.PASS, f"{kind} hosted zone {zone_name} ({zone_id}) exists"), zone_name


def _related(domain: str, zone: str) -> bool:
    """Whether a domain filter and a zone name overlap (one is the other or below it)."""
    return domain == zone or zone.endswith(f".{domain}") or domain.endswith(f".{zone}")


def check_domain_filters(spec: ExternalDNSSpec, zone_names: list[str]) -> Check:
    """Each domain filter lies in (or above) one of the listed zones."""
    name = "dns/domain-filters"
    zones = [z.rstrip(".").lower() for z in zone_names]
    stray = [
        f for f in spec.domain_filters if not any(_related(f.removeprefix("."), z) for z in zones)
    ]
    if stray:
        return Check(
            name,
            Status.WARN,
            f"{plural(stray, 'domain filter')} lie in none of the listed zones "
            f"({', '.join(zones)}): external-dns manages no record for "
            f"{'them' if len(stray) > 1 else 'it'}",
            f"add the zone that holds them to {FIELD}.hostedZoneIDs, or correct "
            f"{FIELD}.domainFilters",
        )
    if not spec.domain_filters:
        return Check(name, Status.PASS, "no domain filters: every name in the listed zones")
    return Check(name, Status.PASS, "every domain filter lies in a listed zone")


def check_hosted_zones(route53: Any, spec: ExternalDNSSpec, account: str) -> list[Check]:
    """external-dns's zones: each exists and is public or private as expected; the filters fit."""
    checks: list[Check] = []
    names: list[str] = []
    for zone_id in spec.hosted_zone_ids:
        check, zone_name = check_hosted_zone(route53, zone_id, spec, account)
        checks.append(check)
        if zone_name is not None:
            names.append(zone_name)
    # Only when every zone was read: a missing one is already a failure of its own.
    if len(names) == len(spec.hosted_zone_ids):
        checks.append(check_domain_filters(spec, names))
    return checks
