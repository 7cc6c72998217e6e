"""Authentication, authorization and quotas: who may do what, how fast."""
