"""The ``kafka.*`` options Spark users have, translated from the Java client's keys to librdkafka's (pure).

Spark's connector hands every ``kafka.<name>`` option to the Java client as ``<name>``; tidelog's data
source hands them to confluent-kafka (librdkafka), whose keys differ in places. :func:`translate` turns
the Java keys into librdkafka's and says what it did. Invariants:

- A key both clients know (``security.protocol``, ``sasl.mechanism``, ``fetch.min.bytes``,
  ``acks`` ...) passes unchanged; a key neither table below knows passes unchanged too, so librdkafka
  itself names a typo.
- Java keys with a librdkafka twin are renamed (``fetch.max.wait.ms`` -> ``fetch.wait.max.ms``,
  ``buffer.memory`` -> ``queue.buffering.max.kbytes`` ...); ``sasl.jaas.config`` with Kafka's
  ``PlainLoginModule`` / ``ScramLoginModule`` becomes ``sasl.username`` / ``sasl.password`` (and
  ``sasl.mechanism=PLAIN`` when unset); PEM trust and key stores become ``ssl.ca.location`` /
  ``ssl.certificate.location`` / ``ssl.key.location`` (or the inline ``*.pem`` keys); a PKCS12 keystore
  goes to librdkafka's own ``ssl.keystore.location``; ``partitioner.class`` maps Kafka's partitioner
  classes to librdkafka's ``partitioner`` names.
- What librdkafka cannot do raises :class:`~tidelog.spark.options.OptionError` naming the key (a JKS or
  PKCS12 truststore, a JKS keystore, another JAAS login module, an unknown partitioner class); Java keys
  librdkafka lacks and that change nothing a reader or writer needs are dropped with a warning naming
  them.
- Nothing here reads a file except through the ``sniff`` callable the caller passes (to tell a PEM store
  from a binary one when ``ssl.truststore.type`` / ``ssl.keystore.type`` is not given).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "JAVA_ONLY_KEYS",
    "PARTITIONER_CLASSES",
    "RENAMED_KEYS",
    "Translation",
    "TranslationError",
    "parse_jaas",
    "translate",
]


class TranslationError(ValueError):
    """A ``kafka.*`` option librdkafka cannot honour; the message names the option."""


#: Java client key -> librdkafka key, same meaning and unit.
RENAMED_KEYS = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "max.request.size": "message.max.bytes",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.keystore.key": "ssl.key.pem",
}

#: Kafka's partitioner classes -> librdkafka's ``partitioner`` (keyed records land where Java puts them).
PARTITIONER_CLASSES = {
    "org.apache.kafka.clients.producer.internals.DefaultPartitioner": "murmur2_random",
    "org.apache.kafka.clients.producer.UniformStickyPartitioner": "random",
}

#: Java client keys librdkafka has no equivalent of; dropped with a warning (nothing depends on them).
JAVA_ONLY_KEYS = frozenset(
    {
        "default.api.timeout.ms",
        "max.block.ms",
        "metadata.max.idle.ms",
        "exclude.internal.topics",
        "internal.leave.group.on.close",
        "metric.reporters",
        "metrics.num.samples",
        "metrics.sample.window.ms",
        "metrics.recording.level",
        "auto.include.jmx.reporter",
        "security.providers",
        "ssl.provider",
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.trustmanager.algorithm",
        "ssl.keymanager.algorithm",
        "ssl.secure.random.implementation",
        "ssl.engine.factory.class",
        "ssl.truststore.password",
        "sasl.login.class",
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
        "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
        "sasl.login.refresh.min.period.seconds",
        "sasl.login.refresh.buffer.seconds",
        "partitioner.ignore.keys",
        "partitioner.adaptive.partitioning.enable",
        "partitioner.availability.timeout.ms",
        "client.dns.lookup",
    }
)

_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
}
_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<rest>.*?);?\s*$", re.S
)
_JAAS_OPTION = re.compile(r'\s*([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;]+))')


@dataclass
class Translation:
    """librdkafka settings, warnings to log (each names a key), and values the source itself uses."""

    config: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    max_poll_records: int | None = None


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``Module required a="x" b=y;`` -> (module, {a: x, b: y}); raises on anything else."""
    match = _JAAS.match(text)
    if match is None:
        raise TranslationError(
            "option kafka.sasl.jaas.config is not a JAAS entry like "
            '\'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";\''
        )
    options: dict[str, str] = {}
    rest = match.group("rest")
    position = 0
    while position < len(rest.rstrip("; \n\t")):
        option = _JAAS_OPTION.match(rest, position)
        if option is None:
            raise TranslationError(f"option kafka.sasl.jaas.config: cannot read {rest[position:].strip()!r}")
        quoted, bare = option.group(2), option.group(3)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        position = option.end()
    return match.group("module"), options


