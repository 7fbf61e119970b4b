"""``aws provider-policy``: the provider's IAM policy is sufficient and tight.

Sufficient and tight are checked with moto's IAM enforcement, on a second moto
server (module-scoped) that no other test shares: admin calls set up a user
holding ONLY the generated policy, then enforcement is switched on
(``/moto-api/reset-auth``, moto's runtime form of INITIAL_NO_AUTH_ACTION_COUNT)
and every call is made with that user's keys.

What moto 5.2 enforces here, and what it does not:

- S3 (bucket and object calls): enforced natively against the bucket or
  ``bucket/key`` ARN. Action names are moto's own for a few calls; the test
  server maps them to the real IAM names (tests/aws_helpers.py, patch 3), so
  e.g. PutBucketOwnershipControls is checked as s3:PutBucketOwnershipControls,
  not s3:CreateBucket.
- IAM calls naming an existing role (GetRole, TagRole, AttachRolePolicy,
  UpdateAssumeRolePolicy, DeleteRole...): enforced natively against the role ARN.
- IAM CreateRole, CreatePolicy, the OIDC-provider calls, calls by PolicyArn,
  and EC2 AuthorizeSecurityGroupIngress / RevokeSecurityGroupIngress /
  ModifySecurityGroupRules / CreateTags / DeleteTags: moto would evaluate them
  against ``"*"`` (denying any resource-scoped grant); the test server supplies
  the ARN AWS evaluates (patch 4), then moto's evaluator decides.
- iam:ListOpenIDConnectProviders, ec2:Describe*: enforced (Resource ``*``).
- NOT enforced: Condition blocks of identity policies. moto passes no request
  context, so the ``iam:PolicyARN`` condition on Attach/DetachRolePolicy is
  ignored (attaching AdministratorAccess would pass in moto). It is checked
  statically below. EC2's implicit CreateTags on tag-on-create is not evaluated.
- sts:GetCallerIdentity is always allowed (as in AWS).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError
from click.testing import CliRunner

from function.names import CLUSTER_TAG, IAM_PATH, PARTITIONS, Names
from function.policies import DISCOVERY_KEY, JWKS_KEY
from function_tools.aws.checks import Clients
from function_tools.aws.provider_policy import UNSCOPED_ACTIONS, CloudFrontHosting, provider_policy
from function_tools.aws.target import Target
from function_tools.commands.aws import aws
from tests import aws_helpers as h

DENIED = {"AccessDenied", "AccessDeniedException", "403", "UnauthorizedOperation"}


@pytest.fixture(scope="module")
def server() -> Iterator[h.MotoServer]:
    srv = h.MotoServer()
    yield srv
    srv.stop()


@dataclass
class InMemoryCrossplane:
    user: Clients
    target: Target
    network: h.Network
    foreign_role: str
    foreign_bucket: str


def _setup(
    server: h.MotoServer,
    policy: dict[str, Any] | Callable[[Clients], dict[str, Any]],
    *,
    name_prefix: str = "",
    example: str = "selfhosted-full",
    mutate_xr: Any = None,
) -> InMemoryCrossplane:
    """Admin setup, then a user holding only ``policy``, then enforcement on.

    ``policy`` may be made from the admin's clients, once the rest of the setup exists.
    """
    server.reset()
    admin = h.make_clients(server.endpoint)
    if callable(policy):
        policy = policy(admin)
    network = h.make_network(admin.ec2)
    admin.iam.create_role(
        RoleName="someone-elses-role",
        Path="/",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )
    admin.s3.create_bucket(Bucket="someone-elses-bucket")
    # A customer-managed policy, as docs/aws.md says (an inline user policy is capped at 2 KB).
    arn = admin.iam.create_policy(
        PolicyName="crossplane-provider", PolicyDocument=json.dumps(policy)
    )["Policy"]["Arn"]
    admin.iam.create_user(UserName="crossplane-provider")
    admin.iam.attach_user_policy(UserName="crossplane-provider", PolicyArn=arn)
    key = admin.iam.create_access_key(UserName="crossplane-provider")["AccessKey"]
    step = {"namePrefix": name_prefix} if name_prefix else None
    target = h.target_of(example, network.groups, step_input=step, mutate_xr=mutate_xr)
    server.enforce_iam()
    creds = {
        "aws_access_key_id": key["AccessKeyId"],
        "aws_secret_access_key": key["SecretAccessKey"],
    }
    return InMemoryCrossplane(
        h.make_clients(server.endpoint, creds),
        target,
        network,
        "someone-elses-role",
        "someone-elses-bucket",
    )


def _code(err: ClientError) -> str:
    # moto's denials of REST-XML services (CloudFront, Route 53) carry no error code that
    # botocore can parse: only their HTTP status says it.
    code = err.response.get("Error", {}).get("Code")
    return str(code or err.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


class Calls:
    """Runs calls, recording which were denied and which failed otherwise."""

    def __init__(self) -> None:
        self.denied: list[str] = []
        self.allowed: list[str] = []

    def __call__(self, label: str, fn: Callable[[], Any]) -> Any:
        try:
            out = fn()
        except ClientError as err:
            if _code(err) in DENIED:
                self.denied.append(f"{label}: {_code(err)}")
                return None
            # Authorised, but the resource is not there (NoSuchCORSConfiguration...).
            self.allowed.append(label)
            return None
        self.allowed.append(label)
        return out


def test_policy_lets_the_provider_manage_everything_the_function_composes(
    server: h.MotoServer,
) -> None:
    w = _setup(server, provider_policy(account_id=h.ACCOUNT))
    user, target = w.user, w.target
    # Create: exactly the calls that make the selfhosted-full example's resources.
    composed = h.compose(user, target, public_pem=h.example_public_key())
    assert set(composed.roles) == {"vpc-cni", "ebs-csi", "efs-csi", "lbc"}

    call = Calls()
    bucket = target.names.bucket
    s3, iam, ec2 = user.s3, user.iam, user.ec2
    node, cp = w.network.groups["node"], w.network.groups["controlplane"]
    lbc_need = next(n for n in target.accepted.port_needs if n.purpose == "lbc-webhook")
    rule = call(
        "ec2:AuthorizeSecurityGroupIngress",
        lambda: ec2.authorize_security_group_ingress(
            GroupId=node,
            IpPermissions=[h.ingress_permission(lbc_need, cp)],
            TagSpecifications=[
                {
                    "ResourceType": "security-group-rule",
                    "Tags": [{"Key": CLUSTER_TAG, "Value": target.owner_tag}],
                }
            ],
        ),
    )
    assert rule is not None, call.denied
    rule_id = rule["SecurityGroupRules"][0]["SecurityGroupRuleId"]

    # Refresh: what the Terraform provider reads on every observe.
    for label, fn in {
        "s3:ListBucket (HeadBucket)": lambda: s3.head_bucket(Bucket=bucket),
        "s3:GetBucketLocation": lambda: s3.get_bucket_location(Bucket=bucket),
        "s3:GetBucketTagging": lambda: s3.get_bucket_tagging(Bucket=bucket),
        "s3:GetBucketPolicy": lambda: s3.get_bucket_policy(Bucket=bucket),
        "s3:GetBucketAcl": lambda: s3.get_bucket_acl(Bucket=bucket),
        "s3:GetBucketCORS": lambda: s3.get_bucket_cors(Bucket=bucket),
        "s3:GetBucketWebsite": lambda: s3.get_bucket_website(Bucket=bucket),
        "s3:GetBucketVersioning": lambda: s3.get_bucket_versioning(Bucket=bucket),
        "s3:GetAccelerateConfiguration": lambda: s3.get_bucket_accelerate_configuration(
            Bucket=bucket
        ),
        "s3:GetBucketRequestPayment": lambda: s3.get_bucket_request_payment(Bucket=bucket),
        "s3:GetBucketLogging": lambda: s3.get_bucket_logging(Bucket=bucket),
        "s3:GetLifecycleConfiguration": lambda: s3.get_bucket_lifecycle_configuration(
            Bucket=bucket
        ),
        "s3:GetReplicationConfiguration": lambda: s3.get_bucket_replication(Bucket=bucket),
        "s3:GetEncryptionConfiguration": lambda: s3.get_bucket_encryption(Bucket=bucket),
        "s3:GetBucketObjectLockConfiguration": lambda: s3.get_object_lock_configuration(
            Bucket=bucket
        ),
        "s3:GetBucketOwnershipControls": lambda: s3.get_bucket_ownership_controls(Bucket=bucket),
        "s3:GetBucketPublicAccessBlock": lambda: s3.get_public_access_block(Bucket=bucket),
        "s3:GetObject (HeadObject)": lambda: s3.head_object(Bucket=bucket, Key=JWKS_KEY),
        "s3:GetObject": lambda: s3.get_object(Bucket=bucket, Key=DISCOVERY_KEY),
        "s3:GetObjectTagging": lambda: s3.get_object_tagging(Bucket=bucket, Key=JWKS_KEY),
        "iam:ListOpenIDConnectProviders": iam.list_open_id_connect_providers,
        "iam:GetOpenIDConnectProvider": lambda: iam.get_open_id_connect_provider(
            OpenIDConnectProviderArn=composed.provider_arn
        ),
        "iam:GetPolicy": lambda: iam.get_policy(PolicyArn=composed.lbc_policy_arn),
        "iam:GetPolicyVersion": lambda: iam.get_policy_version(
            PolicyArn=composed.lbc_policy_arn, VersionId="v1"
        ),
        "iam:ListPolicyVersions": lambda: iam.list_policy_versions(
            PolicyArn=composed.lbc_policy_arn
        ),
        "ec2:DescribeSecurityGroupRules": lambda: ec2.describe_security_group_rules(
            SecurityGroupRuleIds=[rule_id]
        ),
        "ec2:DescribeSecurityGroups": lambda: ec2.describe_security_groups(GroupIds=[node]),
    }.items():
        call(label, fn)
    for role in composed.roles.values():
        call("iam:GetRole", lambda role=role: iam.get_role(RoleName=role))
        call(
            "iam:ListAttachedRolePolicies",
            lambda role=role: iam.list_attached_role_policies(RoleName=role),
        )
        call("iam:ListRolePolicies", lambda role=role: iam.list_role_policies(RoleName=role))
        call(
            "iam:ListInstanceProfilesForRole",
            lambda role=role: iam.list_instance_profiles_for_role(RoleName=role),
        )

    # Update: tags, trust policy, documents, provider thumbprints, rule tags.
    vpc_role = composed.roles["vpc-cni"]
    tag = [{"Key": "clusterplugin.dev/addon", "Value": "vpc-cni"}]
    call("iam:TagRole", lambda: iam.tag_role(RoleName=vpc_role, Tags=tag))
    call(
        "iam:UntagRole",
        lambda: iam.untag_role(RoleName=vpc_role, TagKeys=["clusterplugin.dev/addon"]),
    )
    trust = json.dumps(iam.get_role(RoleName=vpc_role)["Role"]["AssumeRolePolicyDocument"])
    call(
        "iam:UpdateAssumeRolePolicy",
        lambda: iam.update_assume_role_policy(RoleName=vpc_role, PolicyDocument=trust),
    )
    call(
        "iam:UpdateRoleDescription",
        lambda: iam.update_role_description(RoleName=vpc_role, Description="x"),
    )
    call("iam:TagPolicy", lambda: iam.tag_policy(PolicyArn=composed.lbc_policy_arn, Tags=tag))
    call(
        "iam:CreatePolicyVersion",
        lambda: iam.create_policy_version(
            PolicyArn=composed.lbc_policy_arn,
            PolicyDocument=json.dumps(
                iam.get_policy_version(PolicyArn=composed.lbc_policy_arn, VersionId="v1")[
                    "PolicyVersion"
                ]["Document"]
            ),
            SetAsDefault=True,
        ),
    )
    call(
        "iam:DeletePolicyVersion",
        lambda: iam.delete_policy_version(PolicyArn=composed.lbc_policy_arn, VersionId="v1"),
    )
    call(
        "iam:TagOpenIDConnectProvider",
        lambda: iam.tag_open_id_connect_provider(
            OpenIDConnectProviderArn=composed.provider_arn, Tags=tag
        ),
    )
    call(
        "iam:UpdateOpenIDConnectProviderThumbprint",
        lambda: iam.update_open_id_connect_provider_thumbprint(
            OpenIDConnectProviderArn=composed.provider_arn,
            ThumbprintList=["9e99a48a9960b14926bb7f3b02e22da2b0ab7280"],
        ),
    )
    call(
        "s3:PutObjectTagging",
        lambda: s3.put_object_tagging(
            Bucket=bucket,
            Key=JWKS_KEY,
            Tagging={"TagSet": [{"Key": CLUSTER_TAG, "Value": target.owner_tag}]},
        ),
    )
    call(
        "s3:PutBucketTagging", lambda: s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tag})
    )
    call("ec2:CreateTags (rule)", lambda: ec2.create_tags(Resources=[rule_id], Tags=tag))
    call("ec2:DeleteTags (rule)", lambda: ec2.delete_tags(Resources=[rule_id], Tags=tag))

    # Delete, in Crossplane's Usage order: attachments and roles, policy, provider, objects, bucket.
    for addon, role in composed.roles.items():
        for arn in [
            p["PolicyArn"]
            for p in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]
        ]:
            call(
                "iam:DetachRolePolicy",
                lambda role=role, arn=arn: iam.detach_role_policy(RoleName=role, PolicyArn=arn),
            )
        call(f"iam:DeleteRole {addon}", lambda role=role: iam.delete_role(RoleName=role))
    call("iam:DeletePolicy", lambda: iam.delete_policy(PolicyArn=composed.lbc_policy_arn))
    call(
        "iam:DeleteOpenIDConnectProvider",
        lambda: iam.delete_open_id_connect_provider(OpenIDConnectProviderArn=composed.provider_arn),
    )
    for key in (DISCOVERY_KEY, JWKS_KEY):
        call("s3:DeleteObject", lambda key=key: s3.delete_object(Bucket=bucket, Key=key))
    call("s3:DeleteBucketPolicy", lambda: s3.delete_bucket_policy(Bucket=bucket))
    call(
        "s3:PutBucketPublicAccessBlock (delete)",
        lambda: s3.delete_public_access_block(Bucket=bucket),
    )
    call(
        "s3:PutBucketOwnershipControls (delete)",
        lambda: s3.delete_bucket_ownership_controls(Bucket=bucket),
    )
    call("s3:DeleteBucket", lambda: s3.delete_bucket(Bucket=bucket))
    call(
        "ec2:RevokeSecurityGroupIngress",
        lambda: ec2.revoke_security_group_ingress(GroupId=node, SecurityGroupRuleIds=[rule_id]),
    )
    assert call.denied == [], f"the provider policy lacks permissions for: {call.denied}"
    assert len(call.allowed) > 50


def _denied(fn: Callable[[], Any]) -> str:
    with pytest.raises(ClientError) as exc:
        fn()
    return _code(exc.value)


def test_policy_lets_the_provider_manage_the_external_dns_policy_and_role(
    server: h.MotoServer,
) -> None:
    """external-dns adds an IAM Policy, Role and attachment under /clusterplugin/, as the LBC does:
    the provider policy needs no new action for them, which this shows under enforcement."""
    w = _setup(server, provider_policy(account_id=h.ACCOUNT), example="external-dns")
    composed = h.compose(w.user, w.target, public_pem=h.example_public_key())  # creates: allowed
    assert set(composed.roles) == {"vpc-cni", "lbc", "external-dns"}
    iam, call = w.user.iam, Calls()
    role, policy = composed.roles["external-dns"], composed.policy_arns["external-dns"]
    tag = [{"Key": "clusterplugin.dev/addon", "Value": "external-dns"}]
    document = iam.get_policy_version(PolicyArn=policy, VersionId="v1")["PolicyVersion"]["Document"]
    for label, fn in {
        "iam:GetPolicy": lambda: iam.get_policy(PolicyArn=policy),
        "iam:ListPolicyVersions": lambda: iam.list_policy_versions(PolicyArn=policy),
        "iam:ListPolicyTags": lambda: iam.list_policy_tags(PolicyArn=policy),
        "iam:TagPolicy": lambda: iam.tag_policy(PolicyArn=policy, Tags=tag),
        "iam:UntagPolicy": lambda: iam.untag_policy(PolicyArn=policy, TagKeys=["clusterplugin.dev/addon"]),
        # A changed hostedZoneIDs list is a new default version of the document.
        "iam:CreatePolicyVersion": lambda: iam.create_policy_version(
            PolicyArn=policy, PolicyDocument=json.dumps(document), SetAsDefault=True
        ),
        "iam:DeletePolicyVersion": lambda: iam.delete_policy_version(PolicyArn=policy, VersionId="v1"),
        "iam:GetRole": lambda: iam.get_role(RoleName=role),
        "iam:ListAttachedRolePolicies": lambda: iam.list_attached_role_policies(RoleName=role),
        "iam:ListRolePolicies": lambda: iam.list_role_policies(RoleName=role),
        "iam:ListInstanceProfilesForRole": lambda: iam.list_instance_profiles_for_role(RoleName=role),
        "iam:TagRole": lambda: iam.tag_role(RoleName=role, Tags=tag),
        "iam:UpdateAssumeRolePolicy": lambda: iam.update_assume_role_policy(
            RoleName=role,
            PolicyDocument=json.dumps(iam.get_role(RoleName=role)["Role"]["AssumeRolePolicyDocument"]),
        ),
        "iam:DetachRolePolicy": lambda: iam.detach_role_policy(RoleName=role, PolicyArn=policy),
        "iam:DeleteRole": lambda: iam.delete_role(RoleName=role),
        "iam:DeletePolicy": lambda: iam.delete_policy(PolicyArn=policy),
    }.items():
        call(label, fn)
    assert call.denied == [], f"the provider policy lacks permissions for: {call.denied}"
    assert len(call.allowed) == 16
    # The same calls on another team's policy of that name outside the path stay denied.
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    assert _denied(
        lambda: iam.create_role(RoleName=role, Path="/", AssumeRolePolicyDocument=trust)
    ) in DENIED


def test_policy_denies_everything_outside_the_function_s_resources(server: h.MotoServer) -> None:
    w = _setup(server, provider_policy(account_id=h.ACCOUNT))
    s3, iam, ec2 = w.user.s3, w.user.iam, w.user.ec2
    bucket = w.target.names.bucket
    s3.create_bucket(Bucket=bucket)  # ours: allowed
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    node = w.network.groups["node"]
    cases: dict[str, Callable[[], Any]] = {
        "CreateBucket outside the prefix": lambda: s3.create_bucket(Bucket="not-an-issuer-bucket"),
        "PutBucketPolicy on another bucket": lambda: s3.put_bucket_policy(
            Bucket=w.foreign_bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": []})
        ),
        "DeleteBucket on another bucket": lambda: s3.delete_bucket(Bucket=w.foreign_bucket),
        "PutObject under another key": lambda: s3.put_object(
            Bucket=bucket, Key="index.html", Body=b"x"
        ),
        "PutBucketAcl (not granted)": lambda: s3.put_bucket_acl(Bucket=bucket, ACL="public-read"),
        "CreateRole outside /clusterplugin/": lambda: iam.create_role(
            RoleName="escalate", Path="/", AssumeRolePolicyDocument=trust
        ),
        "TagRole on a role outside the path": lambda: iam.tag_role(
            RoleName=w.foreign_role, Tags=[{"Key": "k", "Value": "v"}]
        ),
        "AttachRolePolicy on a role outside the path": lambda: iam.attach_role_policy(
            RoleName=w.foreign_role, PolicyArn="arn:aws:iam::aws:policy/AdministratorAccess"
        ),
        "UpdateAssumeRolePolicy on a role outside the path": lambda: iam.update_assume_role_policy(
            RoleName=w.foreign_role, PolicyDocument=trust
        ),
        "CreatePolicy outside the path": lambda: iam.create_policy(
            PolicyName="escalate",
            Path="/",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        ),
        "CreateOpenIDConnectProvider for another issuer": lambda: (
            iam.create_open_id_connect_provider(
                Url="https://token.actions.githubusercontent.com",
                ClientIDList=["sts.amazonaws.com"],
            )
        ),
        "CreateUser (not granted)": lambda: iam.create_user(UserName="backdoor"),
        "CreateSecurityGroup (not granted)": lambda: ec2.create_security_group(
            GroupName="x", Description="x", VpcId=w.network.vpc
        ),
        "CreateTags on a security group (only rules)": lambda: ec2.create_tags(
            Resources=[node], Tags=[{"Key": "k", "Value": "v"}]
        ),
        "AuthorizeSecurityGroupEgress (not granted)": lambda: ec2.authorize_security_group_egress(
            GroupId=node,
            IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}],
        ),
    }
    got = {label: _denied(fn) for label, fn in cases.items()}
    assert {label: code for label, code in got.items() if code not in DENIED} == {}


def test_name_prefix_scopes_buckets_roles_and_policies(server: h.MotoServer) -> None:
    w = _setup(
        server,
        provider_policy(bucket_prefix="acme-irsa-", role_prefix="acme-", account_id=h.ACCOUNT),
        name_prefix="acme-",
    )
    assert w.target.names.bucket.startswith("acme-irsa-")
    h.compose(w.user, w.target, public_pem=h.example_public_key())  # acme-* names: allowed
    # The unprefixed names another ClusterPlugin (another team's input) would derive: denied.
    plain = Names("", w.target.namespace, w.target.cluster)
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    assert _denied(lambda: w.user.s3.create_bucket(Bucket=plain.bucket)) in DENIED
    assert (
        _denied(
            lambda: w.user.iam.create_role(
                RoleName=plain.role("vpc-cni"), Path=IAM_PATH, AssumeRolePolicyDocument=trust
            )
        )
        in DENIED
    )


# --- static checks: lint-ish, and what moto cannot evaluate --------------------------------


def _statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return policy["Statement"]


def _allows(policy: dict[str, Any], action: str, resource: str) -> bool:
    """Whether some statement's Action and Resource patterns match (IAM wildcards; no conditions)."""
    for st in _statements(policy):
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if any(fnmatch.fnmatchcase(action, a) for a in actions) and any(
            fnmatch.fnmatchcase(resource, r) for r in resources
        ):
            return True
    return False


