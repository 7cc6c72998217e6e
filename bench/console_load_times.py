"""The web console's page load times against a large topic, in Debian's headless Chromium.

    .venv/bin/python bench/console_load_times.py [--records 10000000] [--partitions 6]

Starts a tidelog broker in a temporary directory, produces ``--records`` JSON records of about 100 bytes
into topic ``big`` (confluent-kafka, lz4, large batches), commits a consumer group halfway, serves the
console (built as ``tidelog console`` builds it) on a free loopback port and loads each page three times
through /usr/bin/chromedriver. Prints the median time to the response and to the load event (Navigation
Timing) and the page's size. The browser only ever asks for bounded pages of records. Not a test:
figures are printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tidelog.console.app import LOOPBACK_HOSTS, build
from tidelog.testing import Broker

NAVIGATION = (
    "const n = performance.getEntriesByType('navigation')[0];"
    "return [n.responseEnd - n.requestStart, n.loadEventEnd - n.startTime, n.transferSize];"
)


def produce(bootstrap: str, records: int, partitions: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("big", partitions, 1)])["big"].result(30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
        }
    )
    started = time.monotonic()
    value = b'{"n": %d, "payload": "' + b"x" * 60 + b'"}'
    for i in range(records):
        while True:
            try:
                producer.produce("big", key=b"k%d" % i, value=value % i)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush()
    half = [TopicPartition("big", p, records // partitions // 2) for p in range(partitions)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("analytics", half)])["analytics"].result(
        30
    )
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--partitions", type=int, default=6)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="console-bench-") as workdir,
        Broker({}, data_dir=Path(workdir) / "data", run_dir=Path(workdir) / "run") as broker,
    ):
        seconds = produce(broker.bootstrap_servers, args.records, args.partitions)
        print(f"produced {args.records:,} records in {seconds:.1f} s")
        app = build({"bootstrap.servers": broker.bootstrap_servers}, allowed_hosts=LOOPBACK_HOSTS)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
        hour_ago = int(time.time() * 1000) - 3_600_000
        pages = [
            "/",
            "/topics",
            "/topics/big",
            "/topics/big/messages",
            f"/topics/big/messages?partition=0&mode=offset&offset={args.records // args.partitions // 2}",
            f"/topics/big/messages?mode=timestamp&timestamp={hour_ago}",
            f"/topics/big/messages?key=k{args.records - 1}",
            "/topics/big/messages?partition=0&mode=latest&limit=500&format=hex",
            "/groups",
            "/group?id=analytics",
            "/transactions",
        ]
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ):
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={workdir}/chromium")
        driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)
        try:
            print(f"{'page':<70} {'response':>9} {'load':>7} {'bytes':>8}")
            for path in pages:
                runs = []
                for _ in range(3):
                    driver.get(url + path)
                    runs.append(driver.execute_script(NAVIGATION))
                response = statistics.median(r[0] for r in runs)
                load = statistics.median(r[1] for r in runs)
                print(f"{path:<70} {response:>7.0f}ms {load:>5.0f}ms {runs[-1][2]:>8}")
        finally:
            driver.quit()
            server.should_exit = True
            thread.join(timeout=30)


if __name__ == "__main__":
    main()
