"""AIPerf (NVIDIA's LLM benchmark client) against the gateway and vLLM Router, offline.

Why: our own load generators could share a blind spot with the gateway; AIPerf is an
outside client with its own notion of TTFT, inter-token latency and throughput.

    .venv/bin/python -m bench.gateway.aiperf [--concurrency 32] [--requests 600] [--json OUT]

Setup (not run time): AIPerf lives in its own virtualenv, ``var/aiperf-venv`` (PyPI
``aiperf``, installed here when missing; it brings transformers and tokenizers but no
model). It needs a tokenizer and may download none, so ``bench/gateway/aiperf_tokenizer.py`` builds
a word-level one matching the token rule, laid out as a Hugging Face cache entry under
``var/aiperf-hf``, and AIPerf runs with ``HF_HOME`` there and ``HF_HUB_OFFLINE=1``. Then,
over two simulated H100x8 endpoints (``--time-scale``), AIPerf runs the same profile
(synthetic prompts of ``--isl`` tokens, ``--osl`` output tokens with ``ignore_eos``, streamed
chat, ``--concurrency`` in flight, ``--requests`` requests) against the first endpoint
directly, the gateway, and vLLM Router per ``--policies``; the table is AIPerf's own figures
from its JSON export.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.gateway import procs
from bench.suite import write_json

VERSION = os.environ.get("AIPERF_VERSION", "0.13.0")
VENV = procs.ROOT / "var" / "aiperf-venv"
HF_HOME = procs.ROOT / "var" / "aiperf-hf"  # a Hugging Face cache holding only our tokenizer
TOKENIZER_REPO = "trafficmgr/word-tokenizer"
FLEET = """\
zone: bench.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
regions:
  - name: bench
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: sim-1, address: "10.0.0.1:8000", gpu: H100, gpus: 8, models: [bench]}
      - {name: sim-2, address: "10.0.0.2:8000", gpu: H100, gpus: 8, models: [bench]}
"""
METRICS = {
    "request_throughput": ("req/s", "avg"),
    "time_to_first_token": ("TTFT ms", "p50", "p99"),
    "inter_token_latency": ("ITL ms", "p50", "p99"),
    "request_latency": ("e2e ms", "p50", "p99"),
    "output_token_throughput": ("out tok/s", "avg"),
}


def setup() -> None:
    """Install AIPerf in its own virtualenv and build the tokenizer (no-ops when present)."""
    if not (VENV / "bin" / "aiperf").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--disable-pip-version-check", f"aiperf=={VERSION}"], check=True)
    if not list(HF_HOME.glob("hub/models--trafficmgr--word-tokenizer/snapshots/*/tokenizer.json")):
        from trafficmgr.simserver.output import VOCABULARY

        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(list(VOCABULARY), fh)
        builder = procs.ROOT / "bench" / "gateway" / "aiperf_tokenizer.py"
        cmd = [str(VENV / "bin" / "python"), str(builder), str(HF_HOME), fh.name]
        subprocess.run(cmd, check=True)
        os.unlink(fh.name)


def aiperf(name: str, url: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run one AIPerf profile; return its JSON export."""
    cmd = [str(VENV / "bin" / "aiperf"), "profile", "--model", "bench", "--url", url,
           "--endpoint-type", "chat", "--streaming", "--tokenizer", TOKENIZER_REPO,
           "--prompt-input-tokens-mean", str(args.isl), "--prompt-input-tokens-stddev", "0",
           "--prompt-output-tokens-mean", str(args.osl), "--prompt-output-tokens-stddev", "0",
           "--extra-inputs", "ignore_eos:true", "--concurrency", str(args.concurrency),
           "--request-count", str(args.requests), "--warmup-request-count", "20",
           "--api-key", procs.TOKEN, "--random-seed", "0",
           "--output-artifact-dir", str(out / name)]  # fmt: skip
    env = {**os.environ, "HF_HOME": str(HF_HOME), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    log = out / f"{name}.log"
    with open(log, "w") as fh:
        done = subprocess.run(procs.pinned(cmd, procs.SIM_CPU), env=env, stdout=fh, stderr=fh)
    found = sorted((out / name).rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not found:
        tail = log.read_text()[-1500:]
        raise RuntimeError(f"aiperf failed against {name} (exit {done.returncode}): {tail}")
    doc: dict[str, Any] = json.loads(found[0].read_text())
    return doc


def figures(doc: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, (label, *stats) in METRICS.items():
        entry = doc.get(key) or doc.get("records", {}).get(key) or {}
        for stat in stats:
            value = entry.get(stat) if isinstance(entry, dict) else None
            out[f"{label} {stat}"] = round(float(value), 2) if value is not None else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=600)
    p.add_argument("--isl", type=int, default=512)
    p.add_argument("--osl", type=int, default=64)
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--vllm-router", help="vllm-router binary (default: PATH, then var/)")
    p.add_argument("--policies", default="power_of_two")
    p.add_argument("--out", default=str(procs.ROOT / "var" / "aiperf-out"))
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    setup()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, float | None]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        fleet_file = Path(tmp) / "fleet.yaml"
        fleet_file.write_text(FLEET)
        with procs.simulated_fleet(str(fleet_file), args.time_scale) as (_, path, addresses):
            rows["direct (sim-1)"] = figures(
                aiperf("direct", f"http://{addresses['sim-1']}", args, out)
            )
            with procs.gateway(path) as (port, _):
                rows["trafficmgr (ai_aware)"] = figures(
                    aiperf("trafficmgr", f"http://127.0.0.1:{port}", args, out)
                )
            binary = procs.router_binary(args.vllm_router)
            for policy in [x for x in args.policies.split(",") if x] if binary else []:
                assert binary is not None
                pools = {"all": list(addresses.values())}
                with procs.vllm_routers(binary, pools, policy) as (ports, _):
                    url = f"http://127.0.0.1:{ports['all']}"
                    rows[f"vllm-router ({policy})"] = figures(aiperf(policy, url, args, out))
    columns = list(next(iter(rows.values())))
    print("| target | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name, row in rows.items():
        print(
            f"| {name} | " + " | ".join("-" if v is None else f"{v:g}" for v in row.values()) + " |"
        )
    print(f"load average {procs.load_average()}")
    if args.json:
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