@pytest.mark.parametrize("partition", sorted(PARTITIONS))
def test_policy_has_no_wildcard_actions_and_scopes_every_resource_it_can(partition: str) -> None:
    policy = provider_policy(partition=partition)
    seen: list[str] = []
    for st in _statements(policy):
        assert st["Effect"] == "Allow"
        assert not {"NotAction", "NotResource", "Principal"} & set(st)
        actions = st["Action"]
        for a in actions:
            service, _, name = a.partition(":")
            assert service in {"s3", "iam", "ec2"} and name, a
            assert "*" not in a and "?" not in a, f"wildcard action {a}"
        seen += actions
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if "*" in resources:
            # Only the calls AWS has no resource-level permissions for.
            assert resources == ["*"]
            assert set(actions) <= set(UNSCOPED_ACTIONS), actions
            assert all(a.split(":")[1].startswith(("List", "Describe")) for a in actions)
        else:
            for r in resources:
                assert r.startswith(f"arn:{partition}:"), r
                # every wildcard sits after a fixed, non-empty prefix of our names
                assert not r.endswith(":*") and "/*/" not in r, r
    assert len(seen) == len(set(seen)), "an action is granted twice"
    for forbidden in (
        "iam:PassRole",
        "iam:CreateUser",
        "iam:PutRolePolicy",
        "iam:CreateAccessKey",
        "s3:PutBucketAcl",
    ):
        assert forbidden not in seen


