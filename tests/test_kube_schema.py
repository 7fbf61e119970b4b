"""Prove that the CRD/Helm-schema guard (tests/kube_schema.py) can pass and fail."""

from __future__ import annotations

import copy
import hashlib
import re
import time

import pytest

from tests import kube_schema as ks

UPJET_URL_RULE = "has(self.forProvider.url)"


def role(**for_provider: object) -> dict:
    return {
        "apiVersion": "iam.aws.m.upbound.io/v1beta1",
        "kind": "Role",
        "metadata": {
            "name": "cluster-a-ebs-csi",
            "namespace": "team-a",
            "labels": {"app.kubernetes.io/managed-by": "function-cluster-plugin"},
            "annotations": {"crossplane.io/external-name": "cluster-a-ebs-csi"},
        },
        "spec": {
            "forProvider": {
                "assumeRolePolicy": '{"Version":"2012-10-17","Statement":[]}',
                "description": "IRSA role for the EBS CSI controller",
                "maxSessionDuration": 3600,
                "tags": {"cluster": "cluster-a"},
                **for_provider,
            },
            "providerConfigRef": {"kind": "ProviderConfig", "name": "default"},
        },
    }


def oidc_provider(**for_provider: object) -> dict:
    return {
        "apiVersion": "iam.aws.m.upbound.io/v1beta1",
        "kind": "OpenIDConnectProvider",
        "metadata": {"name": "cluster-a-oidc", "namespace": "team-a"},
        "spec": {
            "forProvider": {
                "clientIdList": ["sts.amazonaws.com"],
                "thumbprintList": ["9e99a48a9960b14926bb7f3b02e22da2b0ab7280"],
                **for_provider,
            },
        },
    }


def usage(spec: dict) -> dict:
    return {
        "apiVersion": "protection.crossplane.io/v1beta1",
        "kind": "Usage",
        "metadata": {"name": "release-uses-role", "namespace": "team-a"},
        "spec": spec,
    }


def composition(spec_extra: dict) -> dict:
    return {
        "apiVersion": "apiextensions.crossplane.io/v1",
        "kind": "Composition",
        "metadata": {"name": "clusterplugins.example.org"},
        "spec": {
            "compositeTypeRef": {
                "apiVersion": "example.org/v1alpha1",
                "kind": "ClusterPlugin",
            },
            **spec_extra,
        },
    }


PIPELINE = [
    {
        "step": "cluster-plugin",
        "functionRef": {"name": "function-cluster-plugin"},
        "input": {
            "apiVersion": "clusterplugin.fn.example.org/v1beta1",
            "kind": "Input",
        },
    }
]


def joined(errors: list[str]) -> str:
    return "\n".join(errors)


# ------------------------------------------------------------------------------------
# the cases the guard must get right
# ------------------------------------------------------------------------------------


def test_valid_namespaced_upjet_role_passes():
    assert ks.validate(role()) == []


def test_unknown_field_under_for_provider_fails():
    errors = ks.validate(role(assumeRolePolicyDocument="{}"))
    assert len(errors) == 1, errors
    assert errors[0].startswith("spec.forProvider:")
    assert "'assumeRolePolicyDocument' was unexpected" in errors[0]


def test_wrong_type_under_for_provider_fails():
    errors = ks.validate(role(maxSessionDuration="3600"))
    assert errors == [
        "spec.forProvider.maxSessionDuration: '3600' is not of type 'number'"
    ]


def test_oidc_provider_with_url_passes():
    assert (
        ks.validate(
            oidc_provider(url="https://oidc.eks.us-east-1.amazonaws.com/id/ABC")
        )
        == []
    )


def test_oidc_provider_without_url_fails_through_cel_rule():
    errors = ks.validate(oidc_provider())
    assert len(errors) == 1, errors
    # The schema does not require url: only the x-kubernetes-validations rule does.
    assert errors[0].startswith("spec: spec.forProvider.url is a required parameter")
    assert "x-kubernetes-validations rule" in errors[0]
    assert UPJET_URL_RULE in errors[0]


