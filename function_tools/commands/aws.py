"""``function-cluster-plugin aws``: the group of the commands about an AWS account.

Its commands are ``aws_preflight.py``, ``aws_provider_policy.py``, ``aws_provider_role.py``
and ``aws_shared_bucket_policy.py``; none imports boto3 until it runs.
"""

from __future__ import annotations

import click

from function_tools.commands.aws_preflight import preflight_cmd
from function_tools.commands.aws_provider_policy import provider_policy_cmd
from function_tools.commands.aws_provider_role import provider_role_cmd
from function_tools.commands.aws_shared_bucket_policy import shared_bucket_policy_cmd


@click.group("aws")
def aws() -> None:
    """Check an AWS account before installing a ClusterPlugin; print the provider's IAM policy."""


aws.add_command(preflight_cmd)
aws.add_command(provider_policy_cmd)
aws.add_command(provider_role_cmd)
aws.add_command(shared_bucket_policy_cmd)
