"""``function-cluster-plugin aws provider-policy``: the provider's least-privilege IAM policy.

The policy is ``function_tools/aws/provider_policy.py``'s; :func:`policy_document` makes it
from the options of :func:`function_tools.options.policy_options`, for this command and
``aws provider-role``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from function.names import PARTITIONS
from function_tools import options


def policy_document(
    *,
    input_file: str | None,
    composition: str | None,
    name_prefix: str | None,
    bucket_prefix: str | None,
    role_prefix: str | None,
    partition: str,
    account_id: str,
    issuer_domains: tuple[str, ...],
    shared_buckets: tuple[str, ...],
    managed_distributions: bool,
    hosted_zone_ids: tuple[str, ...],
    eks_clusters: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The provider's policy for the options; a usage error for what it cannot be made of."""
    from function.accept import accept_step_input  # noqa: PLC0415
    from function.spec_base import InvalidInputError  # noqa: PLC0415
    from function_tools.aws.provider_policy import (  # noqa: PLC0415
        CloudFrontHosting,
        default_bucket_prefix,
        default_role_prefix,
        provider_policy,
    )
    from function_tools.input_files import InputFileError, step_input  # noqa: PLC0415

    try:
        _, raw = step_input(input_file, composition)
        if name_prefix is not None:
            raw = {**raw, "namePrefix": name_prefix}
        name_prefix = accept_step_input(raw).name_prefix
    except (InputFileError, InvalidInputError) as err:
        raise options.InputError(str(err)) from err
    try:
        return provider_policy(
            bucket_prefix=default_bucket_prefix(name_prefix)
            if bucket_prefix is None
            else bucket_prefix,
            role_prefix=default_role_prefix(name_prefix) if role_prefix is None else role_prefix,
            partition=partition,
            account_id=account_id,
            cloudfront=CloudFrontHosting(
                domains=issuer_domains,
                shared_buckets=shared_buckets,
                managed=managed_distributions,
                hosted_zone_ids=hosted_zone_ids,
            ),
            eks_clusters=eks_clusters,
        )
    except ValueError as err:
        raise click.BadParameter(str(err)) from err


@click.command("provider-policy")
@options.policy_options
@click.option(
    "--partition", type=click.Choice(sorted(PARTITIONS)), default="aws", show_default=True
)
@click.option(
    "--account-id", default="*", show_default=True, help="12-digit account id, or * for any."
)
def provider_policy_cmd(**kwargs: Any) -> None:
    """Print the least-privilege IAM policy for the Crossplane AWS provider's credentials (JSON).

    Issuers behind CloudFront (spec.irsa.hosting) and EKS Pod Identity (--eks-cluster) add
    only what their options ask for. Exits 2 when the function would refuse the step input
    (or --name-prefix in it).
    """
    click.echo(json.dumps(policy_document(**kwargs), indent=2))
