"""``trafficmgr-agent``: wire the collectors to the pusher and run until SIGTERM or SIGINT."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from agents.agent import Agent, Probe
from agents.config import AgentConfig, ConfigError, parse_config
from agents.heartbeat import to_json
from agents.nvml import NvmlCollector, NvmlUnavailable, load_pynvml
from agents.probe import Prober, direct_opener
from agents.push import Pusher, control_plane_opener
from agents.server_metrics import ServerMetrics, fetch_text
from agents.sim_nvml import SimulatedNvml
from agents.sim_traces import TraceError, read_trace
from agents.simulate import SIM_GPUS, NodeSimulation

log = logging.getLogger("agents")

EXIT_CONFIG = 2
EXIT_NO_NVML = 3


def _server(cfg: AgentConfig) -> ServerMetrics | None:
    if not cfg.metrics_url:
        return None
    url, timeout, opener = cfg.metrics_url, cfg.timeout_s, direct_opener()
    kind = cfg.server_kind if cfg.server_kind != "http" else "auto"
    return ServerMetrics(lambda: fetch_text(url, timeout, opener), kind)


def _probe(cfg: AgentConfig) -> Probe | None:
    if not cfg.probe_url:
        return None
    if cfg.server_kind == "auto" and not cfg.metrics_url:
        log.warning(
            "the probe cannot tell the server's kind without --metrics-url: it will only GET %s "
            "and want a 2xx; set --server-kind vllm|tgi|triton to probe the model itself",
            cfg.probe_url,
        )
    return Prober(cfg.probe_url, cfg.server_kind, cfg.models, timeout=cfg.timeout_s).probe


def _simulation(cfg: AgentConfig) -> NodeSimulation:
    trace = read_trace(cfg.sim_trace) if cfg.sim_trace else None
    return NodeSimulation(
        SIM_GPUS[cfg.sim_gpu],
        cfg.sim_gpus,
        load=cfg.sim_load,
        trace=trace,
        seed=cfg.sim_seed,
        models=cfg.models or ("llama-3-8b",),
        endpoint=cfg.endpoint,
    )


def build_agent(cfg: AgentConfig, nvml: Any = None) -> Agent:
    """Assemble an agent; raise NvmlUnavailable when real GPUs are wanted and NVML fails."""
    server, probe = _server(cfg), _probe(cfg)
    if cfg.simulate:
        sim = _simulation(cfg)
        gpu = NvmlCollector(SimulatedNvml(sim))
        server = server or ServerMetrics(sim.metrics_text, "vllm", label="sim")
        probe = probe or sim.probe
        state = "simulated"
    else:
        gpu = NvmlCollector(nvml if nvml is not None else load_pynvml())
        state = "ok"
    gpu.open()
    pusher = None
    if not cfg.once:
        pusher = Pusher(
            cfg.control_plane,
            cfg.token,
            timeout=cfg.push_timeout_s,
            buffer_size=cfg.buffer_size,
            # Back within two intervals of the control plane's return: the loop holds its
            # decisions that long after an outage of its own (regions.loop.hold).
            backoff_max=min(10.0, max(1.0, 2 * cfg.interval_s)),
            opener=control_plane_opener(cfg.ca_file),
        )
    return Agent(
        cfg.endpoint,
        pusher=pusher,
        gpu=gpu,
        server=server,
        probe=probe,
        interval_s=cfg.interval_s,
        nvml_state=state,
    )


def _install_signal_handlers(agent: Agent) -> None:
    def handle(signum: int, frame: FrameType | None) -> None:
        if agent.stopping:
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)
        log.info("%s received, shutting down", signal.Signals(signum).name)
        agent.stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent; exit 0 on a clean stop, 2 on bad settings, 3 when NVML is unavailable."""
    try:
        cfg = parse_config(argv, os.environ)
    except ConfigError as exc:
        print(f"trafficmgr-agent: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s trafficmgr-agent[%(threadName)s]: %(message)s",
        stream=sys.stderr,
    )
    try:
        agent = build_agent(cfg)
    except NvmlUnavailable as exc:
        print(
            f"trafficmgr-agent: NVML is not available on this host: {exc}.\n"
            "Is the NVIDIA driver installed and a GPU visible (try nvidia-smi)? "
            "Use --simulate to run with simulated GPUs.",
            file=sys.stderr,
        )
        return EXIT_NO_NVML
    except (TraceError, OSError) as exc:
        print(f"trafficmgr-agent: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if cfg.once:
        heartbeat = agent.collect()
        if agent.gpu is not None:
            agent.gpu.close()
        print(json.dumps(to_json(heartbeat), indent=2))
        return 0
    if threading.current_thread() is threading.main_thread():
        _install_signal_handlers(agent)
    log.info(
        "endpoint %s%s: heartbeats to %s every %g s",
        cfg.endpoint,
        " (simulated GPUs)" if cfg.simulate else "",
        cfg.control_plane,
        cfg.interval_s,
    )
    agent.run()
    return 0
