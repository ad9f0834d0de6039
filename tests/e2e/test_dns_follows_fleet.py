"""``manage.py dnsserver`` follows configuration changes without a restart.

The DNS server of the cluster reads the fleet from the database at start; each process reads it
again every ``--fleet-poll`` seconds (default 5). An operator moves us-east's ingress address
through the REST API: the US client's answer must carry the new address within two polls, and
the old one again after it is moved back.
"""

from __future__ import annotations

import dns.message
import dns.query
import pytest

from trafficmgr.testing.topology.cluster import Cluster
from trafficmgr.testing.topology.observe import CLIENTS, Api, ecs_query
from trafficmgr.testing.topology.processes import wait_until

pytestmark = pytest.mark.integration

MODEL = "llama-3-70b"
REGION = "us-east"
NEW = "198.51.100.99"
POLL_S = 5.0


def us_addresses(cluster: Cluster, name: str) -> set[str]:
    query = ecs_query(name, CLIENTS["US"])
    reply = dns.query.udp(query, cluster.dns[0], port=cluster.dns[1], timeout=1.0)
    return {item.address for rrset in reply.answer for item in rrset if hasattr(item, "address")}


def test_a_moved_ingress_address_reaches_dns_answers(cluster: Cluster) -> None:
    api = Api(cluster.url, cluster.tokens["admin"])
    name = f"{MODEL}.{cluster.fleet['zone']}"
    old = api.call("GET", f"regions/{REGION}/")["addresses"]
    cluster.wait_settled()
    wait_until(lambda: us_addresses(cluster, name) & set(old), 30, f"DNS to answer {REGION}")
    api.call("PATCH", f"regions/{REGION}/", {"addresses": [NEW]})
    try:
        wait_until(
            lambda: NEW in us_addresses(cluster, name),
            2 * POLL_S + 5,
            f"DNS to answer {REGION}'s new address {NEW}",
            every=0.2,
        )
    finally:
        api.call("PATCH", f"regions/{REGION}/", {"addresses": old})
    wait_until(
        lambda: us_addresses(cluster, name) & set(old),
        2 * POLL_S + 5,
        f"DNS to answer {REGION}'s address {old} again",
        every=0.2,
    )