def test_policy_fits_a_managed_policy() -> None:
    # IAM counts characters without whitespace: managed policies hold 6,144.
    compact = json.dumps(provider_policy(account_id=h.ACCOUNT), separators=(",", ":"))
    assert len(compact) <= 6144


def test_attach_and_detach_are_limited_to_the_addon_policies() -> None:
    """moto ignores conditions in identity policies: check iam:PolicyARN here."""
    for partition in PARTITIONS.values():
        policy = provider_policy(partition=partition.name, account_id=h.ACCOUNT)
        st = next(s for s in _statements(policy) if "iam:AttachRolePolicy" in s["Action"])
        assert set(st["Action"]) == {"iam:AttachRolePolicy", "iam:DetachRolePolicy"}
        allowed = st["Condition"]["ArnLike"]["iam:PolicyARN"]
        assert set(allowed) == {
            f"arn:{partition.name}:iam::aws:policy/AmazonEKS_CNI_Policy",
            f"arn:{partition.name}:iam::aws:policy/AmazonEBSCSIDriverPolicyV2",
            f"arn:{partition.name}:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy",
            f"arn:{partition.name}:iam::{h.ACCOUNT}:policy/clusterplugin/*",
        }
        lbc = f"arn:{partition.name}:iam::{h.ACCOUNT}:policy{IAM_PATH}{Names('', 'team-a', 'demo').policy('lbc')}"
        admin = f"arn:{partition.name}:iam::aws:policy/AdministratorAccess"
        own_elsewhere = f"arn:{partition.name}:iam::{h.ACCOUNT}:policy/escalate"
        assert any(fnmatch.fnmatchcase(lbc, p) for p in allowed)
        assert not any(fnmatch.fnmatchcase(a, p) for a in (admin, own_elsewhere) for p in allowed)