def _jaas(value: str, given: Mapping[str, str], out: Translation) -> None:
    module, options = parse_jaas(value)
    kind = _JAAS_MODULES.get(module)
    if kind is None:
        raise TranslationError(
            f"option kafka.sasl.jaas.config: login module {module} is not supported by librdkafka; use "
            "PlainLoginModule or ScramLoginModule, or librdkafka's own kafka.sasl.* keys"
        )
    missing = [name for name in ("username", "password") if name not in options]
    if missing:
        raise TranslationError(f"option kafka.sasl.jaas.config: {module} needs {' and '.join(missing)}")
    out.config["sasl.username"] = options["username"]
    out.config["sasl.password"] = options["password"]
    mechanism = given.get("sasl.mechanism")
    if kind == "PLAIN":
        out.config.setdefault("sasl.mechanism", mechanism or "PLAIN")
    elif mechanism is None or not mechanism.upper().startswith("SCRAM-"):
        raise TranslationError(
            "option kafka.sasl.jaas.config uses ScramLoginModule: set kafka.sasl.mechanism to SCRAM-SHA-256 "
            "or SCRAM-SHA-512"
        )


def _store_type(given: Mapping[str, str], store: str, sniff: Callable[[str], bytes | None]) -> str:
    explicit = given.get(f"ssl.{store}.type")
    if explicit:
        return explicit.upper()
    head = sniff(given[f"ssl.{store}.location"])
    if head is not None and b"-----BEGIN" in head:
        return "PEM"
    return "PKCS12" if head is not None and head[:1] == b"\x30" else "JKS"  # DER SEQUENCE: PKCS12


def _stores(given: Mapping[str, str], out: Translation, sniff: Callable[[str], bytes | None]) -> None:
    if "ssl.truststore.location" in given:
        kind = _store_type(given, "truststore", sniff)
        if kind != "PEM":
            raise TranslationError(
                f"option kafka.ssl.truststore.location is a {kind} truststore, which librdkafka cannot read; "
                "export its certificates as PEM (keytool -exportcert -rfc) and point "
                "kafka.ssl.truststore.location at that file with kafka.ssl.truststore.type=PEM"
            )
        out.config["ssl.ca.location"] = given["ssl.truststore.location"]
    if "ssl.keystore.location" in given:
        kind = _store_type(given, "keystore", sniff)
        location = given["ssl.keystore.location"]
        if kind == "PEM":  # one file: the private key and the certificate chain
            out.config["ssl.certificate.location"] = location
            out.config["ssl.key.location"] = location
            if "ssl.key.password" in given:
                out.config["ssl.key.password"] = given["ssl.key.password"]
        elif kind == "PKCS12":
            out.config["ssl.keystore.location"] = location
            if "ssl.keystore.password" in given:
                out.config["ssl.keystore.password"] = given["ssl.keystore.password"]
        else:
            raise TranslationError(
                f"option kafka.ssl.keystore.location is a {kind} keystore, which librdkafka cannot read; "
                "convert it to PKCS12 (keytool -importkeystore -deststoretype PKCS12) or PEM and set "
                "kafka.ssl.keystore.type"
            )


def translate(
    given: Mapping[str, str], *, producer: bool, sniff: Callable[[str], bytes | None] = lambda _path: None
) -> Translation:
    """Java client settings (``kafka.`` already stripped) -> librdkafka settings plus warnings."""
    out = Translation()
    handled = {
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.key.password",
    }
    for key, value in given.items():
        if key in handled:
            continue
        if key in RENAMED_KEYS:
            out.config[RENAMED_KEYS[key]] = value
        elif key == "buffer.memory":
            out.config["queue.buffering.max.kbytes"] = str(max(1, int(value) // 1024))
        elif key == "max.poll.records":
            try:
                out.max_poll_records = int(value)
            except ValueError:
                raise TranslationError(
                    f"option kafka.max.poll.records must be an integer, got {value!r}"
                ) from None
            if out.max_poll_records <= 0:
                raise TranslationError(f"option kafka.max.poll.records must be positive, got {value!r}")
        elif key == "partitioner.class":
            name = PARTITIONER_CLASSES.get(value)
            if name is None:
                raise TranslationError(
                    f"option kafka.partitioner.class={value} has no librdkafka equivalent; known: "
                    + ", ".join(sorted(PARTITIONER_CLASSES))
                    + " (or set librdkafka's kafka.partitioner, e.g. murmur2_random)"
                )
            if producer:
                out.config["partitioner"] = name
        elif key == "ssl.endpoint.identification.algorithm":
            out.config[key] = value or "none"  # Java's empty string turns the check off
        elif key in JAVA_ONLY_KEYS:
            out.warnings.append(f"option kafka.{key} has no librdkafka equivalent and is ignored")
        else:
            out.config[key] = value
    if "sasl.jaas.config" in given:
        _jaas(given["sasl.jaas.config"], given, out)
    elif "ssl.key.password" in given and "ssl.keystore.location" not in given:
        out.config["ssl.key.password"] = given["ssl.key.password"]
    _stores(given, out, sniff)
    return out
