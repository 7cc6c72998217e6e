"""The console's view of a cluster's security: SCRAM users and ACLs, through confluent-kafka's AdminClient.

Invariants: only public Kafka APIs (DescribeUserScramCredentials, AlterUserScramCredentials,
DescribeAcls, CreateAcls, DeleteAcls), so it works against any Kafka; a password never leaves this module
except inside librdkafka's ``alter_user_scram_credentials``, which salts it on the client (the broker
stores only the salted keys, as ``kafka-configs --add-config SCRAM-SHA-256=[password=...]`` does); a
cluster without an authorizer answers the ACL calls with SECURITY_DISABLED, which is
:class:`SecurityDisabledError` here (a page says so instead of failing) -- confluent-kafka's
``describe_acls`` drops the response's error and answers an empty list, so an empty answer is checked
with one DescribeAcls of the console's own (:mod:`tidelog.console.wire`), which also tells a refusal
(CLUSTER_AUTHORIZATION_FAILED) from an empty list; every call is bounded by the
gateway's timeout and blocks (the web layer runs it in a worker thread).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from tidelog.console.kafka import BadRequestError, ConsoleError, error_text
from tidelog.console.wire import wire_connection, wire_security
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import DescribeAclsRequest, DescribeAclsResponse

__all__ = [
    "MECHANISMS",
    "OPERATIONS",
    "PATTERN_TYPES",
    "PERMISSIONS",
    "RESOURCE_TYPES",
    "AclFilter",
    "AclView",
    "ScramUserView",
    "SecurityAdmin",
    "SecurityDisabledError",
    "acl_binding",
]

MECHANISMS: Final = {
    "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
    "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
}
RESOURCE_TYPES: Final = {
    "TOPIC": ResourceType.TOPIC,
    "GROUP": ResourceType.GROUP,
    "CLUSTER": ResourceType.BROKER,  # librdkafka's name for Kafka's CLUSTER (4)
    "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
}
PATTERN_TYPES: Final = {"LITERAL": ResourcePatternType.LITERAL, "PREFIXED": ResourcePatternType.PREFIXED}
OPERATIONS: Final = {op.name: op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
PERMISSIONS: Final = {"ALLOW": AclPermissionType.ALLOW, "DENY": AclPermissionType.DENY}
DEFAULT_ITERATIONS: Final = 8192  # Kafka's tools' default is 4096; tidelog users add uses 8192


class SecurityDisabledError(ConsoleError):
    """The cluster has no authorizer (SECURITY_DISABLED): there are no ACLs to show or change."""


@dataclass(frozen=True)
class ScramUserView:
    user: str
    mechanisms: tuple[tuple[str, int], ...]  # (mechanism, iterations)


@dataclass(frozen=True, order=True)
class AclView:
    principal: str
    host: str
    resource_type: str
    name: str
    pattern_type: str
    operation: str
    permission: str


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter from a form: empty fields match anything."""

    principal: str = ""
    resource_type: str = ""
    name: str = ""
    pattern_type: str = ""

    def binding_filter(self) -> AclBindingFilter:
        filter_: Any = AclBindingFilter  # None matches anything (the stubs say str)
        result: AclBindingFilter = filter_(
            RESOURCE_TYPES[self.resource_type] if self.resource_type else ResourceType.ANY,
            self.name or None,
            PATTERN_TYPES[self.pattern_type] if self.pattern_type else ResourcePatternType.ANY,
            self.principal or None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        return result


def _type_name(value: ResourceType) -> str:
    return "CLUSTER" if value == ResourceType.BROKER else value.name


def _view(binding: Any) -> AclView:  # an AclBinding, whose fields the stubs type loosely
    return AclView(
        principal=binding.principal,
        host=binding.host,
        resource_type=_type_name(binding.restype),
        name=binding.name,
        pattern_type=binding.resource_pattern_type.name,
        operation=binding.operation.name,
        permission=binding.permission_type.name,
    )


def acl_binding(acl: AclView) -> AclBinding:
    """The binding of a complete ACL (every field named), checked as a form's input."""
    for label, value, choices in (
        ("resource type", acl.resource_type, RESOURCE_TYPES),
        ("pattern type", acl.pattern_type, PATTERN_TYPES),
        ("operation", acl.operation, OPERATIONS),
        ("permission", acl.permission, PERMISSIONS),
    ):
        if value not in choices:
            raise BadRequestError(f"{value!r} is not a {label} ({', '.join(choices)})")
    if ":" not in acl.principal or not acl.principal.split(":", 1)[1]:
        raise BadRequestError(f"{acl.principal!r} is not a principal: write it as User:name")
    if not acl.name:
        raise BadRequestError("name the resource (kafka-cluster for CLUSTER, * for every one)")
    return AclBinding(
        RESOURCE_TYPES[acl.resource_type],
        acl.name,
        PATTERN_TYPES[acl.pattern_type],
        acl.principal,
        acl.host or "*",
        OPERATIONS[acl.operation],
        PERMISSIONS[acl.permission],
    )


class SecurityAdmin:
    """SCRAM users and ACLs of the cluster ``admin`` talks to (see the module invariants)."""

    def __init__(self, admin: AdminClient, timeout: float, settings: Mapping[str, object]) -> None:
        self.admin = admin
        self.timeout = timeout
        self.settings = settings

    # -- SCRAM users ----------------------------------------------------------------------------------

    def users(self) -> list[ScramUserView]:
        described = self._wait(self.admin.describe_user_scram_credentials(request_timeout=self.timeout))
        return [
            ScramUserView(
                user,
                tuple(
                    sorted(
                        (MECHANISM_NAMES.get(info.mechanism, str(info.mechanism)), int(info.iterations))
                        for info in description.scram_credential_infos
                    )
                ),
            )
            for user, description in sorted(described.items())
        ]

    def upsert_user(
        self, user: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
    ) -> None:
        """Set ``user``'s ``mechanism`` credential; librdkafka salts ``password`` before it is sent."""
        if not user:
            raise BadRequestError("name the user")
        if mechanism not in MECHANISMS:
            raise BadRequestError(f"{mechanism!r} is not a SCRAM mechanism ({', '.join(MECHANISMS)})")
        if not password:
            raise BadRequestError("the password is empty")
        if not 4096 <= iterations <= 16384:
            raise BadRequestError("iterations must be between 4096 and 16384 (Kafka's bounds)")
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(MECHANISMS[mechanism], iterations), password.encode()
        )
        self._wait(self.admin.alter_user_scram_credentials([upsert], request_timeout=self.timeout)[user])

    def delete_user(self, user: str) -> list[str]:
        """Delete every SCRAM credential of ``user``; the mechanisms deleted."""
        current = {u.user: u for u in self.users()}.get(user)
        if current is None:
            raise BadRequestError(f"{user!r} has no SCRAM credentials")
        mechanisms = [m for m, _ in current.mechanisms if m in MECHANISMS]
        deletions: list[UserScramCredentialAlteration] = [
            UserScramCredentialDeletion(user, MECHANISMS[m]) for m in mechanisms
        ]
        self._wait(self.admin.alter_user_scram_credentials(deletions, request_timeout=self.timeout)[user])
        return mechanisms

    # -- ACLs -----------------------------------------------------------------------------------------

    def acls(self, where: AclFilter) -> list[AclView]:
        bindings = self._wait(self.admin.describe_acls(where.binding_filter(), request_timeout=self.timeout))
        if not bindings:
            self._check_authorizer()
        return sorted(_view(b) for b in bindings or [])

    def _check_authorizer(self) -> None:
        """Raise :class:`SecurityDisabledError` when a broker answers DescribeAcls with SECURITY_DISABLED."""
        try:
            brokers = self.admin.list_topics(timeout=self.timeout).brokers
        except KafkaException as exc:
            raise ConsoleError(error_text(exc)) from exc
        if not brokers:
            return
        broker = brokers[min(brokers)]
        any_ = 1  # ANY of Kafka's resource, pattern, operation and permission types
        request = DescribeAclsRequest(
            resource_type_filter=any_,
            resource_name_filter=None,
            pattern_type_filter=any_,
            principal_filter=None,
            host_filter=None,
            operation=any_,
            permission_type=any_,
        )
        security = wire_security(self.settings)
        with wire_connection(str(broker.host), int(broker.port), self.timeout, security) as connection:
            response = connection.call(request, expect=DescribeAclsResponse)
        if response.error_code == ErrorCode.SECURITY_DISABLED:
            raise SecurityDisabledError(response.error_message or "No Authorizer is configured on the broker")
        if response.error_code != ErrorCode.NONE:  # e.g. no DESCRIBE on the cluster: not "no ACLs"
            name = ErrorCode(response.error_code).name
            raise ConsoleError(
                f"DescribeAcls: {name}" + (f": {response.error_message}" if response.error_message else "")
            )

    def create_acl(self, acl: AclView) -> None:
        binding = acl_binding(acl)
        self._wait(self.admin.create_acls([binding], request_timeout=self.timeout)[binding])

    def delete_acl(self, acl: AclView) -> int:
        """Delete exactly ``acl`` (every field named); how many bindings the cluster deleted."""
        binding = acl_binding(acl)
        exact = AclBindingFilter(
            binding.restype,
            binding.name,
            binding.resource_pattern_type,
            binding.principal,
            binding.host,
            binding.operation,
            binding.permission_type,
        )
        deleted = self._wait(self.admin.delete_acls([exact], request_timeout=self.timeout)[exact])
        return len(deleted or [])

    def _wait(self, future: Any) -> Any:
        try:
            return future.result(self.timeout)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.SECURITY_DISABLED:
                raise SecurityDisabledError(error_text(exc)) from exc
            raise ConsoleError(error_text(exc)) from exc
        except TimeoutError as exc:
            raise ConsoleError(f"no answer within {self.timeout:g} s") from exc


MECHANISM_NAMES: Final = {mechanism: name for name, mechanism in MECHANISMS.items()}