@pytest.mark.parametrize(
    ("prefix", "namespace", "cluster"),
    [
        ("", "team-a", "demo"),
        ("acme-", "team-a", "demo"),
        ("", "a-very-long-namespace-name-for-truncation", "and-an-equally-long-cluster-name-too"),
    ],
)
def test_default_prefixes_cover_every_name_the_function_derives(
    prefix: str, namespace: str, cluster: str
) -> None:
    names = Names(prefix, namespace, cluster)
    for region, partition in (
        ("us-east-1", "aws"),
        ("cn-north-1", "aws-cn"),
        ("us-gov-west-1", "aws-us-gov"),
    ):
        policy = provider_policy(
            bucket_prefix=f"{prefix}irsa-",
            role_prefix=prefix,
            partition=partition,
            account_id=h.ACCOUNT,
        )
        iam = f"arn:{partition}:iam::{h.ACCOUNT}"
        bucket = f"arn:{partition}:s3:::{names.bucket}"
        issuer = names.issuer_url(region).removeprefix("https://")
        wanted = [
            ("s3:CreateBucket", bucket),
            ("s3:PutBucketPolicy", bucket),
            ("s3:PutBucketOwnershipControls", bucket),
            ("s3:PutBucketPublicAccessBlock", bucket),
            ("s3:PutObject", f"{bucket}/{DISCOVERY_KEY}"),
            ("s3:PutObject", f"{bucket}/{JWKS_KEY}"),
            ("iam:CreateOpenIDConnectProvider", f"{iam}:oidc-provider/{issuer}"),
            ("iam:CreatePolicy", f"{iam}:policy{IAM_PATH}{names.policy('lbc')}"),
            ("iam:CreatePolicy", f"{iam}:policy{IAM_PATH}{names.policy('external-dns')}"),
            *[
                ("iam:CreateRole", f"{iam}:role{IAM_PATH}{names.role(a)}")
                for a in ("vpc-cni", "ebs-csi", "efs-csi", "lbc", "external-dns")
            ],
            (
                "ec2:AuthorizeSecurityGroupIngress",
                f"arn:{partition}:ec2:{region}:{h.ACCOUNT}:security-group/sg-0123",
            ),
        ]
        assert [w for w in wanted if not _allows(policy, *w)] == []
        assert not _allows(policy, "iam:CreateRole", f"{iam}:role/{names.role('vpc-cni')}")
        assert not _allows(policy, "s3:PutObject", f"{bucket}/other")


