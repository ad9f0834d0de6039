"""The gateway under abuse: memory, file descriptors, in-flight slots and legitimate service.

Why: the gateway faces the internet; a client or an endpoint that misbehaves must cost a
bounded amount of memory, have its connections closed within the deadlines, leave no
request counted in flight, and not slow down the clients that behave. Targets: RSS growth
<= 64 MB per worker under every attack, every slot freed, legitimate p99 <= 2x unloaded.

    .venv/bin/python bench/gateway_abuse.py [--attacks pipeline,tokens,...] [--hold 40]
        [--json bench/results/gateway_abuse.json]

Two simulated endpoints serve model ``bench`` (``python -m trafficmgr.simserver``) and a
fake endpoint process of this script serves ``evil-head`` (a response head that never ends)
and ``evil-body`` (a non-streamed body that never ends, up to ``--evil-cap-mb`` per answer).
Each attack gets a fresh gateway (``python -m trafficmgr.gateway``, one worker) and runs
alone: first ``--baseline`` s of the well-behaved client only (unloaded), then the attack
with the well-behaved client beside it. That client (a process of its own, from 127.0.0.1)
sends ``--legit-rate`` non-streamed chat completions a second, one new connection each;
attackers connect from other loopback addresses (127.0.0.2 and up), so that a per-client
limit can tell them apart. Sampled every 0.1 s from /proc: the gateway's VmRSS (its VmHWM
is reset before each attack where the kernel allows) and open descriptors; in flight
(``trafficmgr_gateway_in_flight``, summed) from /metrics at the attack's end, while the
attacker still holds its connections, and again after it closed them. Every loop is bounded
in count and time; everything is on loopback; the run stops by itself.

The attacks: ``pipeline`` (GET /healthz pipelined on one connection that never reads),
``metrics`` (the same with GET /metrics), ``tokens`` (distinct 60 KB bearer tokens),
``slowloris`` (heads sent a byte a second, and authenticated bodies that stall),
``evil`` (requests routed to the fake endpoint), ``nonreader`` (streams whose client stops
reading), ``conns`` (idle connections toward the connection cap).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateway_procs as procs

RESULTS = Path(__file__).resolve().parent / "results" / "gateway_abuse.json"
ATTACKS = ("pipeline", "metrics", "tokens", "slowloris", "evil", "nonreader", "conns")
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
      - {name: sim-1, address: "10.0.0.1:8000", gpu: H100, gpus: 2, models: [bench]}
      - {name: sim-2, address: "10.0.0.2:8000", gpu: H100, gpus: 2, models: [bench]}
      - {name: evil-head, address: "127.0.0.1:HEADPORT", gpu: H100, gpus: 1, models: [evil-head]}
      - {name: evil-body, address: "127.0.0.1:BODYPORT", gpu: H100, gpus: 1, models: [evil-body]}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 0, all_down: fail_open}
"""
AUTH = f"Authorization: Bearer {procs.TOKEN}\r\n"
MB = 1024 * 1024


def chat(model: str, stream: bool = False, max_tokens: int = 8) -> bytes:
    doc = {"model": model, "messages": [{"role": "user", "content": "hello there"}],
           "max_tokens": max_tokens, "ignore_eos": True, "stream": stream}  # fmt: skip
    return json.dumps(doc).encode()


def post_head(body_len: int, extra: str = AUTH) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n{extra}"
        f"Content-Type: application/json\r\nContent-Length: {body_len}\r\n\r\n"
    ).encode()


# --- the well-behaved client (a process of its own) -------------------------------------------


def legit(port: int, rate: float, seconds: float, out: str) -> int:
    """Send ``rate`` requests a second for ``seconds``; append ``latency status`` lines."""
    body = chat("bench")
    request = post_head(len(body)) + body
    stop = time.monotonic() + seconds
    with open(out, "a", buffering=1) as f:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        nxt = time.monotonic()
        while nxt < stop:
            time.sleep(max(0.0, nxt - time.monotonic()))
            nxt += 1 / rate
            t0 = time.perf_counter()
            status = "error"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(request)
                    got = b""
                    while b"\r\n\r\n" not in got or not got.endswith(b"}"):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                    status = got[9:12].decode() or "eof"
            except OSError as exc:
                status = type(exc).__name__
            f.write(f"{time.perf_counter() - t0:.6f} {status}\n")
    return 0


