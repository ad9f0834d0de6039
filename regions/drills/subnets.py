"""Where a drill's vantage points come from: one client subnet per country.

A vantage point is a client subnet the GeoIP database places in a given country; DNS queries
carry it as the EDNS Client Subnet and route requests as ``client_ip``. ``PROBE_NETWORKS``
names, per ISO country code, the largest IPv4 network the bundled GeoLite2-City database
(maxminddb-geolite2 2018.703) places there, found once by walking the whole database (a
minute of work, too slow for a drill). ``subnet_for`` checks the answer against the locator
actually configured, so another database cannot silently misplace a vantage; when they
disagree it samples the network space (bounded) and gives up with None.
"""

from __future__ import annotations

import ipaddress
import random
from typing import Protocol

from trafficmgr.routing.types import ClientLocation

PROBE_NETWORKS_TEXT = """
AD=46.172.232.0/21 AE=5.192.0.0/15 AF=128.41.128.0/17 AG=57.91.0.0/20 AI=208.66.48.0/21
AL=46.99.128.0/18 AM=46.130.64.0/18 AO=105.170.0.0/15 AQ=147.66.2.0/23 AR=181.4.0.0/14
AS=67.218.48.0/20 AT=128.130.0.0/15 AU=1.148.0.0/14 AW=186.189.0.0/18 AX=82.199.176.0/20
AZ=5.191.128.0/17 BA=94.250.0.0/17 BB=57.91.16.0/20 BD=175.29.0.0/17 BE=57.0.0.0/11
BF=102.178.0.0/15 BG=37.63.0.0/17 BH=157.175.0.0/16 BI=154.117.224.0/19 BJ=137.255.128.0/17
BL=90.31.64.0/23 BM=196.12.64.0/18 BN=156.31.0.0/17 BO=161.56.0.0/16 BQ=161.0.80.0/20
BR=181.216.0.0/14 BS=66.226.160.0/19 BT=57.92.32.0/20 BV=185.193.124.0/24 BW=41.87.160.0/19
BY=77.67.128.0/17 BZ=200.32.192.0/19 CA=99.208.0.0/12 CC=45.42.156.0/24 CD=197.189.0.0/17
CF=57.82.164.0/22 CG=160.113.0.0/16 CH=166.12.0.0/14 CI=102.136.0.0/14 CK=202.65.32.0/22
CL=179.2.0.0/15 CM=102.244.0.0/14 CN=59.192.0.0/10 CO=191.104.0.0/14 CR=144.22.0.0/15
CU=169.158.0.0/17 CV=41.74.128.0/20 CW=190.88.64.0/18 CX=104.224.54.0/24 CY=37.149.0.0/16
CZ=78.44.0.0/16 DE=53.128.0.0/9 DJ=197.241.64.0/18 DK=94.148.0.0/14 DM=57.91.48.0/20
DO=152.0.0.0/16 DZ=154.248.0.0/13 EC=186.71.0.0/17 EE=46.131.0.0/16 EG=154.176.0.0/13
EH=154.150.4.0/24 ER=57.83.32.0/20 ES=81.46.0.0/16 ET=196.190.0.0/15 FI=85.78.0.0/15
FJ=144.120.0.0/16 FK=185.244.12.0/22 FM=57.70.192.0/20 FO=46.227.112.0/21 FR=57.192.0.0/11
GA=102.142.0.0/16 GB=25.128.0.0/9 GD=57.91.80.0/20 GE=37.233.128.0/17 GF=57.75.96.0/20
GG=62.68.176.0/20 GH=154.168.0.0/13 GI=85.115.128.0/20 GL=88.83.0.0/20 GM=160.182.0.0/15
GN=197.149.224.0/19 GP=46.238.144.0/20 GQ=57.83.16.0/20 GR=79.128.0.0/16 GS=104.224.44.0/24
GT=168.234.128.0/18 GU=168.123.0.0/16 GW=57.83.112.0/20 GY=181.199.224.0/19
HK=223.118.0.0/15 HM=147.66.4.0/23 HN=181.210.128.0/17 HR=83.131.0.0/17 HT=148.102.192.0/18
HU=37.234.0.0/16 ID=39.192.0.0/11 IE=34.240.0.0/13 IL=132.64.0.0/15 IM=85.184.208.0/20
IN=84.64.0.0/13 IO=203.83.48.0/21 IQ=37.236.64.0/18 IR=5.112.0.0/13 IS=160.210.0.0/16
IT=2.196.0.0/14 JE=81.20.176.0/20 JM=57.91.112.0/20 JO=176.29.0.0/16 JP=43.0.0.0/10
KE=154.152.0.0/13 KG=31.29.0.0/19 KH=42.115.0.0/19 KI=57.70.160.0/20 KM=197.255.224.0/22
KN=57.91.128.0/20 KP=175.45.176.0/22 KR=1.96.0.0/12 KW=139.141.0.0/16 KY=64.97.0.0/16
KZ=2.74.0.0/16 LA=57.92.176.0/20 LB=178.52.0.0/17 LC=57.91.144.0/20 LI=88.82.96.0/19
LK=124.43.128.0/17 LR=102.183.0.0/16 LS=156.0.0.0/18 LT=78.59.0.0/16 LU=158.166.0.0/15
LV=83.241.64.0/18 LY=41.255.0.0/16 MA=105.76.0.0/14 MC=88.209.96.0/19 MD=37.246.0.0/17
ME=31.204.192.0/20 MF=104.250.0.0/20 MG=197.148.128.0/18 MH=57.70.176.0/20 MK=62.162.0.0/19
ML=154.118.160.0/19 MM=37.111.64.0/18 MN=49.0.128.0/19 MO=161.64.0.0/17 MP=202.88.64.0/19
MQ=217.175.176.0/20 MR=41.138.144.0/20 MS=208.90.112.0/22 MT=94.17.0.0/16 MU=102.112.0.0/13
MV=209.212.192.0/19 MW=129.140.0.0/16 MX=148.248.0.0/15 MY=42.154.0.0/15 MZ=41.94.0.0/17
NA=154.0.192.0/18 NC=223.29.128.0/19 NE=197.214.32.0/19 NF=103.43.204.0/23
NG=105.120.0.0/13 NI=186.76.0.0/17 NL=145.160.0.0/11 NO=139.108.0.0/14 NP=36.252.128.0/17
NR=57.70.208.0/20 NU=49.156.48.0/23 NZ=122.63.0.0/16 OM=37.41.0.0/16 PA=168.77.0.0/17
PE=179.6.0.0/16 PF=123.50.96.0/19 PG=57.71.0.0/20 PH=180.194.0.0/15 PK=39.62.0.0/15
PL=37.30.0.0/15 PM=70.36.0.0/20 PN=104.224.47.0/24 PR=134.202.0.0/16 PS=158.140.64.0/18
PT=146.193.0.0/16 PW=57.70.240.0/20 PY=181.126.0.0/16 QA=86.37.0.0/16 RE=139.26.64.0/18
RO=85.123.0.0/16 RS=160.99.0.0/16 RU=178.178.0.0/15 RW=41.197.0.0/16 SA=89.4.0.0/15
SB=57.71.32.0/20 SC=196.48.0.0/16 SD=41.240.0.0/15 SE=2.250.0.0/15 SG=8.128.0.0/10
SH=104.224.22.0/24 SI=46.123.0.0/16 SJ=62.16.187.0/24 SK=147.175.0.0/16 SL=102.143.0.0/17
SM=89.186.32.0/19 SN=154.125.0.0/16 SO=154.115.192.0/18 SR=186.179.160.0/20
SS=41.222.72.0/22 ST=57.84.128.0/20 SV=190.62.64.0/18 SX=190.102.0.0/20 SY=5.155.0.0/16
SZ=154.119.96.0/19 TC=204.110.56.0/21 TD=154.68.128.0/19 TF=45.59.175.0/24
TG=196.169.0.0/16 TH=112.142.0.0/15 TJ=85.9.160.0/19 TK=27.96.26.0/23 TL=43.254.56.0/22
TM=57.88.240.0/20 TN=102.152.0.0/14 TO=57.71.48.0/20 TR=31.142.0.0/15 TT=186.44.0.0/17
TV=57.71.64.0/20 TW=120.96.0.0/13 TZ=154.75.0.0/16 UA=88.154.0.0/15 UG=154.224.0.0/13
UM=208.30.124.0/23 US=7.128.0.0/9 UY=179.30.0.0/15 UZ=82.215.64.0/18 VA=212.77.0.0/19
VC=57.91.160.0/20 VE=179.20.0.0/14 VG=98.158.96.0/20 VI=146.226.0.0/19 VN=14.248.0.0/13
VU=57.71.80.0/20 WF=27.125.194.0/23 WS=57.71.16.0/20 XK=37.35.8.0/21 YE=195.94.0.0/19
YT=193.248.84.0/22 ZA=45.200.0.0/13 ZM=102.144.0.0/13 ZW=102.177.192.0/18
"""
PROBE_NETWORKS: dict[str, str] = dict(item.split("=", 1) for item in PROBE_NETWORKS_TEXT.split())
# A country standing for each continent, when a residency rule names only the continent.
CONTINENT_COUNTRY = {
    "AF": "ZA",
    "AN": "AQ",
    "AS": "SG",
    "EU": "DE",
    "NA": "US",
    "OC": "AU",
    "SA": "BR",
}
SAMPLE_BUDGET = 4000


