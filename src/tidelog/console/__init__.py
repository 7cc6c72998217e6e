"""The web console (``tidelog console``): a Kafka client that serves pages about a cluster.

It speaks only public Kafka APIs through confluent-kafka, so it works against Apache Kafka as well as
tidelog; it never imports ``tidelog.server`` (an import-linter contract holds that).
"""