def legit_summary(path: Path) -> dict[str, Any]:
    text = path.read_text() if path.exists() else ""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    lat = sorted(float(r[0]) * 1000 for r in rows if r[1] == "200")
    errors: dict[str, int] = {}
    for r in rows:
        if r[1] != "200":
            errors[r[1]] = errors.get(r[1], 0) + 1
    if not lat:
        return {"requests": len(rows), "p50_ms": None, "p99_ms": None, "errors": errors}
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return {"requests": len(rows), "p50_ms": round(statistics.median(lat), 2),
            "p99_ms": round(p99, 2), "errors": errors}  # fmt: skip


# --- the fake endpoint (a process of its own) -------------------------------------------------


async def evil_server(head_port: int, body_port: int, cap: int, out: str) -> None:
    """Serve endless heads on one port, endless bodies on the other, ``cap`` bytes each."""
    sent = {"head": 0, "body": 0}

    async def serve(kind: str, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
            length = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                           if ln.lower().startswith(b"content-length:")), 0)  # fmt: skip
            await asyncio.wait_for(r.readexactly(length), 10)
            if kind == "head":
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                line = b"X-Junk: " + b"a" * 1000 + b"\r\n"
                chunk = line * 64
            else:
                w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100000000000\r\n\r\n" + b'{"x": "')  # fmt: skip
                chunk = b"a" * 65536
            n = 0
            while n < cap:
                w.write(chunk)
                n += len(chunk)
                sent[kind] += len(chunk)
                await asyncio.wait_for(w.drain(), 15)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            pass
        finally:
            w.close()
            Path(out).write_text(json.dumps(sent))

    a = await asyncio.start_server(lambda r, w: serve("head", r, w), "127.0.0.1", head_port)
    b = await asyncio.start_server(lambda r, w: serve("body", r, w), "127.0.0.1", body_port)
    async with a, b:
        await asyncio.sleep(3600)  # stopped by the bench long before


# --- measuring the gateway ----------------------------------------------------------------


class Sampler:
    """Sample a process's RSS and open descriptors every 0.1 s (from /proc)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_peak = self.fds_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return self.status("VmRSS")

    def status(self, key: str) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def fds(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return 0

    def start(self) -> None:
        with contextlib.suppress(OSError):  # reset VmHWM: this attack's peak
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        self.rss_peak, self.fds_peak = self.rss(), self.fds()
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.rss_peak = max(self.rss_peak, self.rss())
            self.fds_peak = max(self.fds_peak, self.fds())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.rss_peak, self.status("VmHWM"))


def in_flight(port: int) -> int | None:
    """Return the requests the gateway counts in flight (all endpoints), None if no answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith("trafficmgr_gateway_in_flight{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def connect(
    port: int, source: str, rcvbuf: int | None = None, limit: int = 1 << 20
) -> tuple[Any, Any]:
    s = socket.socket()
    s.setblocking(False)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    await asyncio.wait_for(asyncio.get_running_loop().sock_connect(s, ("127.0.0.1", port)), 5)
    return await asyncio.open_connection(sock=s, limit=limit)


