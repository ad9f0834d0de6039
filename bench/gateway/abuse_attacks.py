"""The attacks of ``bench/gateway/abuse.py``, the fake endpoint, and what they measure with.

Each attack is a coroutine bounded in count and time (``--hold``) that connects from its own
loopback address (127.0.0.2 and up) and calls ``probe`` while it still holds what it opened;
``measure_epp`` forges ext_proc streams at an endpoint picker. See that script's doc.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.gateway import procs

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
            tmp = Path(out).with_suffix(".tmp")  # whole, by rename: the bench may be reading
            tmp.write_text(json.dumps(sent))
            os.replace(tmp, out)

    a = await asyncio.start_server(lambda r, w: serve("head", r, w), "127.0.0.1", head_port)
    b = await asyncio.start_server(lambda r, w: serve("body", r, w), "127.0.0.1", body_port)
    parent = os.getppid()
    async with a, b:
        for _ in range(3600):  # stopped by the bench long before, or gone with it
            if os.getppid() != parent:
                return
            await asyncio.sleep(1)


# --- measuring the gateway ----------------------------------------------------------------


class Sampler:
    """Sample a process's RSS and open descriptors every 0.1 s (from /proc); kill it past
    ``guard`` bytes, so that a gateway buffering without bound cannot exhaust the machine."""

    def __init__(self, pid: int, guard: int = 6 * 1024 * MB) -> None:
        self.pid, self.guard, self.tripped = pid, guard, False
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
            if self.rss_peak > self.guard and not self.tripped:
                self.tripped = True
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.rss_peak, self.status("VmHWM"))


LEGIT_ENDPOINTS = ("sim-1", "sim-2")  # the well-behaved client's; no attack reaches them


def in_flight(port: int, skip: tuple[str, ...] = ()) -> int | None:
    """Return the requests the gateway counts in flight on endpoints not in ``skip``; None
    when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        ours = not any(f'endpoint="{name}"' in line for name in skip)
        if line.startswith("trafficmgr_gateway_in_flight{") and ours:
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
    """Return the seconds until the peer closes the connection (reading what it answers
    first, a 408 or a 503); None if it is still open at ``deadline``."""
    t0 = time.monotonic()
    try:
        while await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.monotonic())):
            pass
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
    body = chat("long", stream=True, max_tokens=a.stream_tokens)
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
        timeline.append((round(time.monotonic() - t0), in_flight(port, LEGIT_ENDPOINTS)))
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
