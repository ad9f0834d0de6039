"""Hostile fleet files are refused with one message naming the problem, never a crash.

Deep nesting (PyYAML composes recursively), integers of thousands of digits (Python refuses to
convert them), control characters (PyYAML's reader refuses them before parsing): the loader
raises ``FleetError`` naming the path, ``POST /api/v1/fleet/apply`` answers 400 in the error
format, and ``manage.py apply_fleet`` prints one line and exits non-zero.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from trafficmgr.fleetfile import FleetError, load_fleet_text

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]
HEAD = "zone: infer.example.test\n"
REGIONS = "regions: [{name: r, country: IE, location: {lat: 1, lon: 2}, addresses: [192.0.2.1]}]\n"

# name: (fleet text, the path the error names, words the message holds)
HOSTILE = {
    "10,000 nested flow sequences": ("[" * 10_000 + "]" * 10_000, "fleet", "nested too deeply"),
    "10,000 nested flow mappings": ("{a: " * 10_000 + "}" * 10_000, "fleet", "nested too deeply"),
    "5,000 nested block sequences": ("- " * 5_000 + "x\n", "fleet", "nested too deeply"),
    "nested regions": (HEAD + "regions: " + "[" * 200 + "]" * 200, "fleet", "nested too deeply"),
    "a deeply nested key": ("? " + "[" * 5_000 + "]" * 5_000 + "\n: 1\n", "fleet", "nested"),
    "5,000-digit ttl": (HEAD + "ttl: " + "9" * 5_000 + "\n" + REGIONS, "ttl", "digits"),
    "4,000-digit ttl": (HEAD + "ttl: " + "9" * 4_000 + "\n" + REGIONS, "ttl", "digits"),
    "20,000-digit hexadecimal ttl": (HEAD + "ttl: 0x" + "f" * 20_000 + "\n", "ttl", "digits"),
    "5,000-digit key": (HEAD + "? " + "9" * 5_000 + "\n: 1\n", "fleet", "digits"),
    "5,000-digit latitude": (
        HEAD + REGIONS.replace("lat: 1", "lat: " + "9" * 5_000),
        "regions[0].location.lat",
        "digits",
    ),
    "a control character": ("zone: infer\x06.example.test\n" + REGIONS, "fleet", "U+0006"),
    "a NUL": (HEAD + REGIONS.replace("name: r", "name: r\x00"), "fleet", "U+0000"),
    "a C1 control character": (HEAD + "# \x9d\n" + REGIONS, "fleet", "U+009D"),
}
CASES = pytest.mark.parametrize(("text", "path", "words"), HOSTILE.values(), ids=list(HOSTILE))


@CASES
def test_the_loader_names_the_problem(text: str, path: str, words: str) -> None:
    with pytest.raises(FleetError) as info:
        load_fleet_text(text)
    assert len(info.value.issues) == 1, info.value.issues
    issue = info.value.issues[0]
    assert issue.path == path and words in issue.message, issue
    assert len(str(issue)) < 300  # the offending value is not echoed whole


@CASES
@pytest.mark.parametrize("as_json", [False, True], ids=["yaml body", "json body"])
def test_the_api_answers_400_in_the_error_format(
    admin_client: Any, text: str, path: str, words: str, as_json: bool
) -> None:
    if as_json:
        body, content_type = json.dumps({"fleet": text}).encode(), "application/json"
    else:
        body, content_type = text.encode(), "application/yaml"
    response = admin_client.generic(
        "POST", "/api/v1/fleet/apply?dry_run=1", body, content_type=content_type
    )
    assert response.status_code == 400, response.content[:300]
    assert response["Content-Type"] == "application/json"
    doc = response.json()
    # A control character inside JSON is refused by the JSON parser, under the key "fleet".
    assert doc["error"] in ({"invalid_fleet", "invalid"} if as_json else {"invalid_fleet"}), doc
    assert path in doc["fields"] and words in doc["fields"][path][0], doc


@CASES
def test_the_command_says_it_in_one_line(tmp_path: Path, text: str, path: str, words: str) -> None:
    fleet = tmp_path / "hostile.yaml"
    fleet.write_text(text)
    with pytest.raises(CommandError) as info:
        call_command("apply_fleet", str(fleet), "--dry-run", stdout=StringIO())
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(f"{fleet}: {path}: ") and words in message


def test_the_command_exits_non_zero_without_a_traceback(tmp_path: Path) -> None:
    fleet = tmp_path / "nested.yaml"
    fleet.write_text("[" * 10_000 + "]" * 10_000)
    env = os.environ | {"TRAFFICMGR_VAR_DIR": str(tmp_path), "SECRET_KEY": "test"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)  # else a system check warns that SQLite goes with Redis
    proc = subprocess.run(
        [sys.executable, "manage.py", "apply_fleet", str(fleet)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert f"{fleet}: fleet: " in proc.stderr and "nested too deeply" in proc.stderr
