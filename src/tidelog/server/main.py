"""Process entry for ``tidelog broker``: logging, uvloop, signals, start, GC freeze, wait, graceful stop.

Invariants: SIGTERM and SIGINT trigger one graceful shutdown (a second signal while stopping is ignored);
the ready file, when asked for, is written atomically only after every client listener is bound, and
holds the real ``HOST:PORT`` of the first one (useful with port 0). A broker that cannot start (a log dir
of another cluster, an unreadable ``meta.properties`` or topic metadata store, a port in use) logs one
ERROR line saying why and naming the file or listener, and the process exits with code 1: never a bare
traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
from pathlib import Path

from tidelog.coordinator.common import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from tidelog.server.config import BrokerConfig
from tidelog.server.log_format import log_handler
from tidelog.server.zk.client import KafkaZkClient
from tidelog.server.zk.errors import ZkError
from tidelog.storage.errors import StorageError
from tidelog.storage.meta_properties import new_cluster_id

__all__ = ["configure_logging", "run_broker"]

log = logging.getLogger("tidelog.main")


def configure_logging(level: str | None = None, fmt: str | None = None) -> None:
    """Logs to stderr as ``fmt`` (``log.format``; else ``TIDELOG_LOG_FORMAT``; else text), see log_format.py."""
    handler = log_handler(sys.stderr, fmt or os.environ.get("TIDELOG_LOG_FORMAT", "text"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("TIDELOG_LOG_LEVEL", "INFO")).upper())


def run_broker(config: BrokerConfig, *, ready_file: Path | None = None) -> int:
    """Run a broker until SIGTERM/SIGINT; returns the process exit code."""
    if not logging.getLogger().handlers:
        configure_logging(fmt=config.log_format if "log.format" in config.originals else None)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return asyncio.run(_main(config, ready_file))
    return uvloop.run(_main(config, ready_file))


async def _connect_zookeeper(config: BrokerConfig) -> tuple[KafkaZkClient, BrokerConfig]:
    """Cluster mode: the ZooKeeper session, and the config with the cluster's id (created by the first broker
    of a new cluster, as Kafka does)."""
    connect = config.zookeeper_connect
    assert connect is not None
    zk = await KafkaZkClient.connect(
        connect,
        session_timeout_ms=config.zookeeper_session_timeout_ms,
        connection_timeout_ms=config.zookeeper_connection_timeout_ms,
    )
    await zk.create_top_level_paths()
    cluster_id = await zk.create_or_get_cluster_id(new_cluster_id())
    if config.cluster_id is not None and config.cluster_id != cluster_id:
        await zk.close()
        raise ValueError(
            f"cluster.id {config.cluster_id} does not match the cluster's id {cluster_id} in ZooKeeper"
        )
    log.info("connected to ZooKeeper at %s: cluster %s", connect, cluster_id)
    # An internal topic another broker created keeps its partition count whatever this config says: the
    # coordinators map keys onto the count the topic has (Kafka reads it from ZooKeeper too).
    config = cluster_defaults(config)
    offsets = await zk.get_topic_assignment(GROUP_METADATA_TOPIC_NAME)
    if offsets is not None:
        config = dataclasses.replace(config, offsets_topic_num_partitions=len(offsets.partitions))
    transactions = await zk.get_topic_assignment(TRANSACTION_STATE_TOPIC_NAME)
    if transactions is not None:
        config = dataclasses.replace(
            config, transaction_state_log_num_partitions=len(transactions.partitions)
        )
    session_file = os.environ.get(SESSION_FILE_ENV)
    if session_file:
        _write_session_file(zk, Path(session_file))
        zk.session.on_new_session(lambda _new: _write_session_file(zk, Path(session_file)))
    return zk, dataclasses.replace(config, cluster_id=cluster_id)


def cluster_defaults(config: BrokerConfig) -> BrokerConfig:
    """``config`` with Kafka's defaults for the internal topics' replication (3 replicas,
    ``transaction.state.log.min.isr`` 2), which a single node cannot have (its defaults are 1), for the keys
    that were not configured."""
    given = config.originals
    if "offsets.topic.replication.factor" not in given:
        config = dataclasses.replace(config, offsets_topic_replication_factor=3)
    if "transaction.state.log.replication.factor" not in given:
        config = dataclasses.replace(config, transaction_state_log_replication_factor=3)
    if "transaction.state.log.min.isr" not in given:
        config = dataclasses.replace(config, transaction_state_log_min_isr=2)
    return config


SESSION_FILE_ENV = "TIDELOG_ZK_SESSION_FILE"
"""Tests only (``tidelog.testing.Cluster.expire_session``): a file where the broker keeps its ZooKeeper
session's id and password, so a test can expire that session as a network partition would."""


def _write_session_file(zk: KafkaZkClient, path: Path) -> None:
    client_id = zk.session.client_id
    if client_id is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{client_id[0]:x} {client_id[1].hex()}\n", encoding="ascii")
    os.replace(tmp, path)


_GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two young-generation collections (CPython's default: 700)."""


def _freeze_startup_objects() -> None:
    """Move what startup built (modules, message classes, loaded logs and coordinators: tens of thousands
    of objects that live as long as the process) out of the garbage collector's reach, after collecting
    startup's garbage. Otherwise each full collection walks all of them: tens of milliseconds every few
    thousand requests, a large share of a small request's cost (issue 17).

    And collect the young generation every :data:`_GC_YOUNG_THRESHOLD` allocations instead of every 700: a
    request's objects die by reference count long before that, but each collection walks (and promotes)
    whatever requests are in flight then, parked fetches included; a fourteenth as many collections saved
    about 3 µs of an empty fetch's 25 µs of Python work (issue 17). Cyclic garbage waits a little longer
    for its collection: tens of thousands of small objects at most."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, older, oldest)


async def _main(config: BrokerConfig, ready_file: Path | None) -> int:
    from tidelog.server.broker import Broker

    loop = asyncio.get_running_loop()
    zk: KafkaZkClient | None = None
    try:
        if config.zookeeper_connect:
            zk, config = await _connect_zookeeper(config)
        broker = Broker(config, zk=zk)
    except (RuntimeError, OSError, ValueError, StorageError, ZkError) as exc:
        log.error("cannot start broker: %s", exc)
        if zk is not None:
            await zk.close()
        return 1
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except (OSError, ZkError) as exc:
        log.error("cannot start broker: %s", exc)  # a ListenerBindError names the listener
        broker.logs.shutdown()
        if zk is not None:
            await zk.close()
        return 1
    _freeze_startup_objects()
    if ready_file is not None:
        tmp = ready_file.with_name(ready_file.name + ".tmp")
        tmp.write_text(f"{broker.host}:{broker.port}\n", encoding="ascii")
        os.replace(tmp, ready_file)
    await stop.wait()
    log.info("shutting down")
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        loop.add_signal_handler(sig, lambda: None)
    await broker.stop()
    if zk is not None:
        await zk.close()
    return 0
