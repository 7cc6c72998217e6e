"""Decompression bombs: a small compressed batch that inflates to hundreds of MiB or more is refused with
CORRUPT_MESSAGE and a message naming the limit, and the broker's memory never holds the inflated bytes.

The bombs go to a compacted topic (the produce path that decompresses: every record must have a key).
Each case asserts the exact error, that the broker's peak RSS (``VmHWM``) rose by less than
``PEAK_GROWTH_BOUND`` over its RSS before the bomb (the cap is 32 x ``max.message.bytes``, about 32 MiB here,
against bombs of 128 MiB to 1 GiB), and that a confluent-kafka round trip then works. The broker fixture
fails the module if the broker logged a traceback or an ERROR line.
"""

from __future__ import annotations

import time

import pytest
from tests.support.abuse import (
    bomb,
    confluent_round_trip,
    peak_rss_bytes,
    produce_raw,
    raw_batch,
    record_rss,
    reset_peak_rss,
    rss_bytes,
)
from tests.support.kafka_workload import confluent_create_topic

from tidelog.client.wire import WireClient
from tidelog.protocol.compression import Compression
from tidelog.protocol.records import SimpleRecord, encode_batch
from tidelog.testing import Broker

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

CORRUPT_MESSAGE = 2
COMPACTED = "bomb-target"
HEALTH = "bomb-health"
MIB = 1 << 20
LIMIT = 32 * 1048588  # 32 x Kafka's default message.max.bytes
PEAK_GROWTH_BOUND = 96 * MIB
# The largest bomb of each codec whose batch fits max.message.bytes (1 MiB): snappy's is a lying length.
INFLATED = {
    Compression.GZIP: 512 * MIB,
    Compression.ZSTD: 1024 * MIB,
    Compression.LZ4: 128 * MIB,
    Compression.SNAPPY: 1024 * MIB,
}


@pytest.fixture(scope="module")
def topics(broker: Broker) -> None:
    confluent_create_topic(broker.bootstrap_servers, COMPACTED, 1, config={"cleanup.policy": "compact"})
    confluent_create_topic(broker.bootstrap_servers, HEALTH, 1)


@pytest.mark.parametrize("codec", list(INFLATED), ids=lambda c: c.name.lower())
def test_bomb_is_refused_in_bounded_memory(broker: Broker, topics: None, codec: Compression) -> None:
    pid = broker.pid
    assert pid is not None
    batch = raw_batch(bomb(codec, INFLATED[codec]), codec=codec)
    assert len(batch) < MIB
    before = rss_bytes(pid)
    reset_peak_rss(pid)  # this bomb's peak, not an earlier case's
    with WireClient("127.0.0.1", broker.port, timeout=30) as client:
        error_code, message = produce_raw(client, COMPACTED, batch)
    assert error_code == CORRUPT_MESSAGE, (error_code, message)
    assert message is not None
    assert f"{codec.name} payload" in message
    assert f"limit of {LIMIT}" in message, message
    grew = peak_rss_bytes(pid) - before
    record_rss(
        f"{codec.name} decompression bomb ({INFLATED[codec] / MIB:,.0f} MiB inflated)", before, before + grew
    )
    assert grew < PEAK_GROWTH_BOUND, f"peak RSS rose {grew / MIB:.0f} MiB for a {codec.name} bomb"
    confluent_round_trip(broker.bootstrap_servers, HEALTH)


def test_a_batch_under_the_cap_is_accepted(broker: Broker, topics: None) -> None:
    """8 MiB inflated from a few KiB is within 32 x max.message.bytes: appended (a legitimate, very
    compressible batch is not a bomb)."""
    record = SimpleRecord(key=b"k", value=bytes(8 * MIB), timestamp=int(time.time() * 1000))
    batch = encode_batch([record], compression=Compression.ZSTD)
    assert len(batch) < 4096
    with WireClient("127.0.0.1", broker.port, timeout=30) as client:
        assert produce_raw(client, COMPACTED, batch) == (0, None)