async def read_answer(reader: asyncio.StreamReader, timeout: float) -> int:
    """Read one response with a Content-Length or chunked body; return its status."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    lines = head.decode("latin-1").split("\r\n")
    fields = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    if "content-length" in fields:
        await asyncio.wait_for(reader.readexactly(int(fields["content-length"])), timeout)
    elif fields.get("transfer-encoding") == "chunked":
        while True:
            size = int((await asyncio.wait_for(reader.readline(), timeout)).split(b";")[0], 16)
            await asyncio.wait_for(reader.readexactly(size + 2), timeout)
            if size == 0:
                break
    return int(lines[0].split()[1])


async def gone(reader: asyncio.StreamReader, deadline: float) -> float | None:
    """Return the seconds until the peer closes (or answers); None if open at ``deadline``."""
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(reader.read(65536), max(0.01, deadline - t0))
        return time.monotonic() - t0
    except TimeoutError:
        return None
    except OSError:
        return time.monotonic() - t0


def closes(times: list[float | None]) -> dict[str, Any]:
    shut = sorted(t for t in times if t is not None)
    return {"connections": len(times), "closed_by_gateway": len(shut),
            "still_open_at_end": len(times) - len(shut),
            "median_close_s": round(statistics.median(shut), 1) if shut else None,
            "max_close_s": round(shut[-1], 1) if shut else None}  # fmt: skip


Probe = Callable[[], None]

# --- the attacks ----------------------------------------------------------------------------


async def attack_pipeline(port: int, a: argparse.Namespace, probe: Probe, path: str) -> dict:
    count = a.pipeline if path == "/healthz" else a.pipeline // 10
    _, writer = await connect(port, "127.0.0.2", rcvbuf=4096, limit=4096)
    batch = 500
    chunk = f"GET {path} HTTP/1.1\r\nHost: gw\r\n\r\n".encode() * batch
    sent, t0, blocked = 0, time.monotonic(), False
    while sent < count and time.monotonic() - t0 < a.hold:
        writer.write(chunk)
        try:
            await asyncio.wait_for(writer.drain(), max(0.1, a.hold - (time.monotonic() - t0)))
        except (TimeoutError, OSError):
            blocked = True  # the gateway stopped reading: what flow control should do
            break
        sent += batch
    took = time.monotonic() - t0
    await asyncio.sleep(5)  # still not reading
    probe()
    writer.transport.abort()
    sent_mb = round(sent * len(chunk) / batch / MB, 1)
    return {"requests_sent": sent, "send_s": round(took, 1),
            "sender_blocked": blocked, "bytes_sent_mb": sent_mb}  # fmt: skip


async def attack_tokens(port: int, a: argparse.Namespace, probe: Probe) -> dict:
    body = chat("bench")
    statuses: dict[str, int] = {}
    count, t0 = 0, time.monotonic()

    async def worker(k: int) -> None:
        nonlocal count
        conn = None
        while count < a.tokens and time.monotonic() - t0 < a.hold:
            i = count
            count += 1
            token = f"{k:02d}{i:08d}".ljust(60_000, "x")
            try:
                if conn is None:
                    conn = await connect(port, "127.0.0.3")
                conn[1].write(post_head(len(body), f"Authorization: Bearer {token}\r\n") + body)
                code = str(await read_answer(conn[0], 10))
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                code, conn = type(exc).__name__, None
            statuses[code] = statuses.get(code, 0) + 1

    await asyncio.gather(*(worker(k) for k in range(8)))
    probe()
    return {"tokens_sent": count, "token_kb": 60, "statuses": statuses,
            "send_s": round(time.monotonic() - t0, 1)}  # fmt: skip


async def attack_slowloris(port: int, a: argparse.Namespace, probe: Probe) -> dict:
    t0 = time.monotonic()
    deadline = t0 + a.hold
    conns: list[tuple[str, Any, Any]] = []
    for i in range(a.slow_heads + a.slow_bodies):
        kind = "head" if i < a.slow_heads else "body"
        try:
            r, w = await connect(port, "127.0.0.4" if kind == "head" else "127.0.0.5")
        except (OSError, TimeoutError):
            continue
        if kind == "head":
            w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n")
        else:
            w.write(post_head(4096) + b'{"model": "bench", ')
        conns.append((kind, r, w))

    async def dribble(kind: str, r: Any, w: Any) -> float | None:
        ticker = asyncio.ensure_future(_drip(w, deadline) if kind == "head" else asyncio.sleep(0))
        try:
            return await gone(r, deadline)
        finally:
            ticker.cancel()

    times = await asyncio.gather(*(dribble(k, r, w) for k, r, w in conns))
    probe()
    for _, _, w in conns:
        w.transport.abort()
    heads = [t for (k, _, _), t in zip(conns, times, strict=True) if k == "head"]
    bodies = [t for (k, _, _), t in zip(conns, times, strict=True) if k == "body"]
    return {"hold_s": a.hold, "heads": closes(heads), "bodies": closes(bodies)}


async def _drip(w: Any, deadline: float) -> None:
    while time.monotonic() < deadline:
        await asyncio.sleep(1)
        try:
            w.write(b"X")  # one byte of a header name, a second at a time
        except OSError:
            return


async def attack_evil(port: int, a: argparse.Namespace, probe: Probe, evil_out: Path) -> dict:
    statuses: dict[str, int] = {}
    t0 = time.monotonic()

    async def one(model: str) -> None:
        body = chat(model)
        try:
            r, w = await connect(port, "127.0.0.6")
            w.write(post_head(len(body)) + body)
            code = str(await read_answer(r, max(1.0, a.hold - (time.monotonic() - t0))))
            w.transport.abort()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            code = type(exc).__name__
        statuses[f"{model} {code}"] = statuses.get(f"{model} {code}", 0) + 1

    for _ in range(a.evil_rounds):
        if time.monotonic() - t0 > a.hold:
            break
        await asyncio.gather(one("evil-head"), one("evil-body"))
    probe()
    sent = json.loads(evil_out.read_text()) if evil_out.exists() else {}
    return {"statuses": statuses, "endpoint_sent_mb": {k: round(v / MB) for k, v in sent.items()},
            "cap_per_answer_mb": a.evil_cap_mb}  # fmt: skip


async def attack_nonreader(port: int, a: argparse.Namespace, probe: Probe) -> dict:
    body = chat("bench", stream=True, max_tokens=a.stream_tokens)
    conns, t0 = [], time.monotonic()
    for _ in range(a.nonreaders):
        try:
            r, w = await connect(port, "127.0.0.7", rcvbuf=4096, limit=4096)
            w.write(post_head(len(body)) + body)
            conns.append((r, w))
        except (OSError, TimeoutError):
            continue
    timeline = []  # (s, in flight): when the slots are freed
    while time.monotonic() - t0 < a.hold:
        await asyncio.sleep(min(5.0, max(0.0, a.hold - (time.monotonic() - t0))))
        # never read; the gateway's buffers fill, then its write deadline should act
        timeline.append((round(time.monotonic() - t0), in_flight(port)))
    probe()
    for _, w in conns:
        w.transport.abort()
    return {"streams": len(conns), "in_flight_timeline": timeline, "hold_s": a.hold}


async def attack_conns(port: int, a: argparse.Namespace, probe: Probe) -> dict:
    conns: list[Any] = []
    failed: dict[str, int] = {}
    t0 = time.monotonic()
    for i in range(a.conns):
        if time.monotonic() - t0 > a.hold / 2:
            break
        try:  # 64 source addresses: past the per-client cap, toward the whole worker's
            conns.append(await connect(port, f"127.0.1.{1 + i % 64}"))
        except (OSError, TimeoutError) as exc:
            failed[type(exc).__name__] = failed.get(type(exc).__name__, 0) + 1
            await asyncio.sleep(0.01)
    opened_s = time.monotonic() - t0
    deadline = time.monotonic() + max(5.0, a.hold - opened_s)
    times = await asyncio.gather(*(gone(r, deadline) for r, _ in conns))
    probe()
    for _, w in conns:
        w.transport.abort()
    return {"attempted": len(conns) + sum(failed.values()), "connect_failures": failed,
            "open_s": round(opened_s, 1), **closes(list(times))}  # fmt: skip


# --- the endpoint picker: forged ext_proc streams -------------------------------------------

EPP_FLEET = """\
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
      - {name: victim, address: "127.0.0.1:9", gpu: H100, gpus: 2, models: [bench]}
      - {name: other, address: "127.0.0.1:7", gpu: H100, gpus: 2, models: [bench]}
