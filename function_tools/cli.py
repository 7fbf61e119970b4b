"""The ``function-cluster-plugin`` command: ``serve`` (what the container runs) and local tools.

The group only: each command is a module of ``function_tools/commands/`` (``serve`` is
``function/serve.py``), registered here. The commands other than ``serve`` import their
logic when they run, so the server's cold start pays only for what serving needs.

    function-cluster-plugin serve [SDK options] [--drain-grace D] [--health-address A]
        [--metrics-address A] [--metrics-window D] [--max-connection-age D]
        [--max-connection-age-grace D] [--keepalive-min-ping-interval D]
        [--[no-]keepalive-permit-without-calls]
    function-cluster-plugin render XR.yaml [--observed PATH]... [--required PATH]...
        [--input FILE] [--composition FILE] [-o yaml|json] [--crossplane-v1]
    function-cluster-plugin simulate XR.yaml [--required PATH]... [--input FILE]
        [--composition FILE] [--steps N] [--initialized-at N] [--available-at N]
        [--ready-delay N] [--slow KIND=N]... [--fail NODE@STEP[+DURATION]]...
        [--all-steps] [--delay S]
        [--delete-cluster-at N [--cluster-gone-after K]] [--crossplane-v1] [-o text|json]
    function-cluster-plugin issuer XR.yaml [--input FILE] [--composition FILE]
        [--required PATH]... [--region R] [-o text|yaml|json]
"""

from __future__ import annotations

import sys
from typing import Any

import click

from function.__version__ import __version__
from function.serve import serve
from function_tools.commands.aws import aws
from function_tools.commands.fleet import fleet
from function_tools.commands.issuer import issuer_cmd
from function_tools.commands.render import render_cmd
from function_tools.commands.simulate import simulate_cmd
from function_tools.commands.template_values import template_values_cmd


class OneLineUsageErrors(click.Group):
    """A group whose usage errors (a missing file, an unknown option) take one line.

    click prints a usage error as three lines (usage, hint, error); every other refusal of
    these commands is one line naming what is wrong, so these are too, with the hint kept.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """The standalone main of click, with a usage error said in one line on stderr."""
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as err:
            hint = f" (see '{err.ctx.command_path} --help')" if err.ctx is not None else ""
            click.echo(f"Error: {err.format_message().rstrip('.')}{hint}", err=True)
            sys.exit(err.exit_code)
        except click.ClickException as err:
            err.show()
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        # Without standalone mode click returns the command's value, or ctx.exit's code.
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=OneLineUsageErrors)
@click.version_option(__version__, prog_name="function-cluster-plugin")
def cli() -> None:
    """Compose Cluster API add-ons on AWS with Crossplane.

    The cloud controller manager, a CNI (Amazon VPC CNI or Calico), the EBS and EFS CSI
    drivers, the AWS Load Balancer Controller and external-dns, each with its own IAM role
    through IRSA, installed in readiness order.
    """


def _show_environment_variables(group: click.Group) -> None:
    """Every flag's --help names the environment variable it also reads."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            _show_environment_variables(command)
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                param.show_envvar = True


for _command in (serve, render_cmd, simulate_cmd, issuer_cmd, aws, template_values_cmd, fleet):
    cli.add_command(_command)
_show_environment_variables(cli)

if __name__ == "__main__":
    cli()
