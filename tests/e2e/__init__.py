"""End-to-end tests against the system running as separate processes."""