def test_policy_rejects_prefixes_that_would_grant_too_much() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        provider_policy(bucket_prefix="")
    with pytest.raises(ValueError, match="may not contain"):
        provider_policy(bucket_prefix="irsa-*")
    with pytest.raises(ValueError, match="partition"):
        provider_policy(partition="aws-iso")
    with pytest.raises(ValueError, match="12 digits"):
        provider_policy(account_id="12345")


def test_cli_prints_the_policy() -> None:
    result = CliRunner().invoke(
        aws,
        [
            "provider-policy",
            "--name-prefix",
            "acme-",
            "--partition",
            "aws-us-gov",
            "--account-id",
            h.ACCOUNT,
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == provider_policy(
        bucket_prefix="acme-irsa-",
        role_prefix="acme-",
        partition="aws-us-gov",
        account_id=h.ACCOUNT,
    )
    bad = CliRunner().invoke(aws, ["provider-policy", "--bucket-prefix", ""])
    assert bad.exit_code == 2
    assert "must not be empty" in bad.output


def test_managed_policy_arns_exist_in_aws() -> None:
    """Every AWS-managed policy the function attaches exists at that path (moto mirrors AWS's list)."""
    assert h.missing_managed_policies() == []


# --- issuers behind CloudFront -------------------------------------------------------------

SHARED_BUCKET = "acme-oidc-issuers"  # examples/cloudfront-shared
EVERYTHING = CloudFrontHosting(
    domains=("oidc.example.com", "auth-oidc.example.com"),
    shared_buckets=(SHARED_BUCKET,),
    managed=True,
    hosted_zone_ids=("Z0123456789ABCDEFGHIJ",),
)


def test_cloudfront_options_add_nothing_by_default() -> None:
    assert provider_policy() == provider_policy(cloudfront=CloudFrontHosting())
    text = json.dumps(provider_policy())
    assert "cloudfront:" not in text and "route53:" not in text


def test_policy_lets_the_provider_serve_a_shared_distribution(server: h.MotoServer) -> None:
    def policy(admin: Clients) -> dict[str, Any]:
        # The platform team's bucket exists (it is not the XR's).
        admin.s3.create_bucket(Bucket=SHARED_BUCKET)
        admin.s3.create_bucket(Bucket="another-teams-bucket")
        hosting = CloudFrontHosting(domains=("oidc.example.com",), shared_buckets=(SHARED_BUCKET,))
        return provider_policy(account_id=h.ACCOUNT, cloudfront=hosting)

    w = _setup(server, policy, example="cloudfront-shared")
    composed = h.compose(w.user, w.target, public_pem=h.example_public_key())  # creates: allowed
    assert composed.provider_arn.endswith(":oidc-provider/oidc.example.com/team-c/api")
    s3, call = w.user.s3, Calls()
    for key in ("team-c/api/.well-known/openid-configuration", "team-c/api/keys.json"):
        call(f"s3:GetObject {key}", lambda key=key: s3.get_object(Bucket=SHARED_BUCKET, Key=key))
        call(f"s3:GetObjectTagging {key}", lambda key=key: s3.get_object_tagging(Bucket=SHARED_BUCKET, Key=key))
        call(f"s3:DeleteObject {key}", lambda key=key: s3.delete_object(Bucket=SHARED_BUCKET, Key=key))
    assert call.denied == [], call.denied
    iam = w.user.iam
    denied = {
        "a document at the bucket's root": lambda: s3.put_object(Bucket=SHARED_BUCKET, Key="keys.json", Body=b"{}"),
        "another object under the path": lambda: s3.put_object(Bucket=SHARED_BUCKET, Key="team-c/api/index.html", Body=b"x"),
        "another bucket": lambda: s3.put_object(Bucket="another-teams-bucket", Key="team-c/api/keys.json", Body=b"{}"),
        "the bucket's policy": lambda: s3.put_bucket_policy(
            Bucket=SHARED_BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": []})
        ),
        "an OIDC provider of another domain": lambda: iam.create_open_id_connect_provider(
            Url="https://oidc.example.org/team-c/api", ClientIDList=["sts.amazonaws.com"]
        ),
        "a distribution (Shared composes none)": lambda: w.user.cloudfront.list_tags_for_resource(
            Resource=f"arn:aws:cloudfront::{h.ACCOUNT}:distribution/E123"
        ),
    }
    got = {label: _denied(fn) for label, fn in denied.items()}
    assert {label: code for label, code in got.items() if code not in DENIED} == {}


def test_policy_lets_the_provider_manage_a_managed_distribution(server: h.MotoServer) -> None:
    zones: dict[str, str] = {}

    def policy(admin: Clients) -> dict[str, Any]:
        for name in ("example.com", "example.org"):
            zone = admin.route53.create_hosted_zone(Name=name, CallerReference=name)
            zones[name] = zone["HostedZone"]["Id"].removeprefix("/hostedzone/")
        hosting = CloudFrontHosting(
            domains=("auth-oidc.example.com",), managed=True, hosted_zone_ids=(zones["example.com"],)
        )
        return provider_policy(account_id=h.ACCOUNT, cloudfront=hosting)

    def own_zone(xr: dict[str, Any]) -> None:
        xr["spec"]["irsa"]["hosting"]["cloudFront"]["hostedZoneId"] = zones["example.com"]

    w = _setup(server, policy, example="cloudfront-managed", mutate_xr=own_zone)
    composed = h.compose(w.user, w.target, public_pem=h.example_public_key())  # creates: allowed
    assert composed.provider_arn.endswith(":oidc-provider/auth-oidc.example.com")
    cf, r53, call = w.user.cloudfront, w.user.route53, Calls()
    zone = zones["example.com"]
    # What the provider does after creating them: refresh, tag, update, disable, delete.
    assert composed.distribution is not None
    dist_id = composed.distribution.id
    arn = f"arn:aws:cloudfront::{h.ACCOUNT}:distribution/{dist_id}"
    oac = composed.distribution.oac_id
    tag = {"Items": [{"Key": "clusterplugin.dev/addon", "Value": "irsa"}]}
    records = r53.list_resource_record_sets(HostedZoneId=zone)["ResourceRecordSets"]
    alias = next(r for r in records if r["Type"] == "A")
    for label, fn in {
        "cloudfront:GetDistribution": lambda: cf.get_distribution(Id=dist_id),
        "cloudfront:GetDistributionConfig": lambda: cf.get_distribution_config(Id=dist_id),
        "cloudfront:ListTagsForResource": lambda: cf.list_tags_for_resource(Resource=arn),
        "cloudfront:TagResource": lambda: cf.tag_resource(Resource=arn, Tags=tag),
        "cloudfront:UntagResource": lambda: cf.untag_resource(
            Resource=arn, TagKeys={"Items": ["clusterplugin.dev/addon"]}
        ),
        "cloudfront:UpdateDistribution (disable, before deleting)": lambda: _disable(cf, dist_id),
        "cloudfront:GetOriginAccessControl": lambda: cf.get_origin_access_control(Id=oac),
        "route53:GetHostedZone": lambda: r53.get_hosted_zone(Id=zone),
        "route53:ListResourceRecordSets": lambda: r53.list_resource_record_sets(HostedZoneId=zone),
        "route53:ChangeResourceRecordSets (DELETE)": lambda: r53.change_resource_record_sets(
            HostedZoneId=zone, ChangeBatch={"Changes": [{"Action": "DELETE", "ResourceRecordSet": alias}]}
        ),
        "cloudfront:DeleteDistribution": lambda: cf.delete_distribution(
            Id=dist_id, IfMatch=cf.get_distribution(Id=dist_id)["ETag"]
        ),
        "cloudfront:DeleteOriginAccessControl": lambda: cf.delete_origin_access_control(
            Id=oac, IfMatch=cf.get_origin_access_control(Id=oac)["ETag"]
        ),
    }.items():
        call(label, fn)
    assert call.denied == [], f"the provider policy lacks permissions for: {call.denied}"
    other = zones["example.org"]
    denied = {
        "a record in a zone not listed": lambda: r53.change_resource_record_sets(
            HostedZoneId=other,
            ChangeBatch={"Changes": [{"Action": "CREATE", "ResourceRecordSet": {**alias, "Name": "auth-oidc.example.org"}}]},
        ),
        "the records of a zone not listed": lambda: r53.list_resource_record_sets(HostedZoneId=other),
        "an OIDC provider of another domain": lambda: w.user.iam.create_open_id_connect_provider(
            Url="https://oidc.example.org", ClientIDList=["sts.amazonaws.com"]
        ),
        "a CloudFront function (it could rewrite what the issuer serves)": lambda: cf.create_function(
            Name="rewrite",
            FunctionConfig={"Comment": "x", "Runtime": "cloudfront-js-2.0"},
            FunctionCode=b"function handler(event) { return event.request; }",
        ),
    }
    got = {label: _denied(fn) for label, fn in denied.items()}
    assert {label: code for label, code in got.items() if code not in DENIED} == {}


def _disable(cf: Any, dist_id: str) -> Any:
    got = cf.get_distribution_config(Id=dist_id)
    config = {**got["DistributionConfig"], "Enabled": False}
    return cf.update_distribution(Id=dist_id, IfMatch=got["ETag"], DistributionConfig=config)


def test_the_alias_record_grant_is_limited_to_the_issuers_a_records() -> None:
    """moto ignores conditions: the record names and types are checked here."""
    policy = provider_policy(account_id=h.ACCOUNT, cloudfront=EVERYTHING)
    (st,) = [s for s in _statements(policy) if s["Action"] == "route53:ChangeResourceRecordSets"]
    assert st["Resource"] == ["arn:aws:route53:::hostedzone/Z0123456789ABCDEFGHIJ"]
    assert st["Condition"] == {
        "ForAllValues:StringEquals": {
            "route53:ChangeResourceRecordSetsNormalizedRecordNames": [
                "oidc.example.com",
                "auth-oidc.example.com",
            ],
            "route53:ChangeResourceRecordSetsRecordTypes": ["A"],
        }
    }


def test_cloudfront_statements_scope_every_resource_they_can() -> None:
    base = {json.dumps(s, sort_keys=True) for s in _statements(provider_policy(account_id=h.ACCOUNT))}
    added = [
        s
        for s in _statements(provider_policy(account_id=h.ACCOUNT, cloudfront=EVERYTHING))
        if json.dumps(s, sort_keys=True) not in base
    ]
    assert {s["Sid"] for s in added} == {
        "CloudFrontIssuerOIDCProviders",
        "SharedDistributionDocuments",
        "ManagedDistributions",
        "ManagedOriginAccessControls",
        "CreateOriginAccessControls",
        "IssuerAliasRecords",
        "IssuerAliasZones",
        "IssuerAliasChanges",
    }
    for st in added:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        assert all("*" not in a for a in actions)
        assert all(a.split(":")[0] in {"iam", "s3", "cloudfront", "route53"} for a in actions)
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        if resources == ["*"]:
            # Only what AWS cannot scope: creating an origin access control names no resource.
            assert actions == ["cloudfront:CreateOriginAccessControl"]
        for r in resources:
            assert r == "*" or r.startswith("arn:aws:"), r
    grants = provider_policy(account_id=h.ACCOUNT, cloudfront=EVERYTHING)
    assert _allows(grants, "s3:PutObject", f"arn:aws:s3:::{SHARED_BUCKET}/team-c/api/keys.json")
    assert not _allows(grants, "s3:PutObject", f"arn:aws:s3:::{SHARED_BUCKET}/keys.json")
    assert not _allows(grants, "s3:PutBucketPolicy", f"arn:aws:s3:::{SHARED_BUCKET}")
    oidc = f"arn:aws:iam::{h.ACCOUNT}:oidc-provider/"
    assert _allows(grants, "iam:CreateOpenIDConnectProvider", f"{oidc}oidc.example.com/team-c/api")
    assert not _allows(grants, "iam:CreateOpenIDConnectProvider", f"{oidc}oidc.example.community")
    compact = json.dumps(grants, separators=(",", ":"))
    assert len(compact) <= 6144


def test_parliament_finds_nothing_new_in_the_cloudfront_statements() -> None:
    from parliament import analyze_policy_string

    def findings(policy: dict[str, Any]) -> set[tuple[str, str]]:
        return {(f.issue, str(f.detail)) for f in analyze_policy_string(json.dumps(policy)).findings}

    base = findings(provider_policy(account_id=h.ACCOUNT))
    # The issuer buckets' policy is the provider's to write (PutBucketPolicy), by design.
    assert {issue for issue, _ in base} == {"RESOURCE_POLICY_PRIVILEGE_ESCALATION"}
    assert findings(provider_policy(account_id=h.ACCOUNT, cloudfront=EVERYTHING)) == base
    # Control: parliament does read CloudFront grants.
    star = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "cloudfront:DeleteDistribution", "Resource": "*"}]}
    assert any(f.issue == "RESOURCE_STAR" for f in analyze_policy_string(json.dumps(star)).findings)


