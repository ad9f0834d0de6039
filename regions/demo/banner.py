"""The demo's banner: where everything runs, the credentials, and commands to try."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from django.conf import settings

from regions.demo import files
from regions.demo.files import Credentials


class Address(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...

    def url(self) -> str: ...


class Running(Protocol):
    """What the banner reads of a demo that is up (``regions.demo.run.DemoRun``)."""

    @property
    def http(self) -> Address: ...
    @property
    def dns(self) -> Address: ...

    credentials: Credentials
    fleet_file: str
    summary: str
    zone: str
    gateway_url: str
    client_secret: str
    endpoint_count: int
    agents: bool
    log_file: Path


def banner(run: Running) -> str:
    """Return the banner of a demo that is up."""
    url, c = run.http.url(), run.credentials
    auth = f'-H "Authorization: Bearer {c.token}"'
    lines = [
        "",
        f"trafficmgr demo is running on {url}/  (Ctrl-C stops it)",
        f"  fleet      {run.fleet_file}: {run.summary}",
        f"  database   {os.path.normpath(str(settings.DATABASES['default']['NAME']))}",
        f"  dashboard  {url}/      login: {c.username}   password: {c.password}",
        f"  API docs   {url}/api/docs/",
        f"  API token  {c.token}   (role operator)",
        f"  GeoDNS     {run.dns} (udp+tcp), zone {run.zone}",
        f"  gateway    {run.gateway_url}  (OpenAI base URL)",
        f"  client     {run.client_secret}   (a client token for the gateway)",
        f"  servers    {run.endpoint_count} simulated inference servers on 127.0.0.1 "
        "(vLLM's API and /metrics)",
        "  agents     "
        + (
            f"{run.endpoint_count} simulated agents replaying a real trace"
            if run.agents
            else "off (--no-agents)"
        ),
        f"  loop       control-loop tick every {settings.TRAFFICMGR['TICK_SECONDS']:g} s",
        f"  log        {run.log_file}   (here: warnings and errors only)",
        f"  kept in    {files.var_path(files.CREDENTIALS_FILE)}: the same login and "
        "token after a restart (--rotate-credentials for new ones)",
        "",
        "Try:",
        f"  curl {url}/healthz",
        f"  curl {auth} {url}/api/v1/regions/",
        f"  curl {auth} {url}/api/v1/fleet/export",
        f"  curl {auth} {url}/api/v1/routing/table",
        f"  curl {auth} -X POST {url}/api/v1/route -H 'Content-Type: application/json' "
        '-d \'{"model": "llama-3-70b", "client_ip": "81.2.69.142", "input_tokens": 1800, '
        '"max_output_tokens": 256}\'',
        f"  curl {run.gateway_url}/chat/completions -H 'Authorization: Bearer "
        f"{run.client_secret}' -H 'Content-Type: application/json' "
        '-d \'{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}], '
        '"max_tokens": 16}\' -i',
        f"  dig @{run.dns.host} -p {run.dns.port} llama-3-70b.{run.zone} +subnet=81.2.69.0/24",
        f"  dig @{run.dns.host} -p {run.dns.port} llama-3-70b.{run.zone} TXT "
        "+subnet=216.160.83.0/24",
        "",
    ]
    return "\n".join(lines)
