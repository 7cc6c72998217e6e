"""Issue 12's client matrix: confluent-kafka, kafka-python and aiokafka, each configured as its docs say,
on each of three secured listeners of one broker with the ACL authorizer on.

The broker (one per module) listens on SASL_SSL with SCRAM-SHA-512, on MTLS (SSL with
``ssl.client.auth=required``; the certificate's CN, lower-cased, is the user name) and on SASL_PLAINTEXT
with PLAIN. Its users admin, alice and bob are written offline before it starts; ``User:admin`` is a super
user. Admin creates the topics and gives alice, through confluent-kafka's AdminClient, PREFIXED ``alice-``
ACLs: WRITE, READ, DESCRIBE on topics, READ on groups, WRITE and DESCRIBE on transactional ids. Bob has
none.

For each library x listener:
- alice produces known values (exact offsets), consumes them back in her group ``alice-...`` (exact
  offsets and values), commits and reads the committed offset back, and runs an aborted then a committed
  transaction that a ``read_committed`` reader sees exactly (the committed records only, at their offsets);
- bob gets Kafka's authorization errors as the library surfaces them (an error code from librdkafka, an
  exception class from the others): TOPIC_AUTHORIZATION_FAILED producing to alice's topic,
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED for transactional id ``alice-x``, a metadata listing without
  alice's topics, and for a group consumer of alice's topic in alice's group GROUP_AUTHORIZATION_FAILED
  (librdkafka and kafka-python look for the group's coordinator first) or TOPIC_AUTHORIZATION_FAILED
  (aiokafka asks for the topic's metadata first).

On MTLS alice is allowed only if her certificate maps to ``User:alice``: the mapping rule is checked too.
What the broker itself answers bob is checked on the wire, and AlterUserScramCredentials is refused to
alice (CLUSTER_AUTHORIZATION_FAILED) and allowed to admin on every listener.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiokafka
import aiokafka.errors
import aiokafka.helpers
import confluent_kafka
import kafka
import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from tests.server.conftest import finish_broker
from tests.support.certs import Issued, TlsMaterial
from tests.support.tls_broker import TlsBroker
from tests.support.users import add_user_offline

from tidelog.client.wire import WireClient
from tidelog.protocol.errors import ErrorCode
from tidelog.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataRequest,
    MetadataResponse,
)

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
LISTENERS = {"SASL_SSL": "SASL_SSL", "MTLS": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
LIBRARIES = ["confluent", "kafka_python", "aiokafka"]
VALUES = [f"value-{i}".encode() for i in range(5)]
ABORTED = [b"aborted-0", b"aborted-1"]
COMMITTED = [b"committed-0", b"committed-1", b"committed-2"]
FAILING_TIMEOUT_S = 5.0
"""How long a client that is expected to be refused gets to report it."""


@dataclass(frozen=True)
class Login:
    """One user on one listener: everything any of the libraries needs to connect."""

    listener: str
    bootstrap: str
    ca: str
    user: str
    certificate: Issued

    def confluent(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        if self.listener == "SASL_SSL":
            settings |= {"security.protocol": "SASL_SSL", "ssl.ca.location": self.ca}
            settings |= {"sasl.mechanism": "SCRAM-SHA-512"}
        elif self.listener == "MTLS":
            settings |= {
                "security.protocol": "SSL",
                "ssl.ca.location": self.ca,
                "ssl.certificate.location": str(self.certificate.cert),
                "ssl.key.location": str(self.certificate.key),
            }
            if self.certificate.key_password:
                settings["ssl.key.password"] = self.certificate.key_password
            return settings
        else:
            settings |= {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
        return settings | {"sasl.username": self.user, "sasl.password": PASSWORDS[self.user]}

    def kafka_python(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"bootstrap_servers": self.bootstrap}
        if self.listener == "SASL_SSL":
            settings |= {"security_protocol": "SASL_SSL", "ssl_cafile": self.ca}
            settings |= {"sasl_mechanism": "SCRAM-SHA-512"}
        elif self.listener == "MTLS":
            settings |= {
                "security_protocol": "SSL",
                "ssl_cafile": self.ca,
                "ssl_certfile": str(self.certificate.cert),
                "ssl_keyfile": str(self.certificate.key),
                "ssl_password": self.certificate.key_password,
            }
            return settings
        else:
            settings |= {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}
        return settings | {"sasl_plain_username": self.user, "sasl_plain_password": PASSWORDS[self.user]}

    def aiokafka(self) -> dict[str, Any]:
        """aiokafka's keys are kafka-python's, except that TLS comes as an ``ssl_context``."""
        settings = self.kafka_python()
        if self.listener == "SASL_PLAINTEXT":
            return settings
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
            settings.pop(key, None)
        context = aiokafka.helpers.create_ssl_context(
            cafile=self.ca,
            **(
                {
                    "certfile": str(self.certificate.cert),
                    "keyfile": str(self.certificate.key),
                    "password": self.certificate.key_password,
                }
                if self.listener == "MTLS"
                else {}
            ),
        )
        return settings | {"ssl_context": context}


LoginAs = Callable[[str, str], Login]
"""``login(user, listener)``."""


@dataclass(frozen=True)
class Names:
    """alice's topic, transaction topic, group and transactional id for one library on one listener."""

    topic: str
    tx_topic: str
    group: str
    transactional_id: str

    @classmethod
    def of(cls, library: str, listener: str) -> Names:
        stem = f"alice-{library}-{listener.lower()}".replace("_", "-")
        return cls(stem, f"{stem}-tx", stem, stem)


