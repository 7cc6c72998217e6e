"""The scrape-time view of a broker: every gauge is read from the broker's state when Prometheus asks.

Invariants:
- Names and labels are those the Prometheus JMX exporter's standard Kafka rules (``kafka-2_0_0.yml``)
  give Kafka's MBeans, with ``lowercaseOutputName`` (label names keep Kafka's case: ``delayedOperation``,
  ``clientId``); consumer group lag is named as kafka-exporter names it (``kafka_consumergroup_*``).
  Kafka's histograms come out as the exporter emulates them: a summary with ``quantile`` labels and
  ``_count`` (tidelog adds ``_sum``).
- Nothing here is computed on the request path: :meth:`BrokerCollector.collect` runs on the broker's event
  loop when the endpoint is scraped and only reads.
- The per-topic ``BrokerTopicMetrics`` counters come with the all-topics total (no ``topic`` label), as
  Kafka registers both MBeans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .request_metrics import RequestMetrics, api_name
from .samples import Samples
from .topic_metrics import BrokerTopicMetrics

if TYPE_CHECKING:
    from tidelog.server.broker import Broker

__all__ = ["BrokerCollector", "BrokerMetrics", "QuotaValues"]

QuotaValues = Callable[[], Iterable[tuple[str, str, str, str, float]]]
"""The quota managers' sensors: (MBean type such as ``Produce``, attribute such as ``throttle-time``, user,
client id, value) for every measured client."""


class BrokerMetrics:
    """The hot-path counters of one broker and the hooks other parts fill in."""

    def __init__(self) -> None:
        self.requests = RequestMetrics()
        self.topics = BrokerTopicMetrics()
        self.quota_values: QuotaValues | None = None
        """Set by the broker to read its client quotas (``kafka_server_quota_*``); None: no quota series."""


def _summary(name: str, doc: str) -> Metric:
    return Metric(name, doc, "summary")


def _add_samples(family: Metric, labels: dict[str, str], samples: Samples) -> None:
    name = family.name
    for quantile, value in samples.quantiles():
        family.add_sample(name, {**labels, "quantile": str(quantile)}, value)
    family.add_sample(name + "_count", labels, samples.count)
    family.add_sample(name + "_sum", labels, samples.sum)


class BrokerCollector(Collector):
    """Reads one broker at scrape time (register it on the endpoint's own registry)."""

    def __init__(self, broker: Broker, metrics: BrokerMetrics) -> None:
        self._broker = broker
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_counters()
        yield from self._requests()
        yield from self._purgatories()
        yield from self._replica_manager()
        yield from self._controller()
        yield from self._logs()
        yield from self._cleaner_and_flush()
        yield from self._consumer_groups()
        yield from self._connections()
        yield from self._quotas()

    def _topic_counters(self) -> Iterator[Metric]:
        topics = self._metrics.topics.topics
        for metric, attr, doc in (
            ("messagesin", "messages_in", "Messages appended by producers (MessagesInPerSec)."),
            ("bytesin", "bytes_in", "Bytes of record batches appended by producers (BytesInPerSec)."),
            ("bytesout", "bytes_out", "Bytes of record data sent to consumers (BytesOutPerSec)."),
        ):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{metric}", doc)
            sample = family.name + "_total"
            total = 0
            for topic, counts in sorted(topics.items()):
                value = getattr(counts, attr)
                total += value
                family.add_sample(sample, {"topic": topic}, value)
            family.add_sample(sample, {}, total)
            yield family

    def _requests(self) -> Iterator[Metric]:
        requests = self._metrics.requests
        counts = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests handled (RequestsPerSec).",
            labels=["request", "version"],
        )
        for (api_key, version), n in sorted(requests.requests.items()):
            counts.add_metric([api_name(api_key), str(version)], n)
        yield counts
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses, NONE included (ErrorsPerSec).",
            labels=["request", "error"],
        )
        for request, error, n in requests.error_names():
            errors.add_metric([request, error], n)
        yield errors
        families: dict[str, Metric] = {}
        for name, request, parts in requests.latency():
            family = families.get(name)
            if family is None:
                family = families[name] = _summary(
                    f"kafka_network_requestmetrics_{name}", f"Request latency part {name}, in ms."
                )
            _add_samples(family, {"request": request}, parts)
        yield from families.values()

    def _purgatories(self) -> Iterator[Metric]:
        replicas = self._broker.replicas
        size = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting in a purgatory (PurgatorySize).",
            labels=["delayedOperation"],
        )
        size.add_metric(["Produce"], replicas.produce_purgatory.delayed)
        size.add_metric(["Fetch"], replicas.fetch_purgatory.delayed)
        yield size

    def _replica_manager(self) -> Iterator[Metric]:
        replicas = self._broker.replicas
        logs = self._broker.logs
        partitions = leaders = under_replicated = under_min_isr = 0
        for partition in replicas:
            partitions += 1
            if not partition.is_leader:
                continue
            leaders += 1
            isr = len(partition.isr)
            if isr < len(partition.assignment):
                under_replicated += 1
            plog = logs.get(partition.topic, partition.index)
            if plog is not None and isr < plog.config.min_insync_replicas:
                under_min_isr += 1
        prefix = "kafka_server_replicamanager_"
        for name, value, doc in (
            ("partitioncount", partitions, "Partitions on this broker."),
            ("leadercount", leaders, "Partitions this broker leads."),
            (
                "underreplicatedpartitions",
                under_replicated,
                "Led partitions whose ISR is smaller than the replicas.",
            ),
            (
                "underminisrpartitioncount",
                under_min_isr,
                "Led partitions whose ISR is below min.insync.replicas.",
            ),
            ("offlinereplicacount", 0, "Replicas on an offline log dir (tidelog stops on a failed dir)."),
        ):
            yield GaugeMetricFamily(prefix + name, doc, value=value)
        yield CounterMetricFamily(
            prefix + "isrshrinks", "ISR shrinks (IsrShrinksPerSec).", value=replicas.isr_shrinks
        )
        yield CounterMetricFamily(
            prefix + "isrexpands", "ISR expansions (IsrExpandsPerSec).", value=replicas.isr_expands
        )

    def _controller(self) -> Iterator[Metric]:
        broker = self._broker
        if broker.cluster is not None:
            active = broker.cluster.controller.is_active
        else:
            active = broker.metadata.controller_id == broker.node_id
        offline = 0
        if active:
            for topic in broker.metadata:
                offline += sum(1 for p in topic.partitions if not p.has_leader)
        prefix = "kafka_controller_kafkacontroller_"
        yield GaugeMetricFamily(
            prefix + "activecontrollercount", "1 on the active controller.", value=int(active)
        )
        yield GaugeMetricFamily(
            prefix + "offlinepartitionscount",
            "Partitions without a leader (on the active controller).",
            value=offline,
        )

    def _logs(self) -> Iterator[Metric]:
        size = GaugeMetricFamily(
            "kafka_log_log_size", "Bytes of a partition's log on disk.", labels=["topic", "partition"]
        )
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments of a partition's log.", labels=["topic", "partition"]
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "A partition's log start offset.", labels=["topic", "partition"]
        )
        end = GaugeMetricFamily(
            "kafka_log_log_logendoffset", "A partition's log end offset.", labels=["topic", "partition"]
        )
        for tp, plog in sorted(self._broker.logs, key=lambda item: (item[0].topic, item[0].partition)):
            labels = [tp.topic, str(tp.partition)]
            size.add_metric(labels, plog.size_in_bytes)
            segments.add_metric(labels, len(plog.segments))
            start.add_metric(labels, plog.log_start_offset)
            end.add_metric(labels, plog.log_end_offset)
        yield from (size, segments, start, end)

    def _cleaner_and_flush(self) -> Iterator[Metric]:
        cleaner_task = self._broker.log_cleaner
        stats = cleaner_task.last_stats
        prefix = "kafka_log_logcleaner_"
        yield GaugeMetricFamily(
            prefix + "max_dirty_percent",
            "Dirty ratio of the dirtiest compacted log, in percent.",
            value=int(100 * cleaner_task.cleaner.dirtiest_log_cleanable_ratio),
        )
        recopy = 100 * stats.bytes_written / stats.bytes_read if stats is not None and stats.bytes_read else 0
        yield GaugeMetricFamily(
            prefix + "cleaner_recopy_percent",
            "Bytes written / read by the last cleaning, in percent.",
            value=int(recopy),
        )
        yield GaugeMetricFamily(
            prefix + "max_clean_time_secs",
            "Duration of the last cleaning, in seconds.",
            value=0 if stats is None else stats.elapsed_ms // 1000,
        )
        flush = _summary("kafka_log_logflushstats_logflushrateandtimems", "Log flush (fsync) time, in ms.")
        _add_samples(flush, {}, self._broker.log_flusher.flush_times)
        yield flush

    def _consumer_groups(self) -> Iterator[Metric]:
        """kafka-exporter's names: committed offset and lag of every group this broker coordinates, for the
        partitions whose high watermark it knows (it holds a replica)."""
        broker = self._broker
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "A group's committed offset.",
            labels=["consumergroup", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset.",
            labels=["consumergroup", "topic", "partition"],
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "A group's lag summed over a topic.",
            labels=["consumergroup", "topic"],
        )
        coordinator = broker.groups.coordinator
        for shard_partition in coordinator.owned_partitions:
            shard = coordinator.shard(shard_partition)
            if shard is None or shard.loading:
                continue
            offsets = shard.state.offsets
            for group_id in sorted(offsets.group_ids()):
                for topic, by_partition in sorted(offsets.group_offsets(group_id).items()):
                    total = 0
                    for index, committed in sorted(by_partition.items()):
                        labels = [group_id, topic, str(index)]
                        current.add_metric(labels, committed.committed_offset)
                        partition = broker.replicas.get(topic, index)
                        if partition is None:
                            continue
                        behind = max(partition.high_watermark - committed.committed_offset, 0)
                        total += behind
                        lag.add_metric(labels, behind)
                    lag_sum.add_metric([group_id, topic], total)
        yield from (current, lag, lag_sum)

    def _connections(self) -> Iterator[Metric]:
        count = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections.",
            labels=["listener"],
        )
        per_listener = {bound.name: 0 for bound in self._broker.bound_listeners}
        for listener in self._broker.connection_listeners():
            name = listener or ""
            per_listener[name] = per_listener.get(name, 0) + 1
        for listener, n in sorted(per_listener.items()):
            count.add_metric([listener], n)
        yield count

    def _quotas(self) -> Iterator[Metric]:
        # the exporter's rules for kafka.server<type=(.+), user=(.+), client-id=(.+)><>([a-z-]+): an
        # empty user or client id (a quota by client id only, or by user only) is an absent label
        families: dict[str, GaugeMetricFamily] = {}
        for attribute, doc in _QUOTA_ATTRIBUTES.items():
            families[attribute] = GaugeMetricFamily(
                "kafka_server_quota_" + attribute.replace("-", "_"),
                doc,
                labels=["resource", "user", "clientId"],
            )
        hook = self._metrics.quota_values
        for resource, attribute, user, client_id, value in hook() if hook is not None else ():
            family = families.get(attribute)
            if family is not None:
                family.add_metric([resource, user, client_id], value)
        yield from families.values()


_QUOTA_ATTRIBUTES = {
    "throttle-time": "Average throttle time of a client's throttled requests in the quota window, in ms.",
    "byte-rate": "Bytes per second a client produced (Produce) or fetched (Fetch), as its quota measures them.",
    "request-time": "Handler time a client used, in percent of one thread, as request_percentage measures it.",
}