@pytest.mark.parametrize(
    ("hosting", "partition", "words"),
    [
        (EVERYTHING, "aws-cn", "not supported in aws-cn"),
        (EVERYTHING, "aws-us-gov", "not supported in aws-us-gov"),
        (CloudFrontHosting(managed=True), "aws", "needs the issuers' domains"),
        (CloudFrontHosting(domains=("d.example.com",), hosted_zone_ids=("Z1",)), "aws", "only used by Managed"),
        (CloudFrontHosting(domains=("https://d.example.com",)), "aws", "is not a host name"),
        (CloudFrontHosting(domains=("d.example.com",), shared_buckets=("a*",)), "aws", "shared bucket"),
        (CloudFrontHosting(domains=("d.example.com",), managed=True, hosted_zone_ids=("*",)), "aws", "not a Route 53 zone id"),
    ],
)
def test_cloudfront_options_that_would_grant_too_much_are_refused(
    hosting: CloudFrontHosting, partition: str, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        provider_policy(partition=partition, cloudfront=hosting)


def test_cli_prints_the_cloudfront_statements() -> None:
    r = CliRunner().invoke(
        aws,
        [
            "provider-policy",
            "--issuer-domain", "oidc.example.com",
            "--shared-bucket", SHARED_BUCKET,
            "--managed-distributions",
            "--hosted-zone-id", "Z0123456789ABC",
        ],
    )
    assert r.exit_code == 0, r.output
    sids = {s["Sid"] for s in json.loads(r.stdout)["Statement"]}
    assert {"SharedDistributionDocuments", "ManagedDistributions", "IssuerAliasRecords"} <= sids
    bad = CliRunner().invoke(aws, ["provider-policy", "--managed-distributions"])
    assert bad.exit_code == 2 and "needs the issuers' domains" in bad.output


# --- EKS Pod Identity (spec.irsa.mode PodIdentity) ------------------------------------


def test_eks_options_add_nothing_by_default() -> None:
    text = json.dumps(provider_policy())
    assert "eks:" not in text and "iam:PassRole" not in text


def test_pod_identity_grants_the_clusters_associations_and_passing_the_addon_roles_only() -> None:
    doc = provider_policy(account_id=h.ACCOUNT, role_prefix="acme-", eks_clusters=("prod", "payments_stage"))
    added = [s for s in doc["Statement"] if s not in provider_policy(account_id=h.ACCOUNT, role_prefix="acme-")["Statement"]]
    eks = f"arn:aws:eks:*:{h.ACCOUNT}"
    assert added == [
        {
            "Sid": "PodIdentityAssociationsOfTheClusters",
            "Effect": "Allow",
            "Action": ["eks:CreatePodIdentityAssociation", "eks:ListPodIdentityAssociations"],
            "Resource": [f"{eks}:cluster/prod", f"{eks}:cluster/payments_stage"],
        },
        {
            "Sid": "PodIdentityAssociations",
            "Effect": "Allow",
            "Action": [
                "eks:DescribePodIdentityAssociation",
                "eks:UpdatePodIdentityAssociation",
                "eks:DeletePodIdentityAssociation",
                "eks:TagResource",
                "eks:UntagResource",
                "eks:ListTagsForResource",
            ],
            "Resource": [f"{eks}:podidentityassociation/prod/*", f"{eks}:podidentityassociation/payments_stage/*"],
        },
        {
            # Creating an association passes its role to EKS Pod Identity: the add-on roles
            # (under /clusterplugin/ and the prefix) and to that service only.
            "Sid": "PassAddonRolesToPodIdentity",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": f"arn:aws:iam::{h.ACCOUNT}:role{IAM_PATH}acme-*",
            "Condition": {"StringEquals": {"iam:PassedToService": "pods.eks.amazonaws.com"}},
        },
    ]
    china = provider_policy(partition="aws-cn", eks_clusters=("prod",))
    assert "arn:aws-cn:eks:*:*:cluster/prod" in json.dumps(china)


@pytest.mark.parametrize("name", ["*", "prod*", "prod/x", "", "-prod"])
def test_pod_identity_refuses_a_cluster_name_that_would_grant_more(name: str) -> None:
    with pytest.raises(ValueError, match="is not an EKS cluster name"):
        provider_policy(eks_clusters=(name,))


def test_parliament_finds_nothing_new_in_the_pod_identity_statements() -> None:
    from parliament import analyze_policy_string

    def findings(policy: dict[str, Any]) -> set[tuple[str, str]]:
        return {(f.issue, str(f.detail)) for f in analyze_policy_string(json.dumps(policy)).findings}

    base = findings(provider_policy(account_id=h.ACCOUNT))
    assert findings(provider_policy(account_id=h.ACCOUNT, eks_clusters=("prod",))) == base
    # Control: parliament does flag a PassRole of any role.
    star = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}]}
    assert analyze_policy_string(json.dumps(star)).findings


def test_cli_prints_the_pod_identity_statements() -> None:
    r = CliRunner().invoke(aws, ["provider-policy", "--eks-cluster", "prod"])
    assert r.exit_code == 0, r.output
    sids = {s["Sid"] for s in json.loads(r.stdout)["Statement"]}
    assert {"PodIdentityAssociationsOfTheClusters", "PodIdentityAssociations", "PassAddonRolesToPodIdentity"} <= sids
    bad = CliRunner().invoke(aws, ["provider-policy", "--eks-cluster", "*"])
    assert bad.exit_code == 2 and "is not an EKS cluster name" in bad.output
