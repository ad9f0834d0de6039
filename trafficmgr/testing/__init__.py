"""What the test suite and the benchmarks share: free loopback ports.

- ``ports``: loopback ports free for the socket kinds a server binds (TCP, UDP, IPv6);

Only the benchmarks and the test suite import it; the product never does, and the runtime
image leaves it out (.dockerignore, pyproject.toml's package list).
"""
