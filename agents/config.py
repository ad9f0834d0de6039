"""Agent configuration from the command line, with TRAFFICMGR_AGENT_* environment fallbacks."""

from __future__ import annotations

import argparse
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from agents import __version__

ENV_PREFIX = "TRAFFICMGR_AGENT_"
SERVER_KINDS = ("auto", "vllm", "tgi", "triton", "http")
SIM_GPU_NAMES = ("H100", "A100", "L4")
N = TypeVar("N", int, float)


class ConfigError(ValueError):
    """A setting is missing or wrong; the message names the flag or variable."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    control_plane: str
    token: str
    endpoint: str
    interval_s: float = 1.0
    metrics_url: str | None = None
    probe_url: str | None = None
    server_kind: str = "auto"
    models: tuple[str, ...] = ()
    timeout_s: float = 2.0  # probe and metrics scrape
    push_timeout_s: float = 5.0
    buffer_size: int = 16
    ca_file: str | None = None
    simulate: bool = False
    once: bool = False
    log_level: str = "info"
    sim_gpu: str = "H100"
    sim_gpus: int = 8
    sim_trace: str | None = None
    sim_load: float = 0.6
    sim_seed: int = 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trafficmgr-agent",
        description="Report this GPU node's health to the trafficmgr control plane. Every flag "
        "also reads TRAFFICMGR_AGENT_<FLAG> (e.g. TRAFFICMGR_AGENT_TOKEN); flags win.",
    )
    p.add_argument("--control-plane", metavar="URL", help="e.g. https://tm.example.net")
    p.add_argument("--token", help="agent token (prefer TRAFFICMGR_AGENT_TOKEN or --token-file)")
    p.add_argument("--token-file", metavar="PATH", help="read the agent token from a file")
    p.add_argument("--endpoint", metavar="NAME", help="this endpoint's name in the fleet")
    p.add_argument("--interval", type=float, metavar="S", help="seconds between heartbeats (1)")
    p.add_argument("--metrics-url", metavar="URL", help="the server's Prometheus /metrics")
    p.add_argument("--probe-url", metavar="URL", help="the server's base URL, probed per kind")
    p.add_argument("--server-kind", choices=SERVER_KINDS, help="auto: tell from its metrics")
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="a model that must be loaded for the probe to pass (repeatable)",
    )
    p.add_argument("--timeout", type=float, metavar="S", help="probe and scrape timeout (2)")
    p.add_argument("--push-timeout", type=float, metavar="S", help="heartbeat POST timeout (5)")
    p.add_argument("--buffer", type=int, metavar="N", help="heartbeats kept while unreachable (16)")
    p.add_argument("--ca-file", metavar="PATH", help="CA bundle for the control plane's TLS")
    p.add_argument(
        "--simulate",
        action="store_true",
        default=None,
        help="simulated GPUs (and server, unless --metrics-url/--probe-url)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        default=None,
        help="print one heartbeat as JSON and exit, sending nothing",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    p.add_argument("--sim-gpu", choices=SIM_GPU_NAMES, help="simulated GPU type (H100)")
    p.add_argument("--sim-gpus", type=int, metavar="N", help="simulated GPU count (8)")
    p.add_argument("--sim-trace", metavar="FILE", help="Azure CSV, BurstGPT CSV or Mooncake JSONL")
    p.add_argument("--sim-load", type=float, metavar="X", help="offered load, 0..1+ (0.6)")
    p.add_argument("--sim-seed", type=int, metavar="N", help="default: from the endpoint name")
    p.add_argument("--version", action="version", version=f"trafficmgr-agent {__version__}")
    return p


def _env_number(env: Mapping[str, str], name: str, kind: Callable[[str], N]) -> N | None:
    raw = env.get(ENV_PREFIX + name)
    if raw is None or raw == "":
        return None
    try:
        return kind(raw)
    except ValueError as exc:
        raise ConfigError(f"{ENV_PREFIX}{name}={raw!r} is not a valid number") from exc


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    return env.get(ENV_PREFIX + name, "").strip().lower() in {"1", "true", "yes", "on"}


def _pick(flag: N | None, env: N | None, default: N) -> N:
    return flag if flag is not None else env if env is not None else default


def _url(value: str | None, what: str) -> str | None:
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{what} must be an http(s) URL, not {value!r}")
    return value


def _token(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    token = args.token or env.get(ENV_PREFIX + "TOKEN", "")
    path = args.token_file or env.get(ENV_PREFIX + "TOKEN_FILE")
    if not token and path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {path}: {exc.strerror}") from exc
    return token


def parse_config(argv: Sequence[str] | None, env: Mapping[str, str]) -> AgentConfig:
    """Merge flags over environment over defaults and check the result."""
    args = build_parser().parse_args(argv)

    def s(flag: str | None, name: str) -> str | None:
        return flag if flag is not None else env.get(ENV_PREFIX + name) or None

    env_models = [m.strip() for m in env.get(ENV_PREFIX + "MODELS", "").split(",") if m.strip()]
    once = bool(args.once) or _env_bool(env, "ONCE")
    cfg = AgentConfig(
        control_plane=_url(s(args.control_plane, "CONTROL_PLANE"), "--control-plane") or "",
        token=_token(args, env),
        endpoint=s(args.endpoint, "ENDPOINT") or "",
        interval_s=_pick(args.interval, _env_number(env, "INTERVAL", float), 1.0),
        metrics_url=_url(s(args.metrics_url, "METRICS_URL"), "--metrics-url"),
        probe_url=_url(s(args.probe_url, "PROBE_URL"), "--probe-url"),
        server_kind=s(args.server_kind, "SERVER_KIND") or "auto",
        models=tuple(args.models or env_models),
        timeout_s=_pick(args.timeout, _env_number(env, "TIMEOUT", float), 2.0),
        push_timeout_s=_pick(args.push_timeout, _env_number(env, "PUSH_TIMEOUT", float), 5.0),
        buffer_size=_pick(args.buffer, _env_number(env, "BUFFER", int), 16),
        ca_file=s(args.ca_file, "CA_FILE"),
        simulate=bool(args.simulate) or _env_bool(env, "SIMULATE"),
        once=once,
        log_level=s(args.log_level, "LOG_LEVEL") or "info",
        sim_gpu=s(args.sim_gpu, "SIM_GPU") or "H100",
        sim_gpus=_pick(args.sim_gpus, _env_number(env, "SIM_GPUS", int), 8),
        sim_trace=s(args.sim_trace, "SIM_TRACE"),
        sim_load=_pick(args.sim_load, _env_number(env, "SIM_LOAD", float), 0.6),
        sim_seed=_pick(args.sim_seed, _env_number(env, "SIM_SEED", int), 0),
    )
    if args.sim_seed is None and _env_number(env, "SIM_SEED", int) is None:
        cfg = replace(cfg, sim_seed=zlib.crc32(cfg.endpoint.encode()))  # distinct per endpoint
    _check(cfg)
    return cfg


def _check(cfg: AgentConfig) -> None:
    if not cfg.endpoint:
        raise ConfigError("--endpoint (or TRAFFICMGR_AGENT_ENDPOINT) is required")
    if len(cfg.endpoint) > 63:
        raise ConfigError(f"endpoint names have at most 63 characters: {cfg.endpoint!r}")
    if not cfg.once and not cfg.control_plane:
        raise ConfigError("--control-plane (or TRAFFICMGR_AGENT_CONTROL_PLANE) is required")
    if not cfg.once and not cfg.token:
        raise ConfigError("--token, --token-file or TRAFFICMGR_AGENT_TOKEN is required")
    if cfg.server_kind not in SERVER_KINDS:
        raise ConfigError(f"server kind must be one of {SERVER_KINDS}, not {cfg.server_kind!r}")
    if cfg.sim_gpu not in SIM_GPU_NAMES:
        raise ConfigError(f"simulated GPU must be one of {SIM_GPU_NAMES}, not {cfg.sim_gpu!r}")
    positive = {
        "interval": cfg.interval_s,
        "timeout": cfg.timeout_s,
        "push timeout": cfg.push_timeout_s,
        "buffer": cfg.buffer_size,
        "simulated GPU count": cfg.sim_gpus,
    }
    for what, value in positive.items():
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{what} must be positive, not {value}")
    if not 0.05 <= cfg.interval_s <= 3600:
        raise ConfigError(f"interval must be between 0.05 and 3600 s, not {cfg.interval_s}")
    if not math.isfinite(cfg.sim_load) or cfg.sim_load < 0:
        raise ConfigError(f"simulated load must be 0 or more, not {cfg.sim_load}")
