"""Hugging Face ``transformers serve`` on loopback, over a tiny model built offline.

A real OpenAI-compatible server the project did not write. ``scripts/peers/transformers.sh``
installs transformers (with its serving extra) and a CPU build of PyTorch into
``var/transformers-venv`` (``.ci/run`` runs it; on another machine it is not run for you: a
plain PyTorch install would bring a multi-GB GPU build). ``TRAFFICMGR_TRANSFORMERS_VENV``
names another venv. The model (``tiny_model.py``: a tokenizer trained here, random weights) is
built once per transformers version under ``var/transformers-models/`` and served with the Hub
switched off: nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from trafficmgr.testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / "var" / "transformers-venv"
MODELS = ROOT / "var" / "transformers-models"
BUILDER = Path(__file__).with_name("tiny_model.py")
MODEL = "tiny-chat"  # the folder's name, which the server reports as the model's id
# small KV cache: the default sizes it from memory and the first request then takes ~20 s
SERVE_FLAGS = ("--device", "cpu", "--continuous-batching", "--cb-num-blocks", "64",
               "--cb-block-size", "32", "--cb-max-batch-tokens", "256")  # fmt: skip


def transformers_venv() -> tuple[Path | None, str]:
    """Return the venv holding ``transformers serve``; else (None, why)."""
    venv = Path(os.environ.get("TRAFFICMGR_TRANSFORMERS_VENV") or VENV)
    if not (venv / "bin" / "transformers").exists():
        return None, f"no transformers venv at {venv}: run bash scripts/peers/transformers.sh"
    if not list(venv.glob(".installed-transformers-*")) and venv == VENV:
        return None, f"{venv} is half installed: run bash scripts/peers/transformers.sh"
    return venv, ""


def _offline_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(home))
    env.update(HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")
    env["OMP_NUM_THREADS"] = "1"  # a tiny model; leave the cores to the gateway and Envoy
    return env


def tiny_model(venv: Path) -> Path:
    """Return a folder holding ``MODEL``, building it once per transformers version."""
    python = str(venv / "bin" / "python")
    version = subprocess.run(
        [python, "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.strip()  # fmt: skip
    digest = hashlib.sha256(BUILDER.read_bytes()).hexdigest()[:12]
    home = MODELS / f"transformers-{version}-{digest}"
    if (home / MODEL / "config.json").exists():
        return home
    MODELS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=MODELS))
    try:
        subprocess.run(
            [python, str(BUILDER), str(work / MODEL)],
            env=_offline_env(work / "hf"), capture_output=True, check=True, timeout=300,
        )  # fmt: skip
        shutil.rmtree(work / "hf", ignore_errors=True)
        try:
            work.rename(home)  # whole or not at all
        except OSError:  # built meanwhile by another run
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return home


class TransformersServer:
    """``transformers serve MODEL`` on 127.0.0.1; a context manager that always stops it."""

    def __init__(self, venv: Path, models: Path, workdir: Path) -> None:
        self.port = free_port()
        self.log = workdir / "transformers-serve.log"
        self._log_file = self.log.open("wb")
        cmd = [str(venv / "bin" / "transformers"), "serve", MODEL, *SERVE_FLAGS, "--host",
               "127.0.0.1", "--port", str(self.port), "--log-level", "warning"]  # fmt: skip
        # started in the models' folder: MODEL is a local path there, and the id it reports
        self.process = subprocess.Popen(
            cmd,
            cwd=models,
            env=_offline_env(workdir / "hf"),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.address}/v1"

    def models(self) -> list[str]:
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=5) as answer:
            return [m["id"] for m in json.load(answer)["data"]]

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Wait until ``/v1/models`` answers; raise with the log's tail if it never does."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.models()
                return
            except (OSError, urllib.error.URLError, ValueError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    tail = self.log.read_bytes()[-1500:].decode(errors="replace")
                    raise RuntimeError(f"transformers serve did not start:\n{tail}") from None
                time.sleep(0.25)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log_file.close()

    def __enter__(self) -> TransformersServer:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