def test_cel_rule_sees_schema_defaults():
    # managementPolicies defaults to ["*"]; the url rule only fires because that default
    # is applied before evaluation. An explicit Observe-only policy satisfies it.
    obj = oidc_provider()
    obj["spec"]["managementPolicies"] = ["Observe"]
    assert ks.validate(obj) == []


def test_url_in_init_provider_satisfies_cel_rule():
    obj = oidc_provider()
    obj["spec"]["initProvider"] = {"url": "https://oidc.example.com"}
    assert ks.validate(obj) == []


def test_cluster_scoped_kind_with_namespace_fails():
    obj = role()
    obj["apiVersion"] = "iam.aws.upbound.io/v1beta1"  # legacy, cluster-scoped Role
    obj["spec"]["providerConfigRef"] = {
        "name": "default"
    }  # cluster-scoped refs have no kind
    errors = ks.validate(obj)
    assert any(
        e.startswith("metadata.namespace:") and "cluster-scoped" in e for e in errors
    ), errors
    del obj["metadata"]["namespace"]
    assert ks.validate(obj) == []


def test_namespaced_kind_without_namespace_passes():
    obj = role()
    del obj["metadata"]["namespace"]  # Crossplane fills it from the XR
    assert ks.validate(obj) == []


def test_unknown_kind_fails():
    obj = role()
    obj["kind"] = "Rolez"
    errors = ks.validate(obj)
    assert len(errors) == 1
    assert (
        "no CRD for apiVersion 'iam.aws.m.upbound.io/v1beta1' kind 'Rolez'" in errors[0]
    )


def test_unknown_version_and_core_kinds_fail():
    obj = role()
    obj["apiVersion"] = "iam.aws.m.upbound.io/v1"
    assert "has no version 'v1'" in joined(ks.validate(obj))
    assert ks.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    )
    assert ks.validate({"kind": "Role"}) == ["apiVersion: required string"]


def test_not_served_version_fails():
    obj = {
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "AWSCluster",
        "metadata": {"name": "c", "namespace": "team-a"},
    }
    assert "is not served" in joined(ks.validate(obj))
    obj["apiVersion"] = "infrastructure.cluster.x-k8s.io/v1beta2"
    assert ks.validate(obj) == []


def test_usage_without_by_and_reason_fails_via_cel():
    of = {
        "apiVersion": "iam.aws.m.upbound.io/v1beta1",
        "kind": "Role",
        "resourceRef": {"name": "r"},
    }
    errors = ks.validate(usage({"of": of}))
    assert len(errors) == 1, errors
    assert 'either "spec.by" or "spec.reason" must be specified.' in errors[0]
    assert "has(self.by) || has(self.reason)" in errors[0]
    assert ks.validate(usage({"of": of, "reason": "protect the IRSA role"})) == []
    by = {
        "apiVersion": "helm.m.crossplane.io/v1beta1",
        "kind": "Release",
        "resourceRef": {"name": "x"},
    }
    assert ks.validate(usage({"of": of, "by": by})) == []


def test_usage_cross_namespace_rule_uses_escaped_namespace_property():
    # The rule reads self.of.resourceRef.__namespace__ (Kubernetes escapes the keyword).
    of = {
        "apiVersion": "iam.aws.m.upbound.io/v1beta1",
        "kind": "Role",
        "resourceRef": {"name": "r", "namespace": "other"},
    }
    errors = ks.validate(usage({"of": of, "reason": "keep"}))
    assert len(errors) == 1, errors
    assert 'cross-namespace "spec.of" is not allowed' in errors[0]
    by = {
        "apiVersion": "helm.m.crossplane.io/v1beta1",
        "kind": "Release",
        "resourceRef": {"name": "x"},
    }
    assert ks.validate(usage({"of": of, "by": by})) == []


