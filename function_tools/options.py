"""The options the local commands share, defined once: each is spelled the same everywhere.

``render``, ``simulate`` and ``issuer`` (``function_tools/cli.py``) and ``aws preflight`` and
``aws provider-policy`` (``function_tools/aws/cli.py``) read the same files: the XR, the
Cluster API objects (``--required``, ``-e`` as ``crossplane render`` spells it), the
step input (``--input``) or the Composition that carries it (``--composition``).
Imports only click, so every command's ``--help`` stays quick.
"""

from __future__ import annotations

import click

PATH = click.Path(exists=True, dir_okay=True, path_type=str)
FILE = click.Path(exists=True, dir_okay=False, path_type=str)

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

composition_option = click.option(
    "--composition",
    type=FILE,
    help="Take the step input (and step name) from the pipeline step of this Composition whose "
    "input is a fn.clusterplugin.dev/v1alpha1 Input. --input wins over it.",
)

region_option = click.option(
    "--region",
    help="The AWS region, when neither spec.region nor an AWSCluster (--required) says it.",
)


class InputError(click.ClickException):
    """A file or its content the command cannot use: one line on stderr, exit code 2."""

    exit_code = 2
