"""Command-line tools: tidelog broker, topics, produce, consume, configs."""
