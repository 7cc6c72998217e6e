"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Invariants: topic configs are described with their source (dynamic topic override, static broker config,
default) and, when asked, Kafka's synonym chain; broker configs are static (read-only) and cannot be
altered; an alteration is validated whole before anything is stored, persisted before the answer, and
applied live to the topic's partition logs. AlterConfigs *replaces* a topic's overrides (Kafka's
semantics); IncrementalAlterConfigs edits them (SET, DELETE, APPEND, SUBTRACT).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from tidelog.server.config import (
    apply_incremental_alter,
    describe_broker_configs,
    describe_topic_configs,
    validate_topic_configs,
)
from tidelog.server.config_defs import ConfigError

if TYPE_CHECKING:
    from tidelog.server.broker import Broker
    from tidelog.server.dispatch import RequestContext

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
_Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def handle_describe_configs(
    broker: Broker, ctx: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    version = ctx.api_version
    synonyms = version >= 1 and request.include_synonyms
    docs = version >= 3 and request.include_documentation
    response = DescribeConfigsResponse()
    for resource in request.resources:
        result = _Result(resource_type=resource.resource_type, resource_name=resource.resource_name)
        response.results.append(result)
        names = resource.configuration_keys
        if resource.resource_type == TOPIC:
            topic = broker.metadata.get(resource.resource_name)
            if topic is None:
                result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"Topic '{resource.resource_name}' does not exist."
                continue
            entries = describe_topic_configs(
                broker.config, topic.configs, names, include_synonyms=synonyms, include_documentation=docs
            )
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                result.error_code = ErrorCode.INVALID_REQUEST
                result.error_message = f"Unexpected broker id, expected {broker.node_id} or empty string"
                continue
            entries = describe_broker_configs(
                broker.config, names, include_synonyms=synonyms, include_documentation=docs
            )
        else:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = f"Unsupported resource type {resource.resource_type}"
            continue
        result.configs = [_entry(e) for e in entries]
    return response


def _entry(e: Any) -> Any:
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


def _check_resource(broker: Broker, resource_type: int, name: str) -> tuple[int, str] | None:
    if resource_type == TOPIC:
        if broker.metadata.get(name) is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist."
        return None
    if resource_type == BROKER:
        return (
            ErrorCode.INVALID_REQUEST,
            "Broker configs of tidelog are static (server.properties / --set); they cannot be updated dynamically",
        )
    return ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}"


def handle_alter_configs(
    broker: Broker, ctx: RequestContext, request: AlterConfigsRequest
) -> AlterConfigsResponse:
    response = AlterConfigsResponse()
    for resource in request.resources:
        result = AlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        response.responses.append(result)
        problem = _check_resource(broker, resource.resource_type, resource.resource_name)
        if problem is None:
            try:
                configs = validate_topic_configs({c.name: c.value for c in resource.configs}, broker.config)
            except ConfigError as exc:
                problem = (ErrorCode.INVALID_CONFIG, str(exc))
            else:
                if not request.validate_only:
                    broker.set_topic_configs(resource.resource_name, configs)
        if problem is not None:
            result.error_code, result.error_message = problem
    return response


def handle_incremental_alter_configs(
    broker: Broker, ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    response = IncrementalAlterConfigsResponse()
    for resource in request.resources:
        result = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            resource_type=resource.resource_type, resource_name=resource.resource_name
        )
        response.responses.append(result)
        problem = _check_resource(broker, resource.resource_type, resource.resource_name)
        if problem is None:
            topic = broker.metadata.get(resource.resource_name)
            assert topic is not None
            operations = [(c.name, c.config_operation, c.value) for c in resource.configs]
            try:
                configs = apply_incremental_alter(broker.config, topic.configs, operations)
            except ConfigError as exc:
                problem = (ErrorCode.INVALID_CONFIG, str(exc))
            else:
                if not request.validate_only:
                    broker.set_topic_configs(resource.resource_name, configs)
        if problem is not None:
            result.error_code, result.error_message = problem
    return response