@dataclass(frozen=True)
class AliceSaw:
    delivered: list[tuple[int, bytes]]
    """(offset, value) of each produced record, as the producer reported it."""
    consumed: list[tuple[int, bytes]]
    committed: int
    """The group's committed offset, read back after the commit."""
    read_committed: list[tuple[int, bytes]]


EXPECTED_ALICE = AliceSaw(
    delivered=list(enumerate(VALUES)),
    consumed=list(enumerate(VALUES)),
    committed=len(VALUES),
    # the aborted records at 0 and 1, the abort marker at 2: the committed ones from 3
    read_committed=[(3 + i, value) for i, value in enumerate(COMMITTED)],
)


@pytest.fixture(scope="module")
def admin_certificate(pki: TlsMaterial) -> Issued:
    return pki.ca.issue("admin", "CN=admin,OU=ops,O=acme")


@pytest.fixture(scope="module")
def broker(pki: TlsMaterial, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    workdir = tmp_path_factory.mktemp("secured")
    for user, password in PASSWORDS.items():
        add_user_offline(workdir / "data", user, password)
    broker = TlsBroker(
        {
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "ssl.keystore.location": str(pki.broker.keystore),
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.truststore.location": str(pki.ca.cert),
            "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
        extra_listeners=LISTENERS,
        data_dir=workdir / "data",
        run_dir=workdir / "run",
    )
    broker.start()
    try:
        yield broker
    finally:
        finish_broker(broker)


@pytest.fixture(scope="module")
def login(broker: TlsBroker, pki: TlsMaterial, admin_certificate: Issued) -> LoginAs:
    certificates = {"admin": admin_certificate, "alice": pki.alice, "bob": pki.bob}

    def make(user: str, listener: str) -> Login:
        return Login(listener, broker.address(listener), str(pki.ca.cert), user, certificates[user])

    return make


def _prefixed(resource: ResourceType, operation: AclOperation) -> AclBinding:
    return AclBinding(
        resource,
        "alice-",
        ResourcePatternType.PREFIXED,
        "User:alice",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


ALICE_ACLS = [
    _prefixed(ResourceType.TOPIC, AclOperation.WRITE),
    _prefixed(ResourceType.TOPIC, AclOperation.READ),
    _prefixed(ResourceType.TOPIC, AclOperation.DESCRIBE),
    _prefixed(ResourceType.GROUP, AclOperation.READ),
    _prefixed(ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE),
    _prefixed(ResourceType.TRANSACTIONAL_ID, AclOperation.DESCRIBE),
]
ALICE_TOPICS = sorted(
    name
    for library in LIBRARIES
    for listener in LISTENERS
    for name in (Names.of(library, listener).topic, Names.of(library, listener).tx_topic)
)
OTHER_TOPIC = "payroll"


@pytest.fixture(scope="module")
def prepared(login: LoginAs) -> None:
    """Admin's topics and alice's ACLs, made once through confluent-kafka's AdminClient."""
    admin = AdminClient(login("admin", "SASL_PLAINTEXT").confluent())
    for future in admin.create_acls(ALICE_ACLS, request_timeout=10).values():
        future.result()
    topics = [NewTopic(name, 1, 1) for name in [*ALICE_TOPICS, OTHER_TOPIC]]
    for future in admin.create_topics(topics, request_timeout=10).values():
        future.result()


# ---- alice: everything her ACLs allow ----


def _poll_confluent(consumer: confluent_kafka.Consumer, count: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        got.append((message.offset(), message.value()))
    return got


def alice_confluent(login: Login, names: Names) -> AliceSaw:
    settings = login.confluent()
    producer = confluent_kafka.Producer(settings)
    delivered: list[tuple[int, bytes]] = []

    def on_delivery(error: KafkaError | None, message: confluent_kafka.Message) -> None:
        assert error is None, error
        delivered.append((message.offset(), message.value()))

    for value in VALUES:
        producer.produce(names.topic, value, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer(
        settings | {"group.id": names.group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([names.topic])
        consumed = _poll_confluent(consumer, len(VALUES))
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([confluent_kafka.TopicPartition(names.topic, 0)], timeout=10)
    finally:
        consumer.close()

    transactional = confluent_kafka.Producer(settings | {"transactional.id": names.transactional_id})
    transactional.init_transactions(15)
    transactional.begin_transaction()
    for value in ABORTED:
        transactional.produce(names.tx_topic, value)
    assert transactional.flush(15) == 0  # on the broker before the abort, not purged by it
    transactional.abort_transaction(15)
    transactional.begin_transaction()
    for value in COMMITTED:
        transactional.produce(names.tx_topic, value)
    transactional.commit_transaction(15)

    reader = confluent_kafka.Consumer(
        settings | {"group.id": names.group, "isolation.level": "read_committed", "enable.auto.commit": False}
    )
    try:
        reader.assign([confluent_kafka.TopicPartition(names.tx_topic, 0, 0)])
        read_committed = _poll_confluent(reader, len(COMMITTED))
    finally:
        reader.close()
    return AliceSaw(delivered, consumed, committed.offset, read_committed)


def _poll_kafka_python(consumer: kafka.KafkaConsumer, count: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got += [(record.offset, record.value) for record in records]
    return got


def alice_kafka_python(login: Login, names: Names) -> AliceSaw:
    settings = login.kafka_python()
    producer = kafka.KafkaProducer(**settings)
    try:
        delivered = [
            (metadata.offset, value)
            for value in VALUES
            for metadata in [producer.send(names.topic, value).get(timeout=15)]
        ]
    finally:
        producer.close(timeout=10)
    tp = kafka.TopicPartition(names.topic, 0)
    consumer = kafka.KafkaConsumer(
        group_id=names.group, auto_offset_reset="earliest", enable_auto_commit=False, **settings
    )
    try:
        # metadata before subscribing: kafka-python 3.0.12 can miss the assignment of a rejoin that its
        # own metadata update caused (see tests/server/group_member.py)
        assert consumer.partitions_for_topic(names.topic) == {0}
        consumer.subscribe([names.topic])
        consumed = _poll_kafka_python(consumer, len(VALUES))
        consumer.commit()
        committed = consumer.committed(tp)
    finally:
        consumer.close()

    transactional = kafka.KafkaProducer(transactional_id=names.transactional_id, **settings)
    try:
        transactional.init_transactions()
        transactional.begin_transaction()
        for value in ABORTED:
            transactional.send(names.tx_topic, value)
        transactional.flush(15)
        transactional.abort_transaction()
        transactional.begin_transaction()
        for value in COMMITTED:
            transactional.send(names.tx_topic, value)
        transactional.commit_transaction()
    finally:
        transactional.close(timeout=10)

    reader = kafka.KafkaConsumer(group_id=None, isolation_level="read_committed", **settings)
    try:
        tx_tp = kafka.TopicPartition(names.tx_topic, 0)
        reader.assign([tx_tp])
        reader.seek(tx_tp, 0)
        read_committed = _poll_kafka_python(reader, len(COMMITTED))
    finally:
        reader.close()
    return AliceSaw(delivered, consumed, committed, read_committed)


async def _poll_aiokafka(consumer: aiokafka.AIOKafkaConsumer, count: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    async with asyncio.timeout(30):
        while len(got) < count:
            batches = await consumer.getmany(timeout_ms=200)
            got += [(record.offset, record.value) for records in batches.values() for record in records]
    return got


async def alice_aiokafka(login: Login, names: Names) -> AliceSaw:
    settings = login.aiokafka()
    producer = aiokafka.AIOKafkaProducer(**settings)
    await producer.start()
    try:
        delivered = [((await producer.send_and_wait(names.topic, value)).offset, value) for value in VALUES]
    finally:
        await producer.stop()
    tp = aiokafka.TopicPartition(names.topic, 0)
    consumer = aiokafka.AIOKafkaConsumer(
        names.topic,
        group_id=names.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    await consumer.start()
    try:
        consumed = await _poll_aiokafka(consumer, len(VALUES))
        await consumer.commit()
        committed = await consumer.committed(tp)
    finally:
        await consumer.stop()

    transactional = aiokafka.AIOKafkaProducer(transactional_id=names.transactional_id, **settings)
    await transactional.start()
    try:
        await transactional.begin_transaction()
        for value in ABORTED:
            await transactional.send_and_wait(names.tx_topic, value)
        await transactional.abort_transaction()
        async with transactional.transaction():
            for value in COMMITTED:
                await transactional.send_and_wait(names.tx_topic, value)
    finally:
        await transactional.stop()

    reader = aiokafka.AIOKafkaConsumer(isolation_level="read_committed", **settings)
    await reader.start()
    try:
        tx_tp = aiokafka.TopicPartition(names.tx_topic, 0)
        reader.assign([tx_tp])
        reader.seek(tx_tp, 0)
        read_committed = await _poll_aiokafka(reader, len(COMMITTED))
    finally:
        await reader.stop()
    return AliceSaw(delivered, consumed, committed, read_committed)


@pytest.mark.parametrize("listener", list(LISTENERS))
@pytest.mark.parametrize("library", LIBRARIES)
def test_alice_produces_consumes_in_her_group_and_runs_transactions(
    login: LoginAs, prepared: None, library: str, listener: str
) -> None:
    alice, names = login("alice", listener), Names.of(library, listener)
    if library == "confluent":
        saw = alice_confluent(alice, names)
    elif library == "kafka_python":
        saw = alice_kafka_python(alice, names)
    else:
        saw = asyncio.run(alice_aiokafka(alice, names))
    assert saw == EXPECTED_ALICE


# ---- bob: no ACLs at all ----


@dataclass(frozen=True)
class BobSaw:
    """What bob's clients reported, as the library's own error (a code or an exception class)."""

    produce: object
    group_consumer: object
    transactional_init: object
    topics: set[str]


def bob_confluent(login: Login, names: Names) -> BobSaw:
    settings = login.confluent()
    producer = confluent_kafka.Producer(settings | {"message.timeout.ms": int(FAILING_TIMEOUT_S * 1000)})
    outcome: list[KafkaError | None] = []
    producer.produce(names.topic, b"from bob", on_delivery=lambda error, _message: outcome.append(error))
    producer.flush(FAILING_TIMEOUT_S + 5)
    assert len(outcome) == 1
    assert outcome[0] is not None
    topics = set(producer.list_topics(timeout=10).topics)

    consumer = confluent_kafka.Consumer(settings | {"group.id": names.group, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([names.topic])
        message = consumer.poll(FAILING_TIMEOUT_S)  # librdkafka looks for the coordinator first
        assert message is not None
        assert message.error() is not None
        group_error = message.error().code()
    finally:
        consumer.close()

    transactional = confluent_kafka.Producer(settings | {"transactional.id": "alice-x"})
    with pytest.raises(KafkaException) as refused:
        transactional.init_transactions(FAILING_TIMEOUT_S)
    return BobSaw(outcome[0].code(), group_error, refused.value.args[0].code(), topics)


def bob_kafka_python(login: Login, names: Names) -> BobSaw:
    settings = login.kafka_python()
    producer = kafka.KafkaProducer(max_block_ms=int(FAILING_TIMEOUT_S * 1000), **settings)
    try:
        with pytest.raises(kafka.errors.KafkaError) as produce_refused:
            producer.send(names.topic, b"from bob").get(timeout=FAILING_TIMEOUT_S)
    finally:
        producer.close(timeout=5)

    consumer = kafka.KafkaConsumer(group_id=names.group, **settings)
    try:
        topics = consumer.topics()
        consumer.subscribe([names.topic])
        with pytest.raises(kafka.errors.KafkaError) as group_refused:
            consumer.poll(timeout_ms=int(FAILING_TIMEOUT_S * 1000))
    finally:
        consumer.close()

    transactional = kafka.KafkaProducer(transactional_id="alice-x", **settings)
    try:
        with pytest.raises(kafka.errors.KafkaError) as tx_refused:
            transactional.init_transactions()
    finally:
        transactional.close(timeout=5)
    return BobSaw(produce_refused.type, group_refused.type, tx_refused.type, topics)


async def bob_aiokafka(login: Login, names: Names) -> BobSaw:
    settings = login.aiokafka()
    producer = aiokafka.AIOKafkaProducer(request_timeout_ms=int(FAILING_TIMEOUT_S * 1000), **settings)
    await producer.start()
    try:
        with pytest.raises(aiokafka.errors.KafkaError) as produce_refused:
            await producer.send_and_wait(names.topic, b"from bob")
    finally:
        await producer.stop()

    consumer = aiokafka.AIOKafkaConsumer(names.topic, group_id=names.group, **settings)
    try:
        # aiokafka asks for the subscribed topic's metadata before it looks for the group's coordinator
        with pytest.raises(aiokafka.errors.KafkaError) as group_refused:
            await consumer.start()
    finally:
        await consumer.stop()
    lister = aiokafka.AIOKafkaConsumer(**settings)
    await lister.start()
    try:
        topics = await lister.topics()
    finally:
        await lister.stop()

    transactional = aiokafka.AIOKafkaProducer(transactional_id="alice-x", **settings)
    try:
        with pytest.raises(aiokafka.errors.KafkaError) as tx_refused:
            await transactional.start()
    finally:
        await transactional.stop()
    return BobSaw(produce_refused.type, group_refused.type, tx_refused.type, topics)


@pytest.mark.parametrize("listener", list(LISTENERS))
@pytest.mark.parametrize("library", LIBRARIES)
def test_bob_gets_kafkas_authorization_errors(
    login: LoginAs, prepared: None, library: str, listener: str
) -> None:
    bob, names = login("bob", listener), Names.of(library, listener)
    if library == "confluent":
        saw = bob_confluent(bob, names)
    elif library == "kafka_python":
        saw = bob_kafka_python(bob, names)
    else:
        saw = asyncio.run(bob_aiokafka(bob, names))
    assert saw == EXPECTED_BOB[library]


EXPECTED_BOB = {
    "confluent": BobSaw(
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        set(),
    ),
    "kafka_python": BobSaw(
        kafka.errors.TopicAuthorizationFailedError,
        kafka.errors.GroupAuthorizationFailedError,
        kafka.errors.TransactionalIdAuthorizationFailedError,
        set(),
    ),
    "aiokafka": BobSaw(
        aiokafka.errors.TopicAuthorizationFailedError,
        aiokafka.errors.TopicAuthorizationFailedError,  # its metadata for the topic comes first
        aiokafka.errors.TransactionalIdAuthorizationFailed,
        set(),
    ),
}


def test_what_the_broker_answers_bob_and_alice_on_the_wire(broker: TlsBroker, prepared: None) -> None:
    """The answers behind the errors above, as Kafka gives them, read raw on the SASL_PLAINTEXT listener."""
    host, port = broker.address("SASL_PLAINTEXT").split(":")
    topic = Names.of("confluent", "SASL_PLAINTEXT").topic
    with WireClient(host, int(port), timeout=10, sasl=("PLAIN", "bob", PASSWORDS["bob"])) as bob:
        listing = bob.call(MetadataRequest(topics=None), expect=MetadataResponse)
        assert listing.topics == []
        named = bob.call(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
            expect=MetadataResponse,
        )
        assert [(t.name, t.error_code) for t in named.topics] == [
            (topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        ]
        for key_type, key, error in [
            (0, topic, ErrorCode.GROUP_AUTHORIZATION_FAILED),
            (1, "alice-x", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ]:
            found = bob.call(
                FindCoordinatorRequest(key=key, key_type=key_type), 3, expect=FindCoordinatorResponse
            )
            assert found.error_code == error
        for transactional_id, error in [
            (None, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),  # no IDEMPOTENT_WRITE, no WRITE on any topic
            ("alice-x", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        ]:
            init = bob.call(
                InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000),
                expect=InitProducerIdResponse,
            )
            assert init.error_code == error
    with WireClient(host, int(port), timeout=10, sasl=("PLAIN", "alice", PASSWORDS["alice"])) as alice:
        listing = alice.call(MetadataRequest(topics=None), expect=MetadataResponse)
        assert sorted(t.name for t in listing.topics if t.name is not None) == ALICE_TOPICS


@pytest.mark.parametrize("listener", list(LISTENERS))
def test_only_admin_may_alter_scram_credentials(login: LoginAs, prepared: None, listener: str) -> None:
    user = f"carol-{listener.lower()}".replace("_", "-")
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret"
    )
    alice = AdminClient(login("alice", listener).confluent())
    with pytest.raises(KafkaException) as refused:
        alice.alter_user_scram_credentials([upsertion], request_timeout=10)[user].result()
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    admin = AdminClient(login("admin", listener).confluent())
    assert admin.alter_user_scram_credentials([upsertion], request_timeout=10)[user].result() is None
    described = admin.describe_user_scram_credentials([user], request_timeout=10)[user].result()
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 4096)
    ]