def test_helm_release_with_values_passes():
    release = {
        "apiVersion": "helm.m.crossplane.io/v1beta1",
        "kind": "Release",
        "metadata": {"name": "cert-manager", "namespace": "team-a"},
        "spec": {
            "forProvider": {
                "chart": {
                    "name": "cert-manager",
                    "repository": "https://charts.jetstack.io",
                    "version": "v1.21.1",
                },
                "namespace": "cert-manager",
                "values": {
                    "crds": {"enabled": True},
                    "serviceAccount": {
                        "annotations": {"eks.amazonaws.com/role-arn": "arn:x"}
                    },
                    "extraArgs": ["--dns01-recursive-nameservers-only"],
                },
            },
            "providerConfigRef": {"kind": "ProviderConfig", "name": "default"},
        },
    }
    assert ks.validate(release) == []
    release["spec"]["forProvider"]["valuez"] = {}
    assert "'valuez' was unexpected" in joined(ks.validate(release))


def test_ebs_values_unknown_top_level_key_fails():
    errors = ks.validate_values("aws-ebs-csi-driver", {"controler": {}})
    assert errors == [
        "<root>: Additional properties are not allowed ('controler' was unexpected)"
    ]


def test_ebs_values_irsa_annotation_passes():
    values = {
        "controller": {
            "serviceAccount": {
                "name": "ebs-csi-controller-sa",
                "annotations": {
                    "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/x"
                },
            }
        }
    }
    assert ks.validate_values("aws-ebs-csi-driver", values) == []


def test_cert_manager_values():
    assert ks.validate_values("cert-manager", {"crds": {"enabled": True}}) == []
    errors = ks.validate_values("cert-manager", {"crds": {"enable": True}})
    assert errors == [
        "crds: Additional properties are not allowed ('enable' was unexpected)"
    ]


def test_pod_identity_webhook_values():
    assert (
        ks.validate_values(
            "amazon-eks-pod-identity-webhook", {"config": {"tokenAudience": "sts"}}
        )
        == []
    )
    assert ks.validate_values("amazon-eks-pod-identity-webhook", {"bogus": 1})


def test_values_schemas_use_declared_draft():
    drafts = {
        c: type(ks._values_validator(c)).__name__
        for c in (
            "aws-ebs-csi-driver",
            "amazon-eks-pod-identity-webhook",
            "cert-manager",
        )
    }
    assert drafts == {
        "aws-ebs-csi-driver": "Draft201909Validator",
        "amazon-eks-pod-identity-webhook": "Draft202012Validator",
        "cert-manager": "Draft7Validator",
    }


def test_chart_without_schema_raises_key_error():
    with pytest.raises(KeyError, match=r"has no values\.schema\.json"):
        ks.validate_values("aws-vpc-cni", {})


def test_values_schema_is_read_from_the_named_chart_version():
    assert ks.validate_values("aws-ebs-csi-driver", {}, "2.64.0") == []
    assert ks.validate_values("aws-ebs-csi-driver", {"controler": {}}, "2.64.0")
    with pytest.raises(KeyError, match=r"'2\.63\.0' is not vendored"):
        ks.validate_values("aws-ebs-csi-driver", {}, "2.63.0")
    with pytest.raises(KeyError, match="vendored versions"):
        ks.validate_values("no-such-chart", {})


def test_vendored_charts_are_indexed_by_their_chart_yaml():
    charts = ks.vendored_charts()
    assert len(charts) == 17
    assert sum(a.parent == ks.OLDER_CHART_DIR for a in charts.values()) == 6
    for (name, version), archive in charts.items():
        # helm package names the file <name>-<version>.tgz from the same Chart.yaml.
        assert archive.name == f"{name}-{version}.tgz"
        assert ks.chart_file(archive, "Chart.yaml") is not None
    assert ks.chart_file(ks.chart_archive("cert-manager"), "no-such-file") is None


def test_composition_pipeline_passes():
    assert ks.validate(composition({"mode": "Pipeline", "pipeline": PIPELINE})) == []
    assert (
        ks.validate(composition({"pipeline": PIPELINE})) == []
    )  # mode defaults to Pipeline


