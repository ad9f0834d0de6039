"""The example configurations in deploy/ load in the real servers (paths swapped for tmp)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.dns_publish.servers import need, new_key, pdns_database, spawn, wait_api
from tests.dns_publish.world import EU_WEST_V4, US_EAST_V4, ask, fqdn, make_zone, table_v1
from trafficmgr.dns.publishers import PowerDnsTarget, Rfc2136Target, targets_from_dict
from trafficmgr.testing.ports import TCP_AND_UDP, free_ports

pytestmark = pytest.mark.integration

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)


def test_bind_named_conf_is_valid(tmp_path: Path) -> None:
    checkconf = need("named-checkconf")
    keys = tmp_path / "keys"
    keys.mkdir()
    for view in ("in", "eu", "na", "default"):
        key = new_key(f"tm-{view}")
        (keys / f"tm-{view}.key").write_text(
            f'key "{key.name}" {{\n\talgorithm {key.algorithm};\n\tsecret "{key.secret}";\n}};\n'
        )
    conf = tmp_path / "named.conf"
    conf.write_text(
        (DEPLOY / "bind" / "named.conf").read_text().replace("/etc/bind/keys", str(keys))
    )

    done = run([checkconf, str(conf)])

    assert done.returncode == 0, done.stdout + done.stderr


def test_bind_targets_file_builds_one_target_per_view(tmp_path: Path) -> None:
    doc = yaml.safe_load((DEPLOY / "bind" / "publish-targets.yaml").read_text())
    for view in doc["targets"][0]["views"].values():
        key = new_key(Path(view["key_file"]).stem)
        path = tmp_path / f"{key.name}.key"
        path.write_text(f'key "{key.name}" {{ algorithm hmac-sha256; secret "{key.secret}"; }};')
        view["key_file"] = str(path)

    targets = [t for t in targets_from_dict(doc, make_zone()) if isinstance(t, Rfc2136Target)]

    assert [(t.view, t.client_zone, t.key.name) for t in targets] == [
        ("in", "IN", "tm-in"),
        ("eu", "EU", "tm-eu"),
        ("na", "NA", "tm-na"),
        ("default", "default", "tm-default"),
    ]
    assert str(targets[1].state_file).endswith("publish-bind-eu.json")


def test_knot_conf_is_valid(tmp_path: Path) -> None:
    knotc = need("knotc")
    text = (DEPLOY / "knot" / "knot.conf").read_text()
    text = text.replace("/etc/knot/keys.conf", str(DEPLOY / "knot" / "keys.conf.example"))
    text = text.replace("/run/knot", str(tmp_path)).replace("/var/lib/knot", str(tmp_path))
    conf = tmp_path / "knot.conf"
    conf.write_text(text)

    done = run([knotc, "-c", str(conf), "conf-check"])

    assert done.returncode == 0, done.stdout + done.stderr


def test_powerdns_conf_serves_published_lua_records(tmp_path: Path) -> None:
    pdns_server = need("pdns_server")
    database = pdns_database(tmp_path)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "pdns.conf").write_text((DEPLOY / "powerdns" / "pdns.conf").read_text())
    port, api_port = free_ports(2, TCP_AND_UDP)
    overrides = [  # the shipped file, with test paths, ports and key on the command line
        f"--gsqlite3-database={database}",
        "--local-address=127.0.0.1",
        f"--local-port={port}",
        f"--webserver-port={api_port}",
        "--api-key=shipped-key",
        "--include-dir=",
        f"--socket-dir={tmp_path}",
        "--guardian=no",
        "--daemon=no",
        "--disable-syslog=yes",
        "--security-poll-suffix=",
    ]
    pdns = spawn([pdns_server, f"--config-dir={shipped}", *overrides], tmp_path, port, api_port)
    try:
        wait_api(pdns)
        doc = yaml.safe_load((DEPLOY / "powerdns" / "publish-targets.yaml").read_text())
        item = doc["targets"][0]
        del item["api_key_file"]
        item.update(api_url=f"http://127.0.0.1:{api_port}", api_key="shipped-key")
        (target,) = targets_from_dict(doc, make_zone())
        assert isinstance(target, PowerDnsTarget) and target.lua == "weighted"

        target.publish(table_v1())

        assert ask(port, fqdn("llama-3-8b"), "A") == {US_EAST_V4}  # LUA, weight 1.0
        assert ask(port, fqdn("llama-3-70b"), "A") <= {EU_WEST_V4, US_EAST_V4}
    finally:
        pdns.stop()