"""
VICTIM = "127.0.0.1:9"


def epp_messages() -> dict[str, Any]:
    """The ext_proc messages of the attack (imported only for it: Envoy's protos)."""
    from envoy.config.core.v3.base_pb2 import HeaderMap, HeaderValue
    from envoy.extensions.filters.http.ext_proc.v3.processing_mode_pb2 import ProcessingMode
    from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
    from google.protobuf.struct_pb2 import Struct

    def head(values: dict[str, str], end: bool = False) -> Any:
        items = [HeaderValue(key=k, raw_value=v.encode()) for k, v in values.items()]
        return pb.HttpHeaders(headers=HeaderMap(headers=items), end_of_stream=end)

    mode = ProcessingMode
    config = pb.ProtocolConfiguration(
        request_body_mode=mode.BUFFERED,
        response_body_mode=mode.STREAMED,
        send_body_without_waiting_for_header_response=True,
    )
    body = pb.HttpBody(body=chat("bench"), end_of_stream=True)
    failed = pb.ProcessingRequest(response_headers=head({":status": "500"}, end=True))
    served = Struct()
    served.update({"x-gateway-destination-endpoint-served": VICTIM})
    failed.metadata_context.filter_metadata["envoy.lb"].CopyFrom(served)
    request = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "authorization": f"Bearer {procs.TOKEN}",
        "content-type": "application/json",
    }
    return {
        # no headers, no token: a body, then the victim "failed" (issue 24, finding 8)
        "body_first": [pb.ProcessingRequest(request_body=body, protocol_config=config), failed],
        # response phases of a stream that made no plan at all
        "unknown_stream": [failed, failed],
        "legit": [
            pb.ProcessingRequest(request_headers=head(request), protocol_config=config),
            pb.ProcessingRequest(request_body=body),
        ],
    }


