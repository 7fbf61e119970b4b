r"""``template-values``: what the CAPA cluster template needs that only this function can compute.

``templates/cluster-template-clusterplugin.yaml`` (``docs/capa-template.md``) is CAPA's default
kubeadm template with the ClusterPlugin in it. Its KubeadmControlPlane starts the API server
with ``--service-account-issuer=${CLUSTER_PLUGIN_ISSUER_URL}``: the SelfHosted issuer of the
ClusterPlugin that will be made of the same template, which depends on the namespace, the
cluster's name, the region and the ``namePrefix`` of the Composition that composes it. This
command prints it for a namespace and a cluster name, before any XR file exists, by asking
``function_tools.issuer`` (the computation the function itself uses for ``status.issuerURL``) about
the ClusterPlugin the template makes, and says which prefix it used::

    eval "$(function-cluster-plugin template-values demo -n team-a --region us-east-1 \
        --composition composition.yaml -o env)"
    clusterctl generate cluster demo --target-namespace team-a \
        --from templates/cluster-template-clusterplugin.yaml > demo.yaml

The command itself is ``function_tools/commands/template_values.py``; this module imports
nothing heavy at module level, and the server's start pays nothing for it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The template this command computes for, and the variables it fills (docs/capa-template.md).
TEMPLATE = "templates/cluster-template-clusterplugin.yaml"
ISSUER_VARIABLE = "CLUSTER_PLUGIN_ISSUER_URL"
COMPOSITION_VARIABLE = "CLUSTER_PLUGIN_COMPOSITION"
REGION_VARIABLE = "AWS_REGION"

# clusterctl's two variable forms, ${NAME} and ${NAME:=default}.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::=([^}]*))?\}")


@dataclass(frozen=True)
class TemplateValues:
    """The template variables of one ClusterPlugin, and where each input came from."""

    namespace: str
    cluster: str
    region: str
    region_from: str
    name_prefix: str
    name_prefix_from: str
    composition: str
    issuer_url: str

    def variables(self) -> dict[str, str]:
        """Template variable -> value, as clusterctl reads them from the environment."""
        return {
            REGION_VARIABLE: self.region,
            COMPOSITION_VARIABLE: self.composition,
            ISSUER_VARIABLE: self.issuer_url,
        }

    def clusterctl(self) -> str:
        """The clusterctl command that generates the cluster these values are for."""
        return (
            f"clusterctl generate cluster {shlex.quote(self.cluster)} "
            f"--target-namespace {shlex.quote(self.namespace)} --from {TEMPLATE}"
        )

    def prefix_line(self) -> str:
        """Which name prefix the issuer was computed with: it is part of the bucket's name."""
        return f'namePrefix "{self.name_prefix}", {self.name_prefix_from}'

    def as_dict(self) -> dict[str, Any]:
        """The machine-readable form (``-o yaml|json``)."""
        return {
            "namespace": self.namespace,
            "clusterName": self.cluster,
            "region": self.region,
            "regionFrom": self.region_from,
            "namePrefix": self.name_prefix,
            "namePrefixFrom": self.name_prefix_from,
            "variables": self.variables(),
            "clusterctl": self.clusterctl(),
        }

    def env(self) -> str:
        """``export`` lines for a POSIX shell, the inputs as comments."""
        lines = [
            f"# ClusterPlugin {self.namespace}/{self.cluster}: {self.prefix_line()}",
            f"# region from {self.region_from}; then: {self.clusterctl()}",
        ]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.variables().items()]
        return "\n".join(lines) + "\n"

    def text(self) -> str:
        """The human-readable report."""
        width = max(len(k) for k in self.variables())
        rows = [f"    {k:<{width}}  {v}" for k, v in self.variables().items()]
        return "\n".join(
            [
                f"Values of {TEMPLATE} for ClusterPlugin {self.namespace}/{self.cluster}:",
                "",
                *rows,
                "",
                (
                    f"The issuer was computed with {self.prefix_line()}, and region "
                    f"{self.region} from {self.region_from}."
                ),
                (
                    "The API server signs service-account tokens with this issuer from its "
                    "first boot: generate the cluster with the same name and namespace, and "
                    "let the ClusterPlugin use that Composition:"
                ),
                "",
                f"    {self.clusterctl()}",
                "",
            ]
        )


