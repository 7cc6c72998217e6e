"""Every broker config tidelog knows, with Kafka's names and defaults, and which of them change live.

Invariants:

- Names, types and defaults are Apache Kafka's (``KafkaConfig`` / ``ServerLogConfigs``, 3.x line), except
  where the docstring of :data:`BROKER_CONFIGS` says otherwise (tidelog is single-node by default, so it
  binds loopback, uses ``node.id=1`` and replication factor 1 for internal topics).
- Only :data:`DYNAMIC_BROKER_CONFIGS` are writable at run time; a key of
  :data:`KAFKA_DYNAMIC_BROKER_CONFIGS` (dynamic in Kafka, start-up only here) is refused with a message
  saying so, never silently ignored.
"""

from __future__ import annotations

from typing import Final

from .config_def import ConfigDef, index_by_name
from .metrics_listener import HttpListenerUrl
from .topic_defs import CLEANUP_POLICIES, COMPRESSION_TYPES, TIMESTAMP_TYPES, TOPIC_CONFIGS
from .validators import GreaterThan, Matches, OneOf, SubsetOf, at_least, between
from .values import INT_MAX, LONG_MAX, ConfigType

__all__ = ["BROKER_CONFIGS", "DEFAULT_PROTOCOL_MAP", "DYNAMIC_BROKER_CONFIGS", "KAFKA_DYNAMIC_BROKER_CONFIGS"]

B = ConfigType.BOOLEAN
S = ConfigType.STRING
I = ConfigType.INT  # noqa: E741
SH = ConfigType.SHORT
L = ConfigType.LONG
D = ConfigType.DOUBLE
LI = ConfigType.LIST
P = ConfigType.PASSWORD

DEFAULT_PROTOCOL_MAP: Final = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
"""``listener.security.protocol.map``'s default: each security protocol is also a listener name."""
_LONG_MAX_STR: Final = str(LONG_MAX)
_INT_MAX_STR: Final = str(INT_MAX)
_DOUBLE_MAX_STR: Final = "1.7976931348623157E308"
"""Java's ``Double.MAX_VALUE`` as Kafka writes it (Kafka's "unlimited" for rates)."""
_NAME_RE: Final = Matches(r"[A-Za-z0-9._-]+", "Must contain only ASCII letters, digits, '.', '_' and '-'")


