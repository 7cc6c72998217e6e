"""tidelog.testing: start a real tidelog broker for your own tests (no JVM, no Docker)."""