def template_problem(values: TemplateValues, template: str) -> str | None:
    """Why the cluster ``template`` makes with ``values`` would not sign with their issuer, or None.

    Substituted as clusterctl does (the variables this command computes, CLUSTER_NAME and the
    defaults; others stay as they are), then each KubeadmControlPlane's
    --service-account-issuer against the issuer the ClusterPlugin's roles will trust: the API
    server signs with it from its first boot, and a template naming another issuer, or none,
    makes a cluster whose add-ons get tokens STS refuses. Raises ``InputFileError`` for a
    template that cannot be read.
    """
    import yaml  # noqa: PLC0415
    from google.protobuf import json_format, struct_pb2  # noqa: PLC0415

    from function.addons.irsa import issuer_mismatch  # noqa: PLC0415
    from function.cluster import KUBEADM_CONTROL_PLANE, service_account_issuer  # noqa: PLC0415
    from function.spec_base import IRSAMode  # noqa: PLC0415
    from function_tools.input_files import read_text, yaml_error  # noqa: PLC0415

    known = {**values.variables(), "CLUSTER_NAME": values.cluster}

    def one(match: re.Match[str]) -> str:
        return known.get(match.group(1), match.group(2) or match.group(0))

    text = _VARIABLE.sub(one, read_text(template))
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError as err:
        raise yaml_error(Path(template), err) from None
    planes = [d for d in docs if d.get("kind") == KUBEADM_CONTROL_PLANE]
    topology = next(
        (
            (d.get("spec") or {}).get("topology")
            for d in docs
            if d.get("kind") == "Cluster" and (d.get("spec") or {}).get("topology")
        ),
        None,
    )
    if not planes and isinstance(topology, dict):
        ref = topology.get("classRef")
        klass = (ref.get("name") if isinstance(ref, dict) else None) or topology.get("class")
        return (
            f"{template} makes its Cluster from ClusterClass {klass or '?'} (spec.topology): the "
            f"topology controller makes its {KUBEADM_CONTROL_PLANE} from the ClusterClass's "
            f"{KUBEADM_CONTROL_PLANE}Template and patches, which this command does not read; "
            f"give the API server --service-account-issuer ${{{ISSUER_VARIABLE}}} "
            f"({values.issuer_url}) there, or use a template that holds the "
            f"{KUBEADM_CONTROL_PLANE} itself"
        )
    if not planes:
        return (
            f"{template} holds no {KUBEADM_CONTROL_PLANE}: nothing starts the API server with "
            f"the issuer {values.issuer_url} (SelfHosted IRSA is for kubeadm control planes)"
        )
    for plane in planes:
        name = str((plane.get("metadata") or {}).get("name") or "")
        signing = service_account_issuer(json_format.ParseDict(plane, struct_pb2.Struct()))
        where = f"{values.namespace}/{name}"
        found = issuer_mismatch(signing, values.issuer_url, where, IRSAMode.SELF_HOSTED)
        if found is not None:
            fix = found[1].replace(
                f"to {values.issuer_url}", f"to ${{{ISSUER_VARIABLE}}} ({values.issuer_url})", 1
            )
            return f"{template}: the {found[0]}; {fix}"
    return None


def _prefix_source(
    input_file: str | None, composition: str | None, composition_name: str
) -> str:
    if input_file:
        return f"from the step input {input_file} (--input)"
    if composition:
        return (
            f"from the step input of Composition {composition_name} ({composition}, --composition)"
        )
    return (
        "the default: neither --composition nor --input was given (pass the Composition your "
        "platform runs if its namePrefix is not empty)"
    )


def compute(
    namespace: str,
    cluster: str,
    region: str,
    *,
    input_file: str | None = None,
    composition: str | None = None,
    region_from: str = "--region",
) -> TemplateValues:
    """The values for ``namespace``/``cluster``.

    Raises ``input_files.InputFileError`` for a step input or Composition that cannot be used and
    ``issuer.IssuerError`` for what the function would refuse (a bad name or region).
    """
    from function.flavour import NAMESPACED_XR  # noqa: PLC0415
    from function_tools import input_files, issuer  # noqa: PLC0415

    # The template's ClusterPlugin as the issuer depends on it: its name, namespace and
    # cluster; SelfHosted with the default hosting (S3Public) and bucket name.
    xr = {
        "apiVersion": NAMESPACED_XR.api_version,
        "kind": NAMESPACED_XR.kind,
        "metadata": {"name": cluster, "namespace": namespace},
        "spec": {"clusterName": cluster, "irsa": {"mode": "SelfHosted"}},
    }
    _, step_input = input_files.step_input(input_file, composition, xr)
    composition_name = NAMESPACED_XR.xrd_name
    if composition:
        comp, _ = input_files.function_step(input_files.load_documents([composition]), composition)
        composition_name = str((comp.get("metadata") or {}).get("name") or composition_name)
    found = issuer.compute(xr, step_input=step_input, region=region)
    # found.warnings says that this XR's spec names no add-on using IRSA: true of the
    # stand-in above, not of the template's ClusterPlugin.
    return TemplateValues(
        namespace=namespace,
        cluster=cluster,
        region=found.region or region,
        region_from=region_from,
        name_prefix=str(step_input.get("namePrefix") or ""),
        name_prefix_from=_prefix_source(input_file, composition, composition_name),
        composition=composition_name,
        issuer_url=found.url,
    )
