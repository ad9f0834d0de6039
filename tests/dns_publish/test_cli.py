"""``python -m trafficmgr.dns.publishers`` and the targets file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dns_publish.conftest import Bind, Knot
from tests.dns_publish.world import (
    ADDRESSES,
    EU_WEST_V4,
    US_EAST_V4,
    ask,
    fqdn,
    make_table,
    make_zone,
    table_v1,
)
from trafficmgr.dns.publishers import ConfigError, TsigKey, targets_from_dict
from trafficmgr.dns.publishers.cli import main
from trafficmgr.routing.table import table_to_json
from trafficmgr.routing.types import RoutingTable

ROOT = Path(__file__).resolve().parents[2]
ZONE_FLAGS = ["--zone", "infer.example.test", "--ttl", "10"] + [
    arg
    for region, addrs in ADDRESSES.items()
    for arg in ("--region", f"{region}={','.join(addrs)}")
]


def table_file(tmp_path: Path, table: RoutingTable) -> str:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table_to_json(table)))
    return str(path)


def key_file(tmp_path: Path, key: TsigKey) -> str:
    path = tmp_path / f"{key.name}.key"
    path.write_text(
        f'key "{key.name}" {{\n\talgorithm {key.algorithm};\n\tsecret "{key.secret}";\n}};\n'
    )
    return str(path)


def test_a_table_with_an_unknown_region_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = make_table("bad000000001", {"default": {"llama-3-70b": [("mars-north", 1.0)]}})
    argv = ["--table", table_file(tmp_path, table), *ZONE_FLAGS, "--target", "rfc2136"]
    argv += ["--server", "127.0.0.1:9", "--key", "hmac-sha256:k:c2VjcmV0"]

    assert main(argv) == 2
    assert "unknown region(s): mars-north" in capsys.readouterr().err


@pytest.mark.integration
def test_dry_run_prints_the_plan_and_sends_nothing(
    knot: Knot, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--table", table_file(tmp_path, table_v1()), *ZONE_FLAGS, "--target", "rfc2136"]
    argv += ["--server", f"127.0.0.1:{knot.port}", "--key-file", key_file(tmp_path, knot.key)]

    assert main([*argv, "--dry-run"]) == 0

    out = capsys.readouterr().out
    assert "(axfr): 8 create, 0 update, 0 delete" in out
    assert f"create {fqdn('llama-3-70b')} 10 A {US_EAST_V4}" in out
    assert "would change 8 created" in out
    assert ask(knot.port, fqdn("llama-3-70b"), "A") == set()

    assert main(argv) == 0
    assert ask(knot.port, fqdn("llama-3-70b"), "A") == {US_EAST_V4}


@pytest.mark.integration
def test_views_from_flags_and_a_json_report(
    bind: Bind, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--table", table_file(tmp_path, table_v1()), *ZONE_FLAGS, "--target", "rfc2136"]
    argv += ["--server", f"127.0.0.1:{bind.port}", "--json"]
    argv += ["--view", f"eu=EU:{key_file(tmp_path, bind.eu.key)}"]
    argv += ["--view", f"default=default:{key_file(tmp_path, bind.default.key)}"]

    assert main(argv) == 0

    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["version"] == "v1a1a1a1a1a1"
    assert [r["created"] for r in report["results"]] == [9, 8]
    assert report["counters"]["rrsets_created"] >= 17
    assert ask(bind.port, fqdn("llama-3-70b"), "A", "127.0.0.2") == {EU_WEST_V4}
    assert ask(bind.port, fqdn("llama-3-70b"), "A", "127.0.0.1") == {US_EAST_V4}


def test_targets_file_errors_name_their_path() -> None:
    doc = {
        "targets": [{"kind": "powerdns", "api_url": "http://x", "api_key": "k", "lua_mode": "geo"}]
    }
    with pytest.raises(ConfigError, match=r"targets\[0\]\.lua_mode: unknown key"):
        targets_from_dict(doc, make_zone())
    doc = {"targets": [{"kind": "rfc2136", "server": "127.0.0.1"}]}
    with pytest.raises(ConfigError, match=r"targets\[0\]: key or key_file is required"):
        targets_from_dict(doc, make_zone())
    doc = {
        "targets": [{"kind": "rfc2136", "server": "h", "key": "k:c2VjcmV0", "client_zone": "XX"}]
    }
    with pytest.raises(ValueError, match="unknown client zone key 'XX'"):
        targets_from_dict(doc, make_zone())


def test_the_module_runs_without_django() -> None:
    code = (
        "import sys, runpy\n"
        "sys.argv = ['x', '--help']\n"
        "try:\n    runpy.run_module('trafficmgr.dns.publishers', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'celery', 'channels', 'rest_framework'))\n"
        "print('IMPORTED:' + ','.join(bad))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--target {rfc2136,powerdns}" in done.stdout
    assert done.stdout.strip().endswith("IMPORTED:")
