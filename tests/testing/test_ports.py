"""The shared free-port helper: ports that are free, distinct, for each kind asked."""

from __future__ import annotations

import socket

import pytest

from trafficmgr.testing.ports import TCP_AND_UDP, free_port, free_ports


def test_a_free_tcp_port_can_be_bound_and_listened_on() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_a_dns_port_is_free_for_tcp_and_udp_alike() -> None:
    port = free_port(TCP_AND_UDP)
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", port))
        udp.bind(("127.0.0.1", port))


def test_ports_asked_together_differ() -> None:
    ports = free_ports(8, TCP_AND_UDP)
    assert len(set(ports)) == 8


def test_an_ipv6_port_is_free_on_the_ipv6_loopback() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        port = free_port(host="::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", port))


def test_a_count_below_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="count"):
        free_ports(0)