def test_composition_resources_mode_without_pipeline_fails_via_cel():
    errors = ks.validate(composition({"mode": "Resources"}))
    cel = [e for e in errors if "x-kubernetes-validations rule" in e]
    assert len(cel) == 1, errors
    assert "an array of pipeline steps is required in Pipeline mode" in cel[0]
    assert "self.mode == 'Pipeline' && has(self.pipeline)" in cel[0]


def test_composition_step_input_is_an_embedded_resource():
    bad = copy.deepcopy(PIPELINE)
    del bad[0]["input"]["kind"]
    assert "spec.pipeline[0].input: 'kind' is a required property" in ks.validate(
        composition({"pipeline": bad})
    )


def test_list_type_map_keys_must_be_unique():
    errors = ks.validate(composition({"pipeline": PIPELINE + PIPELINE}))
    assert any("duplicate entry in list-type map" in e for e in errors), errors


# ------------------------------------------------------------------------------------
# engine details
# ------------------------------------------------------------------------------------


def test_transition_rules_are_skipped_on_create():
    # The v2 XRD has `self == oldSelf` on spec.group/names/scope: create must pass them.
    xrd = {
        "apiVersion": "apiextensions.crossplane.io/v2",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": "clusterplugins.example.org"},
        "spec": {
            "group": "example.org",
            "names": {"kind": "ClusterPlugin", "plural": "clusterplugins"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "referenceable": True,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    assert ks.validate(xrd) == []
    xrd["spec"]["names"]["plural"] = "ClusterPlugins"  # lowerAscii() rule
    errors = ks.validate(xrd)
    assert len(errors) == 1
    assert "Plural name must be lowercase" in errors[0]


def test_cel_duration_rules():
    pc = {
        "apiVersion": "aws.m.upbound.io/v1beta1",
        "kind": "ProviderConfig",
        "metadata": {"name": "default", "namespace": "team-a"},
        "spec": {
            "credentials": {"source": "IRSA"},
            "reconciliationPolicy": {
                "exponentialFailureRateLimiter": {"baseDelay": "5s", "maxDelay": "120s"}
            },
        },
    }
    assert ks.validate(pc) == []
    pc["spec"]["reconciliationPolicy"]["exponentialFailureRateLimiter"]["baseDelay"] = (
        "500ms"
    )
    assert ["baseDelay must be at least 1s" in e for e in ks.validate(pc)] == [True]


def test_null_fields():
    # Not nullable: the harness reports it (the API server would silently drop it).
    errors = ks.validate(role(description=None))
    assert errors == [
        (
            "spec.forProvider.description: null is not allowed: the field is not "
            "nullable (expected string); omit it instead"
        )
    ]


def test_metadata_checks():
    obj = role()
    obj["metadata"]["name"] = "Cluster_A"
    obj["metadata"]["labels"] = {"bad key!": "v", "ok": "not ok value"}
    obj["metadata"]["annotations"]["example.com/x"] = 5
    errors = joined(ks.validate(obj))
    assert "metadata.name: 'Cluster_A' is not a valid DNS-1123 subdomain" in errors
    assert "metadata.labels: name part of key 'bad key!'" in errors
    assert "metadata.labels[ok]: value 'not ok value'" in errors
    assert "metadata.annotations[example.com/x]: 5 is not of type 'string'" in errors
    obj = role()
    obj["metadata"]["name"] = "a" * 254
    assert "must be no more than 253 characters" in joined(ks.validate(obj))
    obj = role()
    obj["metadata"]["lables"] = {}
    assert "'lables' was unexpected" in joined(ks.validate(obj))


def test_validate_with_schema():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "x-kubernetes-validations": [
                    {
                        "rule": "self.size <= self.max",
                        "messageExpression": (
                            "'size ' + string(self.size)"
                            " + ' exceeds ' + string(self.max)"
                        ),
                        "reason": "FieldValueInvalid",
                    },
                    {"rule": "self.name.split('-').size() == 2", "fieldPath": ".name"},
                    {"rule": "self.size != oldSelf.size", "message": "transition rule"},
                    {
                        "rule": (
                            "!oldSelf.hasValue() || self.size == oldSelf.value().size"
                        ),
                        "optionalOldSelf": True,
                    },
                ],
                "properties": {
                    "size": {"type": "integer", "format": "int32"},
                    "max": {"type": "integer", "default": 10},
                    "name": {"type": "string", "default": "a-b", "maxLength": 8},
                    "port": {
                        "x-kubernetes-int-or-string": True,
                        "anyOf": [{"type": "integer"}, {"type": "string"}],
                    },
                    "note": {"type": "string", "nullable": True},
                    "free": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    },
                    "map": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                    },
                    "when": {"type": "string", "format": "date-time"},
                },
            }
        },
    }
    ok = {
        "apiVersion": "example.org/v1",
        "kind": "X",
        "metadata": {"name": "x"},
        "spec": {
            "size": 3,
            "port": "https",
            "note": None,
            "free": {"anything": [1, {"goes": True}]},
            "map": {"a": "b"},
            "when": "2024-01-02T03:04:05Z",
        },
    }
    assert ks.validate_with_schema(ok, schema) == []
    bad = copy.deepcopy(ok)
    bad["spec"].update(size=30, name="abc", port=1.5, map={"a": 1}, extra=1)
    errors = ks.validate_with_schema(bad, schema)
    text = joined(errors)
    assert "spec: size 30 exceeds 10 [FieldValueInvalid]" in text
    assert "spec.name: failed rule: self.name.split('-').size() == 2" in text
    assert "'extra' was unexpected" in text
    assert "spec.map.a: 1 is not of type 'string'" in text
    assert "spec.port: 1.5 is not of type 'integer', 'string'" in text
    assert "transition rule" not in text
    assert len(errors) == 5, errors
    bad = copy.deepcopy(ok)
    bad["spec"]["when"] = "yesterday"
    assert ks.validate_with_schema(bad, schema) == [
        "spec.when: 'yesterday' is not a 'date-time'"
    ]


