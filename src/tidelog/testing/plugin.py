"""pytest plugin for tidelog.testing (registered through the pytest11 entry point)."""