def epp_call(stub: Any, messages: list[Any], want_plan: bool) -> list[str] | None:
    """Send ``messages`` on one Process stream; return the plan's addresses when one came."""
    import grpc

    call = stub.Process(iter(messages), timeout=5)
    try:
        for reply in call:
            lb = reply.dynamic_metadata.fields["envoy.lb"].struct_value
            listed = lb.fields["x-gateway-destination-endpoint"].string_value
            if listed:
                return listed.split(",")
            if reply.HasField("immediate_response"):
                return None
    except grpc.RpcError:
        return None
    finally:
        call.cancel()
    return None


def measure_epp(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Forge ext_proc streams at a running EPP; report whether the victim was ejected."""
    import grpc
    from envoy.service.ext_proc.v3.external_processor_pb2_grpc import ExternalProcessorStub

    fleet = tmp / "epp-fleet.yaml"
    fleet.write_text(EPP_FLEET)
    port = procs.free_port()
    cmd = [sys.executable, "-m", "trafficmgr.epp", "--fleet", str(fleet),
           "--listen", f"127.0.0.1:{port}", "--token", procs.TOKEN]  # fmt: skip
    proc = procs.start(cmd, procs.ROUTER_CPU, tmp / "epp.log")
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        stub = ExternalProcessorStub(channel)
        messages = epp_messages()
        sampler = Sampler(proc.pid)
        rss0 = sampler.rss()
        sampler.start()

        def listed(n: int) -> int:
            plans = [epp_call(stub, messages["legit"], True) for _ in range(n)]
            return sum(1 for p in plans if p and VICTIM in p)

        before = listed(20)
        forged, after = {}, {}
        for kind in ("unknown_stream", "body_first"):  # the milder first
            t0 = time.monotonic()
            n = 0
            while n < a.forged and time.monotonic() - t0 < a.hold:
                epp_call(stub, messages[kind], False)
                n += 1
            forged[kind] = n
            time.sleep(0.5)
            after[kind] = f"{listed(20)}/20"
        peak = sampler.stop()
        channel.close()
        return {
            "attack": "forged_ext_proc",
            "forged_streams": forged,
            "victim_in_plans_before": f"{before}/20",
            "victim_in_plans_after": after,
            "victim_ejected": before > 0 and any(v.startswith("0/") for v in after.values()),
            "rss_growth_mb": round((peak - rss0) / MB, 1),
            "epp_alive": proc.poll() is None,
        }
    finally:
        procs.stop(proc)


# --- the run --------------------------------------------------------------------------------


def attack_coro(
    name: str, port: int, a: argparse.Namespace, probe: Probe, evil_out: Path
) -> Awaitable[dict]:
    if name in ("pipeline", "metrics"):
        return attack_pipeline(port, a, probe, "/healthz" if name == "pipeline" else "/metrics")
    if name == "tokens":
        return attack_tokens(port, a, probe)
    if name == "slowloris":
        return attack_slowloris(port, a, probe)
    if name == "evil":
        return attack_evil(port, a, probe, evil_out)
    if name == "nonreader":
        return attack_nonreader(port, a, probe)
    return attack_conns(port, a, probe)


def legit_run(port: int, a: argparse.Namespace, seconds: float, out: Path) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--legit", f"{port}:{a.legit_rate}:{seconds}:{out}"]
    return procs.start(cmd, procs.SIM_CPU)


def measure(name: str, fleet_file: Path, a: argparse.Namespace, tmp: Path, evil_out: Path) -> dict:
    """Run one attack on a fresh gateway; return its row."""
    with procs.gateway(fleet_file, "--workers", "1") as (port, proc):
        sampler = Sampler(proc.pid)
        base_out, during_out = tmp / f"{name}-base.txt", tmp / f"{name}-during.txt"
        base = legit_run(port, a, a.baseline, base_out)
        base.wait(a.baseline + 30)
        time.sleep(0.5)
        rss0, fds0 = sampler.rss(), sampler.fds()
        evil_out.unlink(missing_ok=True)
        sampler.start()
        during = legit_run(port, a, 3 * a.hold + 30, during_out)
        while not during_out.exists() and during.poll() is None:
            time.sleep(0.05)  # the attack starts when the client does
        at_end: dict[str, Any] = {}

        def probe() -> None:  # the attacker still holds what it opened
            at_end.update(fds=sampler.fds(), in_flight=in_flight(port), rss=sampler.rss())

        t0 = time.monotonic()
        detail = asyncio.run(attack_coro(name, port, a, probe, evil_out))
        took = time.monotonic() - t0
        procs.stop(during)
        peak = sampler.stop()
        time.sleep(a.settle)
        alive = proc.poll() is None
        row = {
            "attack": name,
            "attack_s": round(took, 1),
            "rss_before_mb": round(rss0 / MB, 1),
            "rss_peak_mb": round(peak / MB, 1),
            "rss_growth_mb": round((peak - rss0) / MB, 1),
            "rss_after_mb": round(sampler.rss() / MB, 1),
            "fds_before": fds0,
            "fds_peak": sampler.fds_peak,
            "fds_at_attack_end": at_end.get("fds"),
            "fds_after": sampler.fds(),
            "in_flight_at_attack_end": at_end.get("in_flight"),
            "in_flight_after": in_flight(port) if alive else None,
            "gateway_alive": alive,
            "legit_unloaded": legit_summary(base_out),
            "legit_during": legit_summary(during_out),
            "detail": detail,
        }
    row["verdict"] = verdict(row)
    return row


def verdict(row: dict[str, Any]) -> dict[str, bool]:
    base, during = row["legit_unloaded"]["p99_ms"], row["legit_during"]["p99_ms"]
    lost = sum(row["legit_during"]["errors"].values())
    return {
        "rss_ok": row["rss_growth_mb"] <= 64,
        "slots_freed": row["in_flight_after"] == 0 and row["fds_after"] <= row["fds_before"] + 4,
        "legit_p99_ok": bool(base and during and during <= 2 * base and not lost),
    }


def pair(legit: dict[str, Any]) -> str:
    return f"{legit['p50_ms']}/{legit['p99_ms']}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'attack':<10} {'RSS +MB':>8} {'fds peak/end/after':>19} {'in-flight end/after':>20}"
            f" {'legit p50/p99 ms unloaded':>26} {'during':>16} {'legit errors':>13}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        u, d = r["legit_unloaded"], r["legit_during"]
        fds = f"{r['fds_peak']}/{r['fds_at_attack_end']}/{r['fds_after']}"
        fl = f"{r['in_flight_at_attack_end']}/{r['in_flight_after']}"
        lines.append(
            f"{r['attack']:<10} {r['rss_growth_mb']:>8} {fds:>19} {fl:>20}"
            f" {pair(u):>26} {pair(d):>16}"
            f" {sum(d['errors'].values()):>13}"
        )
    return "\n".join(lines)


def run(a: argparse.Namespace) -> dict[str, Any]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        head_port, body_port = procs.free_port(), procs.free_port()
        fleet = tmp / "fleet.yaml"
        fleet.write_text(
            FLEET.replace("HEADPORT", str(head_port)).replace("BODYPORT", str(body_port))
        )
        evil_out = tmp / "evil.json"
        spec = f"{head_port}:{body_port}:{a.evil_cap_mb * MB}:{evil_out}"
        evil = procs.start([sys.executable, __file__, "--evil", spec], procs.SIM_CPU)
        extra = ["--endpoints", "sim-1,sim-2", "--max-model-len", "1000000"]
        try:
            with procs.simulated_fleet(str(fleet), a.time_scale, extra) as (_, path, _):
                for name in [n for n in a.attacks.split(",") if n]:
                    row = measure(name, path, a, tmp, evil_out)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            procs.stop(evil)
        epp = measure_epp(a, tmp) if a.epp else None
        if epp is not None:
            print(json.dumps(epp), flush=True)
    return {
        "command": "bench/gateway_abuse.py " + " ".join(sys.argv[1:]),
        "commit": _commit(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": procs.load_average(),
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "legit", "evil")},
        "rows": rows,
        "epp": epp,
    }


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=procs.ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "trafficmgr"], cwd=procs.ROOT,
                           capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, in order")
    p.add_argument("--hold", type=float, default=40.0, help="longest an attack lasts, s")
    p.add_argument("--baseline", type=float, default=8.0, help="unloaded legit phase, s")
    p.add_argument("--settle", type=float, default=3.0, help="wait after an attack, s")
    p.add_argument("--legit-rate", type=float, default=20.0, help="legit requests a second")
    p.add_argument("--time-scale", type=float, default=20.0, help="of the simulated servers")
    p.add_argument("--pipeline", type=int, default=200_000, help="pipelined GET /healthz")
    p.add_argument("--tokens", type=int, default=3_000, help="distinct 60 KB junk tokens")
    p.add_argument("--slow-heads", type=int, default=300)
    p.add_argument("--slow-bodies", type=int, default=100)
    p.add_argument("--evil-rounds", type=int, default=4, help="pairs of requests to the fake")
    p.add_argument("--evil-cap-mb", type=int, default=512, help="bytes per fake answer, MB")
    p.add_argument("--nonreaders", type=int, default=8)
    p.add_argument("--stream-tokens", type=int, default=100_000)
    p.add_argument("--conns", type=int, default=12_000, help="idle connections to open")
    p.add_argument("--epp", action=argparse.BooleanOptionalAction, default=True,
                   help="also forge ext_proc streams at an endpoint picker")  # fmt: skip
    p.add_argument("--forged", type=int, default=200, help="forged streams of each kind")
    p.add_argument("--json", default=str(RESULTS), help="write the results here ('' : no)")
    p.add_argument("--legit", help=argparse.SUPPRESS)
    p.add_argument("--evil", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.legit:
        port, rate, seconds, out = a.legit.split(":", 3)
        return legit(int(port), float(rate), float(seconds), out)
    if a.evil:
        hp, bp, cap, out = a.evil.split(":", 3)
        asyncio.run(evil_server(int(hp), int(bp), int(cap), out))
        return 0
    unknown = {n for n in a.attacks.split(",") if n} - set(ATTACKS)
    if unknown:
        p.error(f"--attacks: unknown {sorted(unknown)}; choose from {', '.join(ATTACKS)}")
    result = run(a)
    print(table(result["rows"]))
    if result["epp"]:
        e = result["epp"]
        print(f"EPP, forged ext_proc streams {e['forged_streams']}: victim in plans "
              f"{e['victim_in_plans_before']} before, {e['victim_in_plans_after']} after; "
              f"ejected: {e['victim_ejected']}")  # fmt: skip
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