def test_cel_runtime_error_is_a_failure():
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.missing == 1", "message": "m"}
                ],
                "properties": {"a": {"type": "string"}},
            }
        },
    }
    errors = ks.validate_with_schema({"spec": {"a": "x"}}, schema)
    assert len(errors) == 1
    assert errors[0].startswith("spec: rule evaluation error:")


def test_cel_string_extensions():
    def check(rule: str, value: object) -> list[str]:
        schema = {
            "type": "object",
            "properties": {
                "v": {
                    "x-kubernetes-preserve-unknown-fields": True,
                    "x-kubernetes-validations": [{"rule": rule}],
                }
            },
        }
        return ks.validate_with_schema({"v": value}, schema)

    for rule, value in [
        ("self.lowerAscii() == 'abc'", "AbC"),
        ("self.upperAscii() == 'ABC'", "abc"),
        ("self.trim() == 'x'", "  x "),
        ("self.split('/') == ['a', 'b']", "a/b"),
        ("self.split('/', 1) == ['a/b']", "a/b"),
        ("self.replace('-', '_') == 'a_b_c'", "a-b-c"),
        ("self.indexOf('b') == 1 && self.lastIndexOf('b') == 3", "abcb"),
        ("self.substring(1, 3) == 'bc' && self.charAt(0) == 'a'", "abcd"),
        (
            "self.startsWith('ab') && self.endsWith('cd') && self.matches('^a.*d$')",
            "abcd",
        ),
        ("['a', 'b'].join('-') == self", "a-b"),
        ("self.indexOf(2) == 1", [1, 2, 3]),
    ]:
        assert check(rule, value) == [], rule
    assert check("self.lowerAscii() == 'abc'", "abd")


def test_cel_escaping():
    assert ks.cel_escape("namespace") == "__namespace__"
    assert ks.cel_escape("foo-bar.baz/x") == "foo__dash__bar__dot__baz__slash__x"
    assert ks.cel_escape("a__b") == "a__underscores__b"
    assert ks.cel_escape("plain") == "plain"


