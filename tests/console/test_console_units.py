"""The console's pieces that need no broker: rendering records, the metrics endpoint reader and the sampler's
rates from it (a fake endpoint serving Kafka's JMX-exporter names), timestamps.

- render: JSON pretty-printed, invalid UTF-8 shown with U+FFFD, hex in rows of 16 bytes, None as ``null``;
- record_json: one ASCII line whatever the bytes, the raw bytes in hex beside the text;
- parse/scrape: per-topic counters summed over labels and endpoints, the broker-wide series (no topic label)
  ignored, an unreachable endpoint is None;
- the sampler's throughput and topic sizes come from the endpoint when it answers (rate = counter delta /
  elapsed), and its series is bounded;
- the wire connections' security from librdkafka settings: the protocol honoured exactly, TLS verification
  as librdkafka's keys say, a mechanism tidelog cannot speak refused before any connection.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from tidelog.client.security import WireSecurity
from tidelog.console.browse import Record, parse_timestamp_ms, record_json, render
from tidelog.console.kafka import ConsoleError, KafkaGateway
from tidelog.console.metrics_source import parse, scrape
from tidelog.console.sampler import Sampler
from tidelog.console.wire import wire_security

EXPOSITION = """\
# HELP kafka_server_brokertopicmetrics_messagesin_total Messages in
# TYPE kafka_server_brokertopicmetrics_messagesin_total counter
kafka_server_brokertopicmetrics_messagesin_total {messages_total}
kafka_server_brokertopicmetrics_messagesin_total{{topic="orders"}} {orders}
kafka_server_brokertopicmetrics_messagesin_total{{topic="clicks"}} 10.0
kafka_server_brokertopicmetrics_bytesin_total{{topic="orders"}} {orders_bytes}
kafka_log_log_size{{topic="orders",partition="0"}} 1024.0
kafka_log_log_size{{topic="orders",partition="1"}} 2048.0
kafka_network_requestmetrics_requests_total{{request="Produce"}} 5.0
"""


def test_render_text_json_hex_and_null() -> None:
    assert render(b'{"a": [1, 2]}', "text") == ('{\n  "a": [\n    1,\n    2\n  ]\n}', True)
    assert render(b"{not json", "text") == ("{not json", False)
    assert render(b"caf\xc3\xa9 \xff", "text") == ("café \ufffd", False)
    assert render(bytes(range(18)), "hex") == (
        "00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11",
        False,
    )
    assert render(None, "text") == ("null", False)


def test_record_json_is_one_ascii_line() -> None:
    record = Record(2, 7, 1_700_000_000_000, b"<k>", b"\xe2\x80\xa8</script>\xff", (("h", None), ("g", b"v")))
    line = record_json("t", record)
    assert "\n" not in line
    assert line.isascii()
    assert json.loads(line) == {
        "topic": "t",
        "partition": 2,
        "offset": 7,
        "timestamp": 1_700_000_000_000,
        "key": "<k>",
        "value": "\u2028</script>\ufffd",
        "headers": [["h", None], ["g", "v"]],
        "key_hex": "3c6b3e",
        "value_hex": "e280a83c2f7363726970743eff",
    }


def test_parse_timestamps() -> None:
    assert parse_timestamp_ms("1700000000123") == 1_700_000_000_123
    assert parse_timestamp_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_timestamp_ms("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert parse_timestamp_ms("2023-11-14T22:13:20") == 1_700_000_000_000  # UTC unless it says otherwise


def test_parse_sums_per_topic_and_ignores_the_broker_wide_series() -> None:
    snapshot = parse(EXPOSITION.format(messages_total=999.0, orders=40.0, orders_bytes=4000.0))
    assert snapshot.messages_in == {"orders": 40.0, "clicks": 10.0}
    assert snapshot.bytes_in == {"orders": 4000.0}
    assert snapshot.log_size == {"orders": 3072.0}
    assert snapshot.total_messages_in == 50.0


class _Endpoint:
    """A fake metrics endpoint whose counters the test sets."""

    def __init__(self) -> None:
        self.values = {"messages_total": 0.0, "orders": 0.0, "orders_bytes": 0.0}
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = EXPOSITION.format(**endpoint.values).encode() if self.path == "/metrics" else b""
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[_Endpoint]:
    fake = _Endpoint()
    try:
        yield fake
    finally:
        fake.close()


def test_scrape_sums_endpoints_and_gives_none_when_one_is_down(endpoint: _Endpoint) -> None:
    endpoint.values.update(orders=5.0)
    both = scrape([endpoint.url, endpoint.url + "/metrics"])
    assert both is not None
    assert both.messages_in == {"orders": 10.0, "clicks": 20.0}
    assert scrape([endpoint.url, "http://127.0.0.1:1"]) is None
    assert scrape(["file:///etc/passwd"]) is None


def test_sampler_rates_and_sizes_come_from_the_metrics_endpoint(
    endpoint: _Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = itertools.count(100.0)  # one second per reading: a sample reads the clock twice
    monkeypatch.setattr("tidelog.console.sampler.time.monotonic", lambda: next(clock))
    gateway = KafkaGateway({"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, timeout=1)
    sampler = Sampler(gateway, [endpoint.url], history=2)
    endpoint.values.update(orders=100.0, orders_bytes=10_000.0)
    sampler.sample_once()  # the first sample: no rate yet
    assert sampler.throughput_series() == []
    assert (sampler.source, sampler.topic_sizes) == ("metrics", {"orders": 3072.0})
    endpoint.values.update(orders=300.0, orders_bytes=30_000.0)
    sampler.sample_once()
    endpoint.values.update(orders=320.0, orders_bytes=32_000.0)
    sampler.sample_once()
    points = sampler.throughput_series()
    assert [(p.messages_per_s, p.bytes_per_s) for p in points] == [(100.0, 10_000.0), (10.0, 1_000.0)]
    assert sampler.topic_rates == {"orders": 10.0, "clicks": 0.0}


def test_vendored_chart_js_is_the_pinned_version_and_packaged() -> None:
    from importlib import resources

    vendor = resources.files("tidelog.console") / "static" / "vendor"
    assert (vendor / "chart.umd.min.js").read_text().startswith("/*!\n * Chart.js v4.6.1\n")
    assert "| `chart.umd.min.js` | chart.js | 4.6.1 |" in (vendor / "VENDORED.md").read_text()
    assert (vendor / "chart.js.LICENSE.md").read_text().startswith("The MIT License (MIT)")


def test_wire_security_follows_the_librdkafka_settings() -> None:
    import ssl

    assert wire_security({}) == WireSecurity("PLAINTEXT", None, None)
    sasl = wire_security(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": "p",
        }
    )
    assert (sasl.protocol, sasl.tls, sasl.sasl) == ("SASL_PLAINTEXT", None, ("SCRAM-SHA-512", "u", "p"))
    tls = wire_security({"security.protocol": "SSL"}).tls
    assert tls is not None
    assert (tls.verify_mode, tls.check_hostname) == (ssl.CERT_REQUIRED, True)
    loose = wire_security(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "ssl.endpoint.identification.algorithm": "none",
        }
    )
    assert loose.tls is not None
    assert (loose.tls.verify_mode, loose.tls.check_hostname) == (ssl.CERT_REQUIRED, False)
    unverified = wire_security(
        {"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"}
    ).tls
    assert unverified is not None
    assert unverified.verify_mode == ssl.CERT_NONE
    with pytest.raises(ConsoleError, match=r"not sasl\.mechanism=GSSAPI"):
        wire_security({"security.protocol": "SASL_PLAINTEXT"})
    with pytest.raises(ConsoleError, match=r"security\.protocol=WHATEVER is not one of"):
        wire_security({"security.protocol": "whatever"})
    with pytest.raises(ConsoleError, match="cannot load the TLS settings"):
        wire_security({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"})
