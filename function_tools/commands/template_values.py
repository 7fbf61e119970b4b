"""``function-cluster-plugin template-values``: what the CAPA cluster template needs.

The values themselves are computed by ``function_tools/template_values.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from function_tools import options
from function_tools.template_values import (
    COMPOSITION_VARIABLE,
    REGION_VARIABLE,
    TEMPLATE,
    compute,
    template_problem,
)


@click.command("template-values")
@click.argument("cluster", metavar="CLUSTER_NAME")
@click.option(
    "--namespace",
    "-n",
    required=True,
    help="The namespace of the Cluster and the ClusterPlugin: clusterctl's --target-namespace.",
)
@options.region(
    "The cluster's AWS region (the template's AWS_REGION).",
    required=True,
    envvar=REGION_VARIABLE,
)
@options.input_option
@options.composition(
    "The Composition the ClusterPlugin will use: its step input's namePrefix, and its name for "
    f"{COMPOSITION_VARIABLE}. --input wins over it for the prefix."
)
@click.option(
    "--template",
    metavar="FILE",
    help=f"The cluster template whose KubeadmControlPlane must start the API server with the "
    f"issuer: checked before anything is composed. [default: {TEMPLATE}, when it is there]",
)
@options.output_option(
    ["text", "env", "yaml", "json"],
    "text",
    "env: export lines for a shell, which clusterctl reads the variables from.",
)
@click.pass_context
def template_values_cmd(
    ctx: click.Context,
    *,
    cluster: str,
    namespace: str,
    region: str,
    input_file: str | None,
    composition: str | None,
    template: str | None,
    output: str,
) -> None:
    """Print the values the CAPA cluster template needs for CLUSTER_NAME in --namespace.

    The SelfHosted IRSA issuer URL (the API server's --service-account-issuer from the
    cluster's first boot), the Composition the ClusterPlugin uses and the region, for
    templates/cluster-template-clusterplugin.yaml (docs/capa-template.md), before any
    XR exists. Says which namePrefix the issuer was computed with. Exits 1 when the
    template's KubeadmControlPlane would start the API server with another issuer, or none.
    """
    from function_tools import input_files, issuer  # noqa: PLC0415

    from_env = ctx.get_parameter_source("region") is click.core.ParameterSource.ENVIRONMENT
    region_from = REGION_VARIABLE if from_env else "--region"
    try:
        values = compute(
            namespace,
            cluster,
            region,
            input_file=input_file,
            composition=composition,
            region_from=region_from,
        )
        template = template or (TEMPLATE if Path(TEMPLATE).is_file() else None)
        problem = template_problem(values, template) if template else None
    except input_files.InputFileError as err:
        raise options.InputError(str(err)) from None
    except issuer.IssuerError as err:
        click.echo(f"Error: {err}", err=True)
        sys.exit(2)
    if problem:
        click.echo(f"Error: {problem}", err=True)
        sys.exit(1)
    if output == "env":
        click.echo(values.env(), nl=False)
    elif output == "json":
        import json  # noqa: PLC0415

        click.echo(json.dumps(values.as_dict(), indent=2))
    elif output == "yaml":
        import yaml  # noqa: PLC0415

        click.echo(yaml.safe_dump(values.as_dict(), sort_keys=False, width=1 << 30), nl=False)
    else:
        click.echo(values.text(), nl=False)
