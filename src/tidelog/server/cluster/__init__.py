"""The broker's cluster-mode parts: ZooKeeper-driven metadata, the controller, replica fetchers,
inter-broker requests."""
