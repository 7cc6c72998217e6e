"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Invariants: configs are described with their source (dynamic topic override, dynamic per-broker config,
dynamic cluster default, static broker config, default) and, when asked, Kafka's synonym chain. A BROKER
resource is named by this broker's id (every broker config) or ``""`` (the dynamic cluster defaults only,
as Kafka); any other name is INVALID_REQUEST. An alteration is validated whole before anything is stored,
persisted before the answer, and applied live to the partition logs; ``validate_only`` stores nothing.
AlterConfigs *replaces* a topic's overrides or a broker's dynamic configs (Kafka's semantics);
IncrementalAlterConfigs edits them (SET, DELETE, APPEND, SUBTRACT). Only dynamic broker configs can be
altered (dynamic_config.py): a read-only one is INVALID_REQUEST, an unknown one or a bad value
INVALID_CONFIG, each with a message naming the key.

Authorization (Kafka's): describing needs DESCRIBE_CONFIGS, altering ALTER_CONFIGS, on the topic
(TOPIC_AUTHORIZATION_FAILED), the group (GROUP_AUTHORIZATION_FAILED) or, for a broker, on the cluster
(CLUSTER_AUTHORIZATION_FAILED); checked before the resource's existence.

GROUP resources (type 32, Kafka 4's group configs) are served by the group config store
(group_configs.py): any group name but ``""`` (INVALID_REQUEST), whether or not the group exists, as Kafka.
"""

from __future__ import annotations

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from tidelog.server.admin_manager import TopicAdmin
from tidelog.server.config import (
    BrokerConfig,
    ConfigEntry,
    ConfigError,
    apply_incremental_alter,
    describe_broker_configs,
    describe_topic_configs,
    validate_topic_configs,
)
from tidelog.server.dispatch import RequestContext
from tidelog.server.dynamic_config import apply_incremental_broker_alter, validate_broker_configs
from tidelog.server.group_configs import GroupConfigStore
from tidelog.server.handlers.authz import Authz, cluster_allowed, group_allowed, topic_allowed
from tidelog.server.metadata_cache import MetadataCache
from tidelog.server.security.acl import AclOperation

__all__ = ["ConfigsHandler"]

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
_Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def _entry(e: ConfigEntry) -> DescribeConfigsResponse.DescribeConfigsResourceResult:
    return _Entry(
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        is_default=e.is_default,
        config_source=int(e.source),
        is_sensitive=e.is_sensitive,
        synonyms=[_Synonym(name=s.name, value=s.value, source=int(s.source)) for s in e.synonyms],
        config_type=int(e.config_type),
        documentation=e.documentation,
    )


class ConfigsHandler:
    """DescribeConfigs, AlterConfigs and IncrementalAlterConfigs through the admin manager."""

    def __init__(
        self,
        admin: TopicAdmin,
        metadata: MetadataCache,
        authz: Authz = None,
        groups: GroupConfigStore | None = None,
    ) -> None:
        self._admin = admin
        self._metadata = metadata
        self._authz = authz
        self._groups = groups

    def _refusal(
        self, ctx: RequestContext, resource_type: int, name: str, operation: AclOperation
    ) -> tuple[int, str | None] | None:
        """The authorization error for ``operation`` on the resource, or None when allowed."""
        if self._authz is None:
            return None
        if resource_type == TOPIC and not topic_allowed(self._authz, ctx, operation, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
        if resource_type in (BROKER, BROKER_LOGGER) and not cluster_allowed(self._authz, ctx, operation):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        if resource_type == GROUP and not group_allowed(self._authz, ctx, operation, name):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
        return None

    def describe_configs(
        self, ctx: RequestContext, request: DescribeConfigsRequest
    ) -> DescribeConfigsResponse:
        version = ctx.api_version
        synonyms = version >= 1 and request.include_synonyms
        docs = version >= 3 and request.include_documentation
        response = DescribeConfigsResponse()
        for resource in request.resources:
            result = _Result(resource_type=resource.resource_type, resource_name=resource.resource_name)
            response.results.append(result)
            names = resource.configuration_keys or None  # as Kafka: null and empty both mean every config
            refused = self._refusal(
                ctx, resource.resource_type, resource.resource_name, AclOperation.DESCRIBE_CONFIGS
            )
            if refused is not None:
                result.error_code, result.error_message = refused
                continue
            if resource.resource_type == TOPIC:
                topic = self._metadata.topic(resource.resource_name)
                if topic is None:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    result.error_message = f"Topic '{resource.resource_name}' does not exist."
                    continue
                entries = describe_topic_configs(
                    self._admin.config,
                    topic.configs,
                    names,
                    include_synonyms=synonyms,
                    include_documentation=docs,
                )
            elif resource.resource_type == BROKER:
                problem = self._check_broker(resource.resource_name)
                if problem is not None:
                    result.error_code, result.error_message = problem
                    continue
                entries = describe_broker_configs(
                    self._admin.config,
                    names,
                    include_synonyms=synonyms,
                    include_documentation=docs,
                    cluster_default=resource.resource_name == "",
                )
            elif resource.resource_type == GROUP and self._groups is not None:
                if not resource.resource_name:
                    result.error_code = ErrorCode.INVALID_REQUEST
                    result.error_message = "Group name must not be empty"
                    continue
                entries = self._groups.describe(
                    resource.resource_name, names, include_synonyms=synonyms, include_documentation=docs
                )
            else:
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"Unsupported resource type {resource.resource_type}"
                continue
            result.configs = [_entry(e) for e in entries]
        return response

    def _check_broker(self, name: str) -> tuple[int, str] | None:
        if self._admin.dynamic_configs.entity(name) is not None:
            return None
        if not name.lstrip("-").isdigit():
            return ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        return (
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {self._metadata.node_id} or empty string, but received {name}",
        )

    def _check_resource(self, resource_type: int, name: str) -> tuple[int, str] | None:
        if resource_type == TOPIC:
            if self._metadata.topic(name) is None:
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
            return None
        if resource_type == BROKER:
            return self._check_broker(name)
        if resource_type == GROUP and self._groups is not None:
            return None if name else (ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}"

    async def alter_configs(self, ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
        response = AlterConfigsResponse()
        for resource in request.resources:
            result = AlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            response.responses.append(result)
            problem = self._refusal(
                ctx, resource.resource_type, resource.resource_name, AclOperation.ALTER_CONFIGS
            ) or self._check_resource(resource.resource_type, resource.resource_name)
            if problem is None:
                given = {c.name: c.value for c in resource.configs}
                try:
                    if resource.resource_type == BROKER:
                        await self._admin.alter_broker_configs(
                            resource.resource_name,
                            validate_broker_configs(given),
                            validate_only=request.validate_only,
                        )
                    elif resource.resource_type == GROUP:
                        assert self._groups is not None
                        await self._groups.replace(
                            resource.resource_name, given, validate_only=request.validate_only
                        )
                    else:
                        configs = validate_topic_configs(given, self._admin.config)
                        if not request.validate_only:
                            await self._admin.set_topic_configs(resource.resource_name, configs)
                except ConfigError as exc:
                    problem = (exc.error_code, str(exc))
            if problem is not None:
                result.error_code, result.error_message = problem
        return response

    async def incremental_alter_configs(
        self, ctx: RequestContext, request: IncrementalAlterConfigsRequest
    ) -> IncrementalAlterConfigsResponse:
        response = IncrementalAlterConfigsResponse()
        for resource in request.resources:
            result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            response.responses.append(result)
            problem = self._refusal(
                ctx, resource.resource_type, resource.resource_name, AclOperation.ALTER_CONFIGS
            ) or self._check_resource(resource.resource_type, resource.resource_name)
            if problem is None:
                name = resource.resource_name
                operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
                try:
                    if resource.resource_type == BROKER:
                        current = self._admin.dynamic_configs.layer(name)
                        layer = apply_incremental_broker_alter(current, operations, self._below(name))
                        await self._admin.alter_broker_configs(
                            name, layer, validate_only=request.validate_only
                        )
                    elif resource.resource_type == GROUP:
                        assert self._groups is not None
                        await self._groups.incremental_alter(
                            name, operations, validate_only=request.validate_only
                        )
                    else:
                        topic = self._metadata.topic(name)
                        assert topic is not None
                        configs = apply_incremental_alter(self._admin.config, topic.configs, operations)
                        if not request.validate_only:
                            await self._admin.set_topic_configs(name, configs)
                except ConfigError as exc:
                    problem = (exc.error_code, str(exc))
            if problem is not None:
                result.error_code, result.error_message = problem
        return response

    def _below(self, entity: str) -> BrokerConfig:
        """The config a dynamic layer overrides (what APPEND / SUBTRACT start from when the layer lacks a key):
        the static config for the cluster default, static plus cluster default for this broker's layer."""
        default = self._admin.dynamic_configs.layer("")
        return self._admin.dynamic_configs.static.with_dynamic({} if entity == "" else default, {})
