"""Prometheus metrics of one broker, named as the Prometheus JMX exporter names Kafka's MBeans."""
