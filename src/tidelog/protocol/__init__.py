"""Sans-I/O Kafka wire protocol: primitives, generated message schemas, codec, framing, record batches."""
