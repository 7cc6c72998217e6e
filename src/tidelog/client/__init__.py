"""tidelog's own blocking Kafka client (wire codec, TLS, SASL), shared by the CLI and the web console."""
