"""Every pipeline in examples/ on small data, through the same runner the README's command uses.

The README's command itself (``tidelog pipeline``) runs once, in a process of its own; its twin
``python -m tidelog.spark.pipeline`` runs in test_exactly_once.py, and both share ``pipeline.run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.spark.conftest import Kafka
from tests.support.murmur2 import java_partition

from tidelog.spark import pipeline

pytestmark = pytest.mark.clients

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KAFKA_JOB = Path(__file__).resolve().parent / "pipelines" / "kafka_connector_mirror.py"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _run(spark: Any, bootstrap: str, tmp_path: Path, example: str | Path, *args: str) -> None:
    module, parsed = pipeline.parse_args(
        [
            str(EXAMPLES / example),
            "--bootstrap-server",
            bootstrap,
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--available-now",
            *args,
        ]
    )
    query = pipeline.start(module, parsed, spark)
    query.awaitTermination(180)
    assert query.exception() is None


def test_transform(spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path) -> None:
    source, sink = topic_name("in"), topic_name("out")
    kafka.create(source, 2)
    kafka.create(sink, 1)
    kafka.produce(
        source,
        [
            {"key": b"k%d" % i, "value": b"hello %d" % i, "partition": i % 2, "headers": [("i", b"%d" % i)]}
            for i in range(300)
        ],
    )
    _run(
        spark,
        bootstrap,
        tmp_path,
        "transform.py",
        "--source",
        source,
        "--sink",
        sink,
        "--max-offsets-per-trigger",
        "100",
        "--kafka",
        "security.protocol=PLAINTEXT",
        "--kafka",
        "fetch.max.wait.ms=100",
    )
    got = sorted(((r[0], r[1], r[7]) for r in kafka.read(sink, 1)), key=repr)
    expected = sorted(((b"k%d" % i, b"HELLO %d" % i, (("i", b"%d" % i),)) for i in range(300)), key=repr)
    assert got == expected


def test_windowed_counts(spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path) -> None:
    source, sink = topic_name("clicks"), topic_name("counts")
    kafka.create(source, 2)
    kafka.create(sink, 1)
    events = [("a", 1), ("a", 20), ("b", 30), ("a", 59), ("b", 45), ("a", 61), ("b", 119), ("c", 130)]
    records = [
        {"key": k.encode(), "value": b"1", "timestamp": T0 + s * 1000, "partition": i % 2}
        for i, (k, s) in enumerate(events)
    ]
    records.append(
        {"key": b"late", "value": b"1", "timestamp": T0 + 600_000, "partition": 0}
    )  # moves the watermark
    kafka.produce(source, records)
    _run(
        spark,
        bootstrap,
        tmp_path,
        "windowed_counts.py",
        "--source",
        source,
        "--sink",
        sink,
        "--window",
        "1 minute",
        "--watermark",
        "30 seconds",
    )
    got = {r[0].decode(): json.loads(r[1]) for r in kafka.read(sink, 1)}
    assert got == {
        "a@2026-01-01T00:00:00Z": {
            "key": "a",
            "window_start": "2026-01-01T00:00:00Z",
            "window_end": "2026-01-01T00:01:00Z",
            "count": 3,
        },
        "b@2026-01-01T00:00:00Z": {
            "key": "b",
            "window_start": "2026-01-01T00:00:00Z",
            "window_end": "2026-01-01T00:01:00Z",
            "count": 2,
        },
        "a@2026-01-01T00:01:00Z": {
            "key": "a",
            "window_start": "2026-01-01T00:01:00Z",
            "window_end": "2026-01-01T00:02:00Z",
            "count": 1,
        },
        "b@2026-01-01T00:01:00Z": {
            "key": "b",
            "window_start": "2026-01-01T00:01:00Z",
            "window_end": "2026-01-01T00:02:00Z",
            "count": 1,
        },
        "c@2026-01-01T00:02:00Z": {
            "key": "c",
            "window_start": "2026-01-01T00:02:00Z",
            "window_end": "2026-01-01T00:03:00Z",
            "count": 1,
        },
    }  # the "late" window (00:10) is still open: the watermark (00:09:30) has not passed its end
    assert len(kafka.read(sink, 1)) == 5  # append mode: each window written once


def test_stream_join(spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path) -> None:
    orders, payments, sink = topic_name("orders"), topic_name("payments"), topic_name("paid")
    for t in (orders, payments, sink):
        kafka.create(t, 1)
    minute = 60_000
    kafka.produce(
        orders,
        [
            {"key": b"o1", "value": b"book", "timestamp": T0},
            {"key": b"o2", "value": b"pen", "timestamp": T0 + minute},
            {"key": b"o3", "value": b"lamp", "timestamp": T0 + 2 * minute},
        ],
    )
    kafka.produce(
        payments,
        [
            {"key": b"o1", "value": b"9.99", "timestamp": T0 + 5 * minute},  # within the hour: matches
            {"key": b"o3", "value": b"30.00", "timestamp": T0 + 200 * minute},  # too late: no match
            {"key": b"o4", "value": b"1.00", "timestamp": T0 + 6 * minute},  # no such order
            {"key": b"o2", "value": b"0.50", "timestamp": T0},  # before the order: no match
        ],
    )
    _run(
        spark,
        bootstrap,
        tmp_path,
        "stream_join.py",
        "--orders",
        orders,
        "--payments",
        payments,
        "--sink",
        sink,
    )
    got = [(r[0], json.loads(r[1])) for r in kafka.read(sink, 1)]
    assert got == [
        (
            b"o1",
            {
                "order_id": "o1",
                "order": "book",
                "payment": "9.99",
                "order_time": "2026-01-01T00:00:00.000Z",
                "payment_time": "2026-01-01T00:05:00.000Z",
            },
        )
    ]


def test_archive_parquet(spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path) -> None:
    source = topic_name("events")
    kafka.create(source, 2)
    day = 86_400_000
    kafka.produce(
        source,
        [
            {"value": b"e%d" % i, "partition": i % 2, "timestamp": T0 + (i % 3) * day - 1000}
            for i in range(90)
        ],
    )
    out = tmp_path / "archive"
    _run(
        spark,
        bootstrap,
        tmp_path,
        "archive_parquet.py",
        "--source",
        source,
        "--path",
        str(out),
        "--max-offsets-per-trigger",
        "40",
    )
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("date=")) == [
        "date=2025-12-31",
        "date=2026-01-01",
        "date=2026-01-02",
    ]
    rows = spark.read.parquet(str(out)).collect()
    got = sorted((r.value, str(r.date)) for r in rows)
    expected = sorted(
        (b"e%d" % i, datetime.fromtimestamp((T0 + (i % 3) * day - 1000) / 1000, UTC).date().isoformat())
        for i in range(90)
    )
    assert got == expected


def test_the_readme_command_runs_a_pipeline(
    bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    """``tidelog pipeline examples/transform.py ...`` (the console script) in a process of its own."""
    source, sink = topic_name("in"), topic_name("out")
    kafka.create(source, 1)
    kafka.create(sink, 1)
    kafka.produce(source, [{"value": b"abc%d" % i} for i in range(50)])
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "tidelog"),
            "pipeline",
            str(EXAMPLES / "transform.py"),
            "--master",
            "local[1]",
            "--bootstrap-server",
            bootstrap,
            "--checkpoint",
            str(tmp_path / "cp"),
            "--available-now",
            "--conf",
            "spark.ui.enabled=false",
            "--source",
            source,
            "--sink",
            sink,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(r[1] for r in kafka.read(sink, 1)) == sorted(b"ABC%d" % i for i in range(50))


def test_a_format_kafka_pipeline_runs_with_only_the_format_swapped(
    spark: Any, bootstrap: str, kafka: Kafka, topic_name: Any, tmp_path: Path
) -> None:
    """tests/spark/pipelines/kafka_connector_mirror.py, written for format("kafka"), runs unchanged but
    for the format name: Java client options, groupIdPrefix, fetchOffset.*, and load().writeStream."""
    text = KAFKA_JOB.read_text()
    assert text.count('.format("kafka")') == 2
    job = tmp_path / "mirror_job.py"
    job.write_text(text.replace('.format("kafka")', '.format("tidelog")'))
    source, sink = topic_name("orders"), topic_name("orders-mirror")
    kafka.create(source, 2)
    kafka.create(sink, 3)
    records = [
        {
            "key": b"customer-%d" % (i % 17),
            "value": b"order %d" % i,
            "partition": i % 2,
            "timestamp": T0 + i,
            "headers": [("n", b"%d" % i)],
        }
        for i in range(600)
    ]
    kafka.produce(source, records)
    _run(spark, bootstrap, tmp_path, job, "--source", source, "--sink", sink)
    got = kafka.read(sink, 3)
    assert sorted((r[0], r[1], r[5], r[7]) for r in got) == sorted(
        (r["key"], r["value"], r["timestamp"], (("n", r["headers"][0][1]),)) for r in records
    )
    assert all(r[3] == java_partition(r[0], 3) for r in got)  # where format("kafka") puts each key
