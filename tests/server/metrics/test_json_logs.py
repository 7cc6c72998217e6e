"""log.format=json: one JSON object per line, with the request's client id, API and correlation id on
records logged while a request is served."""

from __future__ import annotations

import io
import json
import logging

from tidelog.protocol.messages import ApiKey
from tidelog.server.config import load_broker_config
from tidelog.server.dispatch import RequestContext
from tidelog.server.log_format import log_handler
from tidelog.server.request_log_context import current_request


def _logger(fmt: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    logger = logging.getLogger(f"tidelog.test.jsonlogs.{fmt}")
    logger.handlers[:] = [log_handler(stream, fmt)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger, stream


def test_json_lines_carry_the_request_fields_on_an_error() -> None:
    logger, stream = _logger("json")
    logger.info("outside %s", "requests")
    ctx = RequestContext(
        api_key=ApiKey.PRODUCE,
        api_version=9,
        correlation_id=4242,
        client_id="billing-app",
        client_host="10.0.0.7",
        connection_id=3,
        listener_name="PLAINTEXT",
    )
    token = current_request.set(ctx)
    try:
        try:
            raise RuntimeError("disk on fire")
        except RuntimeError:
            logger.exception("handler failed")
    finally:
        current_request.reset(token)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{"))
    assert first["message"] == "outside requests"
    assert first["level"] == "INFO"
    assert first["logger"] == "tidelog.test.jsonlogs.json"
    assert first["time"].endswith("Z")
    assert "correlation_id" not in first
    assert second["message"] == "handler failed"
    assert second["level"] == "ERROR"
    assert (second["client_id"], second["api"], second["correlation_id"]) == ("billing-app", "Produce", 4242)
    assert second["listener"] == "PLAINTEXT"
    assert "RuntimeError: disk on fire" in second["exc"]
    assert len(stream.getvalue().splitlines()) == 2  # the traceback is inside the object, not on more lines


def test_text_lines_append_the_request_fields() -> None:
    logger, stream = _logger("text")
    token = current_request.set(
        RequestContext(
            api_key=ApiKey.FETCH,
            api_version=12,
            correlation_id=7,
            client_id="c",
            client_host="h",
            connection_id=1,
        )
    )
    try:
        logger.warning("slow")
    finally:
        current_request.reset(token)
    line = stream.getvalue().strip()
    assert "level=WARNING" in line
    assert "msg=slow" in line
    assert "client_id=c api=Fetch correlation_id=7" in line


def test_log_format_key() -> None:
    config, _ = load_broker_config(None, {"log.format": "json"})
    assert config.log_format == "json"
    assert load_broker_config(None, {})[0].log_format == "text"
