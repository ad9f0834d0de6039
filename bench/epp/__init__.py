"""Endpoint picker benchmarks: Envoy + the EPP, the picker's CPU per request."""
