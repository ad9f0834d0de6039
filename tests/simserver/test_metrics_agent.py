"""The node agent reads the live ``/metrics`` page exactly as it reads a real vLLM node."""

from __future__ import annotations

import time

from agents.server_metrics import ServerMetrics, fetch_text, histogram, parse_exposition
from tests.simserver.lab import RawStream, StartServers, chat, post_json, request
from trafficmgr.simserver import SimServerThread

REQUIRED = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:request_generation_tokens_bucket",
)


def scraper(servers: SimServerThread, name: str) -> ServerMetrics:
    url = servers.url(name) + "/metrics"
    return ServerMetrics(lambda: fetch_text(url, 5.0))


def test_page_has_vllms_names_with_model_labels(servers: SimServerThread) -> None:
    url = servers.url("slow-1")
    assert post_json(url, "/v1/chat/completions", chat("m-big", 40, 7, ignore_eos=True))[0] == 200
    status, text, headers = request(url, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    page = parse_exposition(text)
    assert page.garbage_lines == 0
    for name in REQUIRED:
        assert page.has(name), name
        assert page.label_values(name, "model_name") == ("m-big", "m-small"), name
    assert page.total("vllm:generation_tokens_total", model_name="m-big") == 7
    assert page.total("vllm:prompt_tokens_total", model_name="m-big") == 40
    assert page.total("vllm:generation_tokens_total", model_name="m-small") == 0
    e2e = histogram(page, "vllm:e2e_request_latency_seconds", model_name="m-big")
    assert e2e is not None and e2e.count == 1


def test_agent_reading_after_traffic(servers: SimServerThread) -> None:
    url = servers.url("slow-1")
    for model, tokens in (("m-small", 5), ("m-small", 9), ("m-big", 3)):
        body = chat(model, 20, tokens, ignore_eos=True)
        assert post_json(url, "/v1/chat/completions", body)[0] == 200
    reading = scraper(servers, "slow-1").collect()
    assert (reading.kind, reading.scrape_ok, reading.garbage_lines) == ("vllm", True, 0)
    assert reading.models_loaded == ("m-big", "m-small")
    assert (reading.requests_running, reading.requests_waiting) == (0, 0)
    assert reading.kv_cache_usage == 0.0
    assert reading.ttft_p50_ms is not None and reading.ttft_p50_ms > 0
    lengths = dict(reading.output_tokens)
    assert lengths["m-small"].count == 2 and lengths["m-big"].count == 1
    # 1, 2, 5, 10 buckets: 5 tokens is within le=5, 9 within le=10
    assert dict(zip(lengths["m-small"].le, lengths["m-small"].counts, strict=True))[5.0] == 1


def test_agent_sees_a_request_in_flight(start_servers: StartServers) -> None:
    servers = start_servers(time_scale=1.0)
    doc = {"model": "m-small", "prompt": "a b c", "max_tokens": 2000, "ignore_eos": True}
    stream = RawStream(servers.url("slow-1"), "/v1/completions", {**doc, "stream": True})
    try:
        stream.read_until(b"data: {")
        metrics = scraper(servers, "slow-1")
        first = metrics.collect()
        time.sleep(0.3)
        second = metrics.collect()
    finally:
        stream.close()
    assert (first.requests_running, first.requests_waiting) == (1, 0)
    assert first.kv_cache_usage is not None and first.kv_cache_usage > 0
    assert second.tokens_per_s is not None and 30 < second.tokens_per_s < 200  # T1: 100 tokens/s