# fmt: off
BROKER_CONFIGS: Final[dict[str, ConfigDef]] = index_by_name(
    [
        # ---- server basics ----
        ConfigDef("node.id", I, "1", "The id of this broker (synonym: broker.id). tidelog default 1 (Kafka: -1).", at_least(0)),
        ConfigDef("broker.id", I, None, "Legacy synonym of node.id; if both are set they must be equal.", at_least(0)),
        ConfigDef("cluster.id", S, None, "The cluster id; generated and kept in meta.properties when unset.", _NAME_RE),
        ConfigDef("broker.rack", S, None, "Rack of the broker, for rack-aware replica assignment."),
        ConfigDef("listeners", S, "PLAINTEXT://127.0.0.1:9092", "Comma-separated NAME://host:port URIs to listen on; empty host = all interfaces, port 0 = any free port. tidelog default binds loopback."),
        ConfigDef("advertised.listeners", S, None, "Listeners published to clients in Metadata, if different from listeners."),
        ConfigDef("listener.security.protocol.map", S, DEFAULT_PROTOCOL_MAP, "Map between listener names and security protocols, NAME:PROTOCOL pairs."),
        ConfigDef("inter.broker.listener.name", S, None, "Name of the listener used between brokers."),
        ConfigDef("security.inter.broker.protocol", S, "PLAINTEXT", "Security protocol used between brokers.", OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))),
        ConfigDef("controller.listener.names", LI, "", "Listener names used by a KRaft controller; tidelog does not listen on them."),
        ConfigDef("process.roles", LI, "", "KRaft roles; accepted for compatibility, tidelog is always a broker.", ignored=True),
        ConfigDef("controller.quorum.voters", LI, "", "KRaft controller quorum; accepted for compatibility.", ignored=True),
        ConfigDef("controller.quorum.bootstrap.servers", LI, "", "KRaft controller quorum; accepted for compatibility.", ignored=True),
        ConfigDef("metadata.log.dir", S, None, "KRaft metadata log directory; accepted for compatibility.", ignored=True),
        ConfigDef("inter.broker.protocol.version", S, None, "Kafka inter-broker protocol version; accepted for compatibility.", ignored=True),
        ConfigDef("log.message.format.version", S, None, "Deprecated Kafka setting; tidelog writes message format v2 only.", ignored=True),
        ConfigDef("zookeeper.connect", S, None, "ZooKeeper connection string host:port[,host:port][/chroot] (cluster mode)."),
        ConfigDef("zookeeper.session.timeout.ms", I, "18000", "ZooKeeper session timeout.", at_least(1)),
        ConfigDef("zookeeper.connection.timeout.ms", I, None, "Maximum time to wait to connect to ZooKeeper; session timeout when unset.", at_least(1)),
        # ---- threads and sockets ----
        ConfigDef("num.network.threads", I, "3", "Threads receiving requests and sending responses.", at_least(1)),
        ConfigDef("num.io.threads", I, "8", "Threads doing disk I/O for requests.", at_least(1)),
        ConfigDef("background.threads", I, "10", "Threads for background tasks.", at_least(1)),
        ConfigDef("queued.max.requests", I, "500", "Queued requests allowed before blocking the network threads.", at_least(1)),
        ConfigDef("num.recovery.threads.per.data.dir", I, "1", "Threads per data directory for log recovery at startup and flushing at shutdown.", at_least(1)),
        ConfigDef("socket.send.buffer.bytes", I, "102400", "SO_SNDBUF of the server sockets; -1 = OS default."),
        ConfigDef("socket.receive.buffer.bytes", I, "102400", "SO_RCVBUF of the server sockets; -1 = OS default."),
        ConfigDef("socket.request.max.bytes", I, "104857600", "Maximum bytes in a socket request.", at_least(1)),
        ConfigDef("socket.listen.backlog.size", I, "50", "Maximum queued pending connections (listen backlog).", at_least(1)),
        ConfigDef("connections.max.idle.ms", L, "600000", "Idle connections are closed after this many milliseconds."),
        # ---- SASL (server/security/sasl_config.py reads the listener.name.<l>. overrides) ----
        ConfigDef("sasl.enabled.mechanisms", LI, "SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms enabled on SASL_* listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and OAUTHBEARER are not supported). tidelog default both SCRAM mechanisms (Kafka: GSSAPI)."),
        ConfigDef("sasl.mechanism.inter.broker.protocol", S, "GSSAPI", "SASL mechanism brokers use between themselves when security.inter.broker.protocol is SASL_*."),
        ConfigDef("sasl.jaas.config", ConfigType.PASSWORD, None, "JAAS login line with this broker's own credentials for SASL between brokers; prefer listener.name.<listener>.<mechanism>.sasl.jaas.config."),
        ConfigDef("sasl.server.max.receive.size", I, "524288", "Maximum size of a request (and SASL token) before authentication.", at_least(1)),
        ConfigDef("connections.max.reauth.ms", L, "0", "Session lifetime of a SASL authentication (KIP-368): 0 never expires; otherwise a client must re-authenticate within it or be disconnected.", at_least(0)),
        ConfigDef("max.connections", I, _INT_MAX_STR, "Maximum connections allowed in the broker at any time.", at_least(0)),
        ConfigDef("max.connections.per.ip", I, _INT_MAX_STR, "Maximum connections allowed from each IP address.", at_least(0)),
        # ---- client quotas ----
        ConfigDef("quota.window.num", I, "11", "Number of samples kept to measure client quotas.", at_least(1)),
        ConfigDef("quota.window.size.seconds", I, "1", "Length of each client quota sample.", at_least(1)),
        ConfigDef("controller.quota.window.num", I, "11", "Number of samples kept to measure controller mutation quotas.", at_least(1)),
        ConfigDef("controller.quota.window.size.seconds", I, "1", "Length of each controller mutation quota sample.", at_least(1)),
        # ---- topics ----
        ConfigDef("num.partitions", I, "1", "Default number of partitions per topic.", at_least(1)),
        ConfigDef("default.replication.factor", I, "1", "Default replication factor for automatically created topics.", at_least(1)),
        ConfigDef("auto.create.topics.enable", B, "true", "Create a topic on first Metadata/produce for it."),
        ConfigDef("delete.topic.enable", B, "true", "Allow DeleteTopics."),
        ConfigDef("auto.leader.rebalance.enable", B, "true", "Move leadership back to preferred replicas periodically."),
        ConfigDef("leader.imbalance.check.interval.seconds", L, "300", "How often the controller checks for leader imbalance.", at_least(1)),
        ConfigDef("leader.imbalance.per.broker.percentage", I, "10", "Share of its preferred partitions a broker may not lead before the controller rebalances them.", at_least(0)),
        ConfigDef("unclean.leader.election.enable", B, "false", "Allow out-of-sync replicas to become leader (data loss)."),
        ConfigDef("controlled.shutdown.enable", B, "true", "Move leaderships off a broker before it stops (cluster mode)."),
        ConfigDef("controlled.shutdown.max.retries", I, "3", "Controlled shutdown attempts before stopping anyway.", at_least(0)),
        ConfigDef("controlled.shutdown.retry.backoff.ms", L, "5000", "Pause between controlled shutdown attempts.", at_least(0)),
        ConfigDef("min.insync.replicas", I, "1", "Minimum in-sync replicas for an acks=all produce to succeed.", at_least(1)),
        ConfigDef("compression.type", S, "producer", "Final compression of a topic's data; 'producer' keeps the producer's codec.", OneOf(COMPRESSION_TYPES)),
        ConfigDef("message.max.bytes", I, "1048588", "Largest record batch size allowed.", at_least(0)),
        ConfigDef("fetch.max.bytes", I, "57671680", "Maximum bytes returned for a fetch request.", at_least(1024)),
        # ---- log ----
        ConfigDef("log.dirs", LI, None, "Comma-separated data directories; log.dir is used when unset."),
        ConfigDef("log.dir", S, "./data", "Data directory used when log.dirs is unset. tidelog default ./data (Kafka: /tmp/kafka-logs)."),
        ConfigDef("log.segment.bytes", I, "1073741824", "Maximum size of a single log segment file.", at_least(14)),
        ConfigDef("log.roll.ms", L, None, "Roll a new segment after this time; log.roll.hours when unset.", at_least(1)),
        ConfigDef("log.roll.hours", I, "168", "Roll a new segment after this many hours.", at_least(1)),
        ConfigDef("log.roll.jitter.ms", L, None, "Maximum jitter subtracted from the roll time; log.roll.jitter.hours when unset.", at_least(0)),
        ConfigDef("log.roll.jitter.hours", I, "0", "Maximum jitter, in hours, subtracted from the roll time.", at_least(0)),
        ConfigDef("log.retention.ms", L, None, "Keep a segment this long; -1 = no time limit. Wins over minutes and hours.", at_least(-1)),
        ConfigDef("log.retention.minutes", I, None, "Retention in minutes; used when log.retention.ms is unset.", at_least(-1)),
        ConfigDef("log.retention.hours", I, "168", "Retention in hours; used when log.retention.ms and .minutes are unset.", at_least(-1)),
        ConfigDef("log.retention.bytes", L, "-1", "Maximum size of a partition's log before old segments are deleted; -1 = no limit."),
        ConfigDef("log.retention.check.interval.ms", L, "300000", "How often the retention check runs.", at_least(1)),
        ConfigDef("log.cleanup.policy", LI, "delete", "Default cleanup policy: delete and/or compact.", SubsetOf(CLEANUP_POLICIES)),
        ConfigDef("log.cleaner.enable", B, "true", "Run the log cleaner (compaction)."),
        ConfigDef("log.cleaner.threads", I, "1", "Number of log cleaner threads.", at_least(0)),
        ConfigDef("log.cleaner.min.cleanable.ratio", D, "0.5", "Minimum dirty/total ratio for a log to be cleaned.", between(0, 1)),
        ConfigDef("log.cleaner.delete.retention.ms", L, "86400000", "How long tombstones are retained in compacted topics.", at_least(0)),
        ConfigDef("log.cleaner.min.compaction.lag.ms", L, "0", "Minimum time a record stays uncompacted.", at_least(0)),
        ConfigDef("log.cleaner.max.compaction.lag.ms", L, _LONG_MAX_STR, "Maximum time a record stays ineligible for compaction.", at_least(1)),
        ConfigDef("log.cleaner.backoff.ms", L, "15000", "Sleep time of the cleaner when there is nothing to clean.", at_least(0)),
        ConfigDef("log.cleaner.dedupe.buffer.size", L, "134217728", "Memory for log deduplication across all cleaner threads."),
        ConfigDef("log.cleaner.io.buffer.size", I, "524288", "I/O buffer memory for the cleaner.", at_least(0)),
        ConfigDef("log.cleaner.io.max.bytes.per.second", D, _DOUBLE_MAX_STR, "The cleaner's reads plus writes are throttled to this many bytes per second on average (default: unlimited).", GreaterThan(0)),
        ConfigDef("log.index.interval.bytes", I, "4096", "Bytes between offset index entries.", at_least(0)),
        ConfigDef("log.index.size.max.bytes", I, "10485760", "Maximum size of an offset or time index file.", at_least(4)),
        ConfigDef("log.preallocate", B, "false", "Preallocate segment files."),
        ConfigDef("log.max.open.segments", I, None, "Segments (active or not) whose files stay open; the least recently used beyond it are closed and reopen on their next use. Each holds at most four descriptors and two memory maps, so this bounds both however many partitions the broker has. Unset: half the open-files limit (RLIMIT_NOFILE, raised to its hard limit at start) over four, and at most half of vm.max_map_count over two. tidelog only.", at_least(1)),
        ConfigDef("log.flush.interval.messages", L, _LONG_MAX_STR, "Messages accumulated on a partition before an fsync.", at_least(1)),
        ConfigDef("log.flush.interval.ms", L, None, "Maximum time data sits unflushed; log.flush.scheduler.interval.ms when unset.", at_least(0)),
        ConfigDef("log.flush.scheduler.interval.ms", L, _LONG_MAX_STR, "How often the flusher checks whether any log needs flushing.", at_least(0)),
        ConfigDef("log.flush.offset.checkpoint.interval.ms", I, "60000", "How often the recovery point checkpoint is written.", at_least(0)),
        ConfigDef("log.flush.start.offset.checkpoint.interval.ms", I, "60000", "How often the log start offset checkpoint is written.", at_least(0)),
        ConfigDef("log.segment.delete.delay.ms", L, "60000", "Delay before a deleted segment's files are removed (topic: file.delete.delay.ms).", at_least(0)),
        ConfigDef("log.message.timestamp.type", S, "CreateTime", "CreateTime or LogAppendTime.", OneOf(TIMESTAMP_TYPES)),
        ConfigDef("log.message.timestamp.difference.max.ms", L, _LONG_MAX_STR, "Deprecated: maximum difference between a record's CreateTime and the broker's time.", at_least(0)),
        ConfigDef("log.message.timestamp.before.max.ms", L, _LONG_MAX_STR, "How far in the past a CreateTime may be.", at_least(0)),
        ConfigDef("log.message.timestamp.after.max.ms", L, _LONG_MAX_STR, "How far in the future a CreateTime may be.", at_least(0)),
        # ---- consumer groups and offsets ----
        ConfigDef("offsets.topic.num.partitions", I, "50", "Partitions of __consumer_offsets (do not change after creation).", at_least(1)),
        ConfigDef("offsets.topic.replication.factor", SH, "1", "Replication factor of __consumer_offsets. tidelog default 1 (Kafka: 3).", at_least(1)),
        ConfigDef("offsets.topic.segment.bytes", I, "104857600", "Segment size of __consumer_offsets.", at_least(1)),
        ConfigDef("offsets.topic.compression.codec", I, "0", "Compression codec of __consumer_offsets (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).", between(0, 4)),
        ConfigDef("offsets.load.buffer.size", I, "5242880", "Batch size for reading offsets segments when loading a coordinator.", at_least(1)),
        ConfigDef("offsets.commit.timeout.ms", I, "5000", "Offset commit waits this long for the offsets topic append.", at_least(1)),
        ConfigDef("offsets.retention.minutes", I, "10080", "Committed offsets of an empty group are kept this long.", at_least(1)),
        ConfigDef("offsets.retention.check.interval.ms", L, "600000", "How often stale offsets are checked.", at_least(1)),
        ConfigDef("offset.metadata.max.bytes", I, "4096", "Maximum size of the metadata string of an offset commit."),
        ConfigDef("group.initial.rebalance.delay.ms", I, "3000", "Time to wait for more members before the first rebalance of a new group."),
        ConfigDef("group.min.session.timeout.ms", I, "6000", "Minimum session timeout for a classic group member."),
        ConfigDef("group.max.session.timeout.ms", I, "1800000", "Maximum session timeout for a classic group member."),
        ConfigDef("group.max.size", I, _INT_MAX_STR, "Maximum members of a single consumer group.", at_least(1)),
        ConfigDef("group.coordinator.rebalance.protocols", LI, "classic,consumer", "Enabled rebalance protocols.", SubsetOf(("classic", "consumer", "share"))),
        ConfigDef("group.consumer.session.timeout.ms", I, "45000", "Session timeout of consumer-protocol (KIP-848) members.", at_least(1)),
        ConfigDef("group.consumer.min.session.timeout.ms", I, "45000", "Minimum consumer-protocol session timeout.", at_least(1)),
        ConfigDef("group.consumer.max.session.timeout.ms", I, "60000", "Maximum consumer-protocol session timeout.", at_least(1)),
        ConfigDef("group.consumer.heartbeat.interval.ms", I, "5000", "Heartbeat interval of consumer-protocol members.", at_least(1)),
        ConfigDef("group.consumer.min.heartbeat.interval.ms", I, "5000", "Minimum consumer-protocol heartbeat interval.", at_least(1)),
        ConfigDef("group.consumer.max.heartbeat.interval.ms", I, "15000", "Maximum consumer-protocol heartbeat interval.", at_least(1)),
        ConfigDef("group.consumer.max.size", I, _INT_MAX_STR, "Maximum members of a consumer-protocol group.", at_least(1)),
        ConfigDef("group.consumer.assignors", LI, "uniform,range", "Server-side assignors, preferred first."),
        # ---- share groups (KIP-932; Kafka's ShareGroupConfig defaults and bounds) ----
        ConfigDef("group.share.record.lock.duration.ms", I, "30000", "How long a share consumer holds a record it acquired before it is released (default of the group config share.record.lock.duration.ms).", at_least(1000)),
        ConfigDef("group.share.min.record.lock.duration.ms", I, "15000", "Minimum record lock duration a share group may set.", at_least(1000)),
        ConfigDef("group.share.max.record.lock.duration.ms", I, "60000", "Maximum record lock duration a share group may set.", at_least(1000)),
        ConfigDef("group.share.delivery.count.limit", I, "5", "Deliveries of a record before it is archived (default of share.delivery.count.limit).", between(2, 10)),
        ConfigDef("group.share.partition.max.record.locks", I, "2000", "Records a share-partition may have in flight.", between(100, 10000)),
        ConfigDef("group.share.session.timeout.ms", I, "45000", "Session timeout of share group members.", at_least(1)),
        ConfigDef("group.share.heartbeat.interval.ms", I, "5000", "Heartbeat interval of share group members.", at_least(1)),
        ConfigDef("group.share.max.size", I, "200", "Maximum members of a share group.", between(1, 1000)),
        ConfigDef("share.coordinator.state.topic.num.partitions", I, "50", "Partitions of __share_group_state.", at_least(1)),
        ConfigDef("errors.deadletterqueue.auto.create.topics.enable", B, "false", "KIP-1191: create a share group's missing dead-letter topic (num.partitions, default.replication.factor) when it is first written."),
        ConfigDef("errors.deadletterqueue.topic.name.prefix", S, "dlq.", "KIP-1191: the prefix an automatically created dead-letter topic's name must have (empty: any name)."),
        ConfigDef("share.coordinator.state.topic.replication.factor", SH, "1", "Replication factor of __share_group_state. tidelog default 1 (Kafka: 3).", at_least(1)),
        ConfigDef("share.coordinator.state.topic.segment.bytes", I, "104857600", "Segment size of __share_group_state.", at_least(1)),
        ConfigDef("share.coordinator.load.buffer.size", I, "5242880", "Batch size for reading __share_group_state segments.", at_least(1)),
        # ---- transactions and producer ids ----
        ConfigDef("transaction.state.log.num.partitions", I, "50", "Partitions of __transaction_state.", at_least(1)),
        ConfigDef("transaction.state.log.replication.factor", SH, "1", "Replication factor of __transaction_state. tidelog default 1 (Kafka: 3).", at_least(1)),
        ConfigDef("transaction.state.log.min.isr", I, "1", "min.insync.replicas of __transaction_state. tidelog default 1 (Kafka: 2).", at_least(1)),
        ConfigDef("transaction.state.log.segment.bytes", I, "104857600", "Segment size of __transaction_state.", at_least(1)),
        ConfigDef("transaction.state.log.load.buffer.size", I, "5242880", "Batch size for reading transaction log segments.", at_least(1)),
        ConfigDef("transaction.max.timeout.ms", I, "900000", "Maximum transaction timeout a producer may request.", at_least(1)),
        ConfigDef("transaction.two.phase.commit.enable", B, "false", "Let transactional producers initialise with Enable2Pc (KIP-939): their transactions are never aborted by their timeout, and a new session may keep and finish one (InitProducerId KeepPreparedTxn)."),
        ConfigDef("request.timeout.ms", I, "30000", "How long the transaction coordinator waits for its log appends and for other brokers to answer its transaction markers.", at_least(1)),
        ConfigDef("transactional.id.expiration.ms", I, "604800000", "A transactional id without updates expires after this time.", at_least(1)),
        ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", I, "10000", "How often timed-out transactions are rolled back.", at_least(1)),
        ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", I, "3600000", "How often expired transactional ids are removed.", at_least(1)),
        ConfigDef("producer.id.expiration.ms", I, "86400000", "Producer id state expires after this time without writes.", at_least(1)),
        ConfigDef("producer.id.expiration.check.interval.ms", I, "600000", "How often expired producer ids are removed.", at_least(1)),
        ConfigDef("max.incremental.fetch.session.cache.slots", I, "1000", "Maximum incremental fetch sessions kept (KIP-227; 0: sessions declined).", at_least(0)),
        ConfigDef("min.incremental.fetch.session.eviction.ms", I, "120000", "A fetch session idle this long may be evicted for a new one; a younger one only by a more valuable (follower's, or more partitions) session once it is older than this.", at_least(0)),
        # ---- observability (issue 14) ----
        ConfigDef("metrics.listener", S, None, "Where the Prometheus endpoint (GET /metrics) listens, http://HOST:PORT (port 0 = any free port); off when unset. tidelog only.", HttpListenerUrl()),
        ConfigDef("log.format", S, "text", "Format of the broker's log lines on stderr: text, or json (one object per line). tidelog only.", OneOf(("text", "json"))),
        # ---- replication and purgatories ----
        ConfigDef("replica.fetch.wait.max.ms", I, "500", "Maximum wait of a follower fetch; must be below replica.lag.time.max.ms."),
        ConfigDef("replica.fetch.min.bytes", I, "1", "Minimum bytes a follower fetch waits for."),
        ConfigDef("replica.fetch.max.bytes", I, "1048576", "Bytes per partition a follower fetches.", at_least(0)),
        ConfigDef("replica.alter.log.dirs.io.max.bytes.per.second", L, _LONG_MAX_STR, "A replica moving between log dirs (AlterReplicaLogDirs) copies at most this many bytes per second on average, all moves together (default: unlimited).", at_least(1)),
        ConfigDef("replica.fetch.response.max.bytes", I, "10485760", "Maximum bytes of a follower fetch response.", at_least(0)),
        ConfigDef("replica.fetch.backoff.ms", I, "1000", "Sleep after a follower fetch error.", at_least(0)),
        ConfigDef("replica.lag.time.max.ms", L, "30000", "A follower that has not caught up for this long leaves the ISR."),
        ConfigDef("replica.socket.timeout.ms", I, "30000", "Socket timeout of follower fetches."),
        ConfigDef("replica.socket.receive.buffer.bytes", I, "65536", "SO_RCVBUF of follower fetch connections."),
        ConfigDef("replica.high.watermark.checkpoint.interval.ms", L, "5000", "How often the high watermark is checkpointed."),
        ConfigDef("num.replica.fetchers", I, "1", "Follower fetcher threads per source broker."),
        ConfigDef("leader.replication.throttled.rate", L, _LONG_MAX_STR, "Bytes/s this broker sends to followers of leader.replication.throttled.replicas (dynamic; unlimited by default).", at_least(0)),
        ConfigDef("follower.replication.throttled.rate", L, _LONG_MAX_STR, "Bytes/s this broker fetches for follower.replication.throttled.replicas (dynamic; unlimited by default).", at_least(0)),
        ConfigDef("replication.quota.window.num", I, "11", "Number of samples kept to measure replication throttles.", at_least(1)),
        ConfigDef("replication.quota.window.size.seconds", I, "1", "Length of each replication throttle sample.", at_least(1)),
        ConfigDef("fetch.purgatory.purge.interval.requests", I, "1000", "Purge interval (in requests) of the fetch purgatory."),
        ConfigDef("producer.purgatory.purge.interval.requests", I, "1000", "Purge interval (in requests) of the produce purgatory."),
        ConfigDef("delete.records.purgatory.purge.interval.requests", I, "1", "Purge interval (in requests) of the delete-records purgatory."),
        # ---- security: TLS (security/tls_config.py; each also settable per listener as listener.name.<name>.ssl.*) ----
        ConfigDef("ssl.keystore.type", S, "PEM", "Keystore format; tidelog reads PEM only (Kafka's default is JKS)."),
        ConfigDef("ssl.keystore.location", S, None, "PEM file holding the private key and the certificate chain of this broker."),
        ConfigDef("ssl.keystore.password", P, None, "Keystore password; unused for PEM keystores (use ssl.key.password)."),
        ConfigDef("ssl.key.password", P, None, "Password of an encrypted PEM private key."),
        ConfigDef("ssl.keystore.key", P, None, "The private key itself, PEM, instead of a keystore file."),
        ConfigDef("ssl.keystore.certificate.chain", S, None, "The certificate chain itself, PEM, with ssl.keystore.key."),
        ConfigDef("ssl.truststore.type", S, "PEM", "Truststore format; tidelog reads PEM only (Kafka's default is JKS)."),
        ConfigDef("ssl.truststore.location", S, None, "PEM file of the CA certificates peers are verified against."),
        ConfigDef("ssl.truststore.password", P, None, "Truststore password; unused for PEM truststores."),
        ConfigDef("ssl.truststore.certificates", P, None, "The trusted CA certificates themselves, PEM."),
        ConfigDef("ssl.client.auth", S, "none", "Client certificates on SSL listeners: required, requested or none.", OneOf(("required", "requested", "none"))),
        ConfigDef("ssl.protocol", S, "TLSv1.3", "Highest TLS protocol version (TLSv1.2 or TLSv1.3)."),
        ConfigDef("ssl.enabled.protocols", LI, "TLSv1.2,TLSv1.3", "TLS protocol versions enabled.", SubsetOf(("TLSv1.2", "TLSv1.3"))),
        ConfigDef("ssl.cipher.suites", LI, "", "TLS 1.2 cipher suites (OpenSSL or IANA names); empty = the library's defaults."),
        ConfigDef("ssl.endpoint.identification.algorithm", S, "https", "Verify the peer broker's host name against its certificate (https) or not (empty)."),
        ConfigDef("ssl.principal.mapping.rules", S, "DEFAULT", "Rules mapping a client certificate's subject DN to a principal name (Kafka's RULE:pattern/replacement/[LU] syntax)."),
        ConfigDef("ssl.keymanager.algorithm", S, None, "JSSE key manager algorithm; accepted for compatibility.", ignored=True),
        ConfigDef("ssl.trustmanager.algorithm", S, None, "JSSE trust manager algorithm; accepted for compatibility.", ignored=True),
        ConfigDef("ssl.secure.random.implementation", S, None, "JSSE SecureRandom implementation; accepted for compatibility.", ignored=True),
        # ---- security: authorization ----
        ConfigDef("authorizer.class.name", S, "", "The ACL authorizer: tidelog, or Kafka's class names org.apache.kafka.metadata.authorizer.StandardAuthorizer / kafka.security.authorizer.AclAuthorizer; empty = no authorization.", OneOf(("", "tidelog", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"))),
        ConfigDef("super.users", S, None, "Semicolon-separated principals (User:admin;User:ops) allowed everything by the authorizer."),
        ConfigDef("allow.everyone.if.no.acl.found", B, "false", "Whether the authorizer allows an operation on a resource that no ACL applies to."),
    ]
)
# fmt: on
"""Broker configs by Kafka name. Deliberate differences from Kafka's defaults, all for a single node that
runs without setup: ``listeners`` binds 127.0.0.1, ``node.id`` is 1, ``log.dir`` is ``./data``, and the
internal topics' replication factors (and ``transaction.state.log.min.isr``) are 1."""

# -- dynamic broker configs (KIP-226) ------------------------------------------------------------------

DYNAMIC_BROKER_CONFIGS: Final[frozenset[str]] = frozenset(
    {
        definition.broker_synonyms[0].name
        for definition in TOPIC_CONFIGS.values()
        if definition.broker_synonyms
    }
    | {
        "log.cleaner.backoff.ms",
        "producer.id.expiration.ms",
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
    }
    | {"replica.alter.log.dirs.io.max.bytes.per.second"}  # issue 15: log dir moves' throttle
)
"""Broker configs tidelog updates live (AlterConfigs / IncrementalAlterConfigs on a BROKER resource):
Kafka's ``DynamicLogConfig`` set (the head broker synonym of every topic config: ``log.retention.ms``,
``log.segment.bytes``, ``message.max.bytes``, ...; topics without an override take the new value at
once), plus ``log.cleaner.backoff.ms``, ``producer.id.expiration.ms``, the replication throttles
(``leader.replication.throttled.rate``, ``follower.replication.throttled.rate``) and
``replica.alter.log.dirs.io.max.bytes.per.second``. Every other broker config is
read-only; DescribeConfigs says so."""

KAFKA_DYNAMIC_BROKER_CONFIGS: Final[frozenset[str]] = frozenset(
    {
        "listeners",
        "listener.security.protocol.map",
        "num.io.threads",
        "num.network.threads",
        "num.replica.fetchers",
        "num.recovery.threads.per.data.dir",
        "background.threads",
        "max.connections",
        "max.connections.per.ip",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
    }
)
"""Broker configs Kafka updates dynamically but tidelog applies only at start-up (its threads, listeners
and cleaner buffers are set up once): altering one is refused with a message saying so, never ignored."""