class Locating(Protocol):
    def locate(self, ip: str, prefix_len: int | None = None) -> ClientLocation: ...


def subnet_for(
    country: str, locator: Locating | None, index: int = 0, seed: int = 0
) -> ipaddress.IPv4Network | None:
    """Return the ``index``-th /24 of ``country``'s probe network, checked with ``locator``.

    Without a locator the table is trusted. When the locator disagrees (another database),
    random /24s are tried, at most ``SAMPLE_BUDGET`` of them.
    """
    base = PROBE_NETWORKS.get(country)
    if base is not None:
        network = ipaddress.IPv4Network(base)
        subnets = max(1, 2 ** (24 - network.prefixlen))
        if index < subnets:
            candidate = ipaddress.IPv4Network((int(network.network_address) + 256 * index, 24))
            if locator is None or _in(locator, candidate, country):
                return candidate
    if locator is None:
        return None
    rng = random.Random(f"{country}:{index}:{seed}")
    for _ in range(SAMPLE_BUDGET):
        candidate = ipaddress.IPv4Network((rng.randrange(1 << 24) << 8, 24))
        if candidate.is_global and _in(locator, candidate, country):
            return candidate
    return None


def probe_address(subnet: ipaddress.IPv4Network) -> str:
    """Return the address inside a vantage subnet its queries and requests use."""
    return str(subnet.network_address + 1)


def _in(locator: Locating, subnet: ipaddress.IPv4Network, country: str) -> bool:
    return locator.locate(probe_address(subnet), subnet.prefixlen).country == country
