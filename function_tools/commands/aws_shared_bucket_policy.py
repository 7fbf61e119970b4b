"""``function-cluster-plugin aws shared-bucket-policy``: a Shared distribution's bucket policy."""

from __future__ import annotations

import json
import re

import click

from function.names import PARTITIONS


@click.command("shared-bucket-policy")
@click.option("--bucket", required=True, help="The Shared distribution's private bucket.")
@click.option(
    "--distribution-arn",
    required=True,
    metavar="ARN",
    help="The distribution's ARN, arn:aws:cloudfront::<account>:distribution/<id>.",
)
def shared_bucket_policy_cmd(*, bucket: str, distribution_arn: str) -> None:
    """Print the bucket policy of a Shared distribution's bucket (JSON), for the platform team.

    Only that distribution may read, through CloudFront, the two discovery documents under
    any <namespace>/<cluster>/ of the bucket; plain HTTP is denied. S3 does not count it as
    public, so Block Public Access may stay on.
    """
    from function.policies import shared_bucket_policy  # noqa: PLC0415
    from function.spec_base import s3_bucket_name_problem  # noqa: PLC0415

    problem = s3_bucket_name_problem(bucket)
    if problem:
        raise click.BadParameter(problem, param_hint="--bucket")
    if not re.fullmatch(r"arn:aws:cloudfront::\d{12}:distribution/[A-Z0-9]+", distribution_arn):
        msg = (
            f"{distribution_arn!r} is not a distribution ARN "
            "(arn:aws:cloudfront::<account>:distribution/<id>)"
        )
        raise click.BadParameter(msg, param_hint="--distribution-arn")
    doc = shared_bucket_policy(bucket, distribution_arn, PARTITIONS["aws"])
    click.echo(json.dumps(doc, indent=2))