def test_every_vendored_cel_rule_compiles():
    rules: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            rules.update(r["rule"] for r in node.get("x-kubernetes-validations") or ())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for crd in ks.get_registry():
        walk(crd.openapi_v3_schema)
    assert len(rules) > 30
    broken = {r: ks._compile_cel(r).error for r in rules if ks._compile_cel(r).error}
    assert broken == {}


def test_every_served_kind_compiles_and_accepts_a_minimal_object():
    registry = ks.get_registry()
    assert len(registry) >= 60
    for crd in registry:
        if not crd.served:
            continue
        meta = {"name": "x", **({"namespace": "team-a"} if crd.namespaced else {})}
        errors = ks.validate(
            {"apiVersion": crd.api_version, "kind": crd.kind, "metadata": meta}
        )
        # Only "spec is required" may be reported for an otherwise empty object.
        assert errors in ([], ["<root>: 'spec' is a required property"]), (
            crd.kind,
            errors,
        )


def test_validation_is_fast_when_warm():
    objects = [
        role(),
        oidc_provider(url="https://x"),
        composition({"pipeline": PIPELINE}),
    ]
    for obj in objects:
        ks.validate(obj)  # warm-up: compile schemas and rules
    start = time.perf_counter()
    rounds = 100
    for _ in range(rounds):
        for obj in objects:
            ks.validate(obj)
    per_object_ms = (time.perf_counter() - start) * 1000 / (rounds * len(objects))
    assert per_object_ms < 10, f"{per_object_ms:.2f} ms per object"


# ------------------------------------------------------------------------------------
# the vendored fixtures are unmodified (checksums recorded in PROVENANCE.md)
# ------------------------------------------------------------------------------------


def test_vendored_crds_match_provenance_checksums():
    provenance = (ks.CRD_DIR / "PROVENANCE.md").read_text()
    recorded = dict(
        re.findall(r"^\| `([^`]+\.yaml)`.*\| `([0-9a-f]{16})` \|$", provenance, re.M)
    )
    vendored = sorted(
        p.relative_to(ks.CRD_DIR).as_posix() for p in ks.CRD_DIR.glob("*/*.yaml")
    )
    assert vendored == sorted(recorded)
    for rel in vendored:
        digest = hashlib.sha256((ks.CRD_DIR / rel).read_bytes()).hexdigest()[:16]
        assert digest == recorded[rel], f"{rel} was modified"


@pytest.mark.parametrize(("folder", "count"), [(ks.CHART_DIR, 11), (ks.OLDER_CHART_DIR, 6)])
def test_vendored_chart_packages_match_their_checksums(folder, count):
    """SHA256SUMS lists every package (and only them), PROVENANCE.md names each one."""
    sums = (folder / "SHA256SUMS").read_text()
    recorded = {name: digest for digest, name in (line.split("  ") for line in sums.splitlines())}
    packages = sorted(p.name for p in folder.glob("*.tgz"))
    assert sorted(recorded) == packages
    assert len(packages) == count
    provenance = (folder / "PROVENANCE.md").read_text()
    assert sorted(re.findall(r"^\| ([^ |]+\.tgz) \|", provenance, re.M)) == packages
    for name in packages:
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert digest == recorded[name], f"{name} was modified"


def test_xr_status_guard_fails_on_what_the_xrd_would_prune_or_refuse() -> None:
    status = {
        "issuerURL": "https://x",
        "roleARNs": {"ebs": "arn:aws:iam::1:role/a"},
        "plugins": [{"name": "ebs-csi", "phase": "Ready"}],
        "clusterDeletion": {"name": "demo", "uid": "u", "phase": "Gone"},
        "conditions": [{"type": "Ready", "status": "True"}],  # Crossplane's, not ours
    }
    for kind in ("ClusterPlugin", "XClusterPlugin"):
        assert ks.xr_status_errors(kind, status) == []
        unknown_role = {**status, "roleARNs": {"cilium": "arn:aws:iam::1:role/c"}}
        assert ks.xr_status_errors(kind, unknown_role)
        bad_phase = {**status, "plugins": [{"name": "ebs-csi", "phase": "Done"}]}
        assert ks.xr_status_errors(kind, bad_phase)
