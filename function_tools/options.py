"""The options the commands share, defined once: each is spelled the same everywhere.

``render``, ``simulate``, ``issuer``, ``template-values``, ``aws preflight``, ``aws
provider-policy`` and ``aws provider-role`` (``function_tools/commands/``) read the same files:
the XR, the Cluster API objects (``--required``, ``-e`` as ``crossplane render`` spells it), the
step input (``--input``) or the Composition that carries it (``--composition``). Each option
here has one flag, one parameter name and one type; a command whose help says more of it
passes its own help text. Imports only click, so every command's ``--help`` stays quick.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])
# What click.option returns: it adds the option to the command it decorates.
Decorator = Callable[[Any], Any]

PATH = click.Path(exists=True, dir_okay=True, path_type=str)
FILE = click.Path(exists=True, dir_okay=False, path_type=str)

# boto3 is the [aws] extra; make demo and make test install it into .venv/.
AWS_EXTRA_HINT = "install the aws extra from the checkout: pip install -e '.[aws]'"

xr_argument = click.argument("xr_file", metavar="XR.yaml", type=FILE)

required_option = click.option(
    "--required",
    "-e",
    "required",
    multiple=True,
    type=PATH,
    help="Required resources (the Cluster API objects and the <cluster>-sa Secret): a YAML "
    "file or a directory of them. Repeatable.",
)

input_option = click.option(
    "--input",
    "input_file",
    type=FILE,
    help="The step input (fn.clusterplugin.dev/v1alpha1 Input). Default: all defaults.",
)


def composition(
    help_text: str = "Take the step input (and step name) from the pipeline step of this "
    "Composition whose input is a fn.clusterplugin.dev/v1alpha1 Input. --input wins over it.",
) -> Decorator:
    """``--composition FILE``, the Composition whose pipeline step carries the step input."""
    return click.option("--composition", "composition", type=FILE, help=help_text)


composition_option = composition()


def region(
    help_text: str = "The AWS region, when neither spec.region nor an AWSCluster (--required) "
    "says it.",
    **kwargs: Any,
) -> Decorator:
    """``--region R``; ``kwargs`` (required, envvar) for a command that must have one."""
    return click.option("--region", "region", help=help_text, **kwargs)


region_option = region()

crossplane_v1_option = click.option(
    "--crossplane-v1",
    "crossplane_v1",
    is_flag=True,
    help="Behave like Crossplane 1.x: the Cluster API objects arrive only as label-selected "
    "extra resources.",
)


def output_option(choices: Sequence[str], default: str, help_text: str | None = None) -> Decorator:
    """``--output``/``-o``, one of ``choices``."""
    return click.option(
        "--output",
        "-o",
        "output",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help=help_text,
    )


def profile_option(help_text: str) -> Decorator:
    """``--profile``, the AWS profile of the commands that call AWS."""
    return click.option("--profile", "profile", help=help_text)


def endpoint_url_option(help_text: str) -> Decorator:
    """``--endpoint-url`` (also AWS_ENDPOINT_URL), where the commands that call AWS send it."""
    return click.option(
        "--endpoint-url", "endpoint_url", envvar="AWS_ENDPOINT_URL", help=help_text
    )


# The provider's IAM policy, as `aws provider-policy` and `aws provider-role` are asked for it.
_POLICY_OPTIONS = (
    input_option,
    composition_option,
    click.option(
        "--name-prefix",
        "name_prefix",
        help="The step input's namePrefix (sets both prefixes' defaults). [default: the Input's]",
    ),
    click.option(
        "--bucket-prefix",
        "bucket_prefix",
        help="Issuer buckets start with this. [default: <name-prefix>irsa-]",
    ),
    click.option(
        "--role-prefix",
        "role_prefix",
        help="Roles and policies (under /clusterplugin/) start with this. [default: <name-prefix>]",
    ),
    click.option(
        "--issuer-domain",
        "issuer_domains",
        multiple=True,
        metavar="DOMAIN",
        help="An issuer behind CloudFront (spec.irsa.hosting.cloudFront.domain): its OIDC "
        "providers, and its alias record with --hosted-zone-id. Repeatable.",
    ),
    click.option(
        "--shared-bucket",
        "shared_buckets",
        multiple=True,
        metavar="BUCKET",
        help="A Shared distribution's bucket: the two documents under any "
        "<namespace>/<cluster>. Repeatable.",
    ),
    click.option(
        "--managed-distributions",
        "managed_distributions",
        is_flag=True,
        help="Managed distributions: CloudFront distributions and origin access controls.",
    ),
    click.option(
        "--hosted-zone-id",
        "hosted_zone_ids",
        multiple=True,
        metavar="ZONE",
        help="Managed with hostedZoneId: A records of the --issuer-domain names in this zone "
        "only. Repeatable.",
    ),
    click.option(
        "--eks-cluster",
        "eks_clusters",
        multiple=True,
        metavar="NAME",
        help="spec.irsa.mode PodIdentity: the Pod Identity associations of this EKS cluster "
        "(AWSManagedControlPlane spec.eksClusterName), and passing the add-on roles to EKS Pod "
        "Identity only. Repeatable.",
    ),
)


def policy_options(command: F) -> F:
    """The options of the provider's policy, in this order: ``--input`` ... ``--eks-cluster``."""
    for option in reversed(_POLICY_OPTIONS):
        command = option(command)
    return command


class InputError(click.ClickException):
    """A file or its content the command cannot use: one line on stderr, exit code 2."""

    exit_code = 2
