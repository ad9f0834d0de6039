"""Probe the model, not the port: a real HTTP server on 127.0.0.1 plays vLLM, TGI and Triton."""

from __future__ import annotations

import time

import pytest

from agents.probe import Prober
from tests.agents.conftest import HANG, Stub

MODELS = {"object": "list", "data": [{"id": "llama-3-70b", "object": "model", "owned_by": "vllm"}]}


def test_vllm_with_its_model_loaded_is_healthy(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on("GET", "/v1/models", (200, MODELS))
    r = Prober(stub.url, "vllm", ["llama-3-70b"], timeout=1).probe()
    assert r.ok and r.reason == "ok" and r.models == ("llama-3-70b",)
    assert r.latency_ms is not None and 0 < r.latency_ms < 1000
    assert [s.path for s in stub.seen] == ["/health", "/v1/models"]


def test_vllm_answering_200_without_the_model_is_not_healthy(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on("GET", "/v1/models", (200, MODELS))
    r = Prober(stub.url, "vllm", ["llama-3-8b"], timeout=1).probe()
    assert not r.ok and r.reason == "model not loaded: llama-3-8b" and r.status == 200


def test_vllm_with_no_model_at_all_is_not_healthy(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on("GET", "/v1/models", (200, {"object": "list", "data": []}))
    assert Prober(stub.url, "vllm", timeout=1).probe().reason == "no model loaded"


def test_vllm_engine_dead(stub: Stub) -> None:
    stub.on("GET", "/health", (503, "engine dead"))
    r = Prober(stub.url, "vllm", timeout=1).probe()
    assert not r.ok and r.status == 503 and "/health answered 503" in r.reason


def test_garbage_model_list(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on("GET", "/v1/models", (200, "<html>gateway</html>"))
    r = Prober(stub.url, "vllm", timeout=1).probe()
    assert not r.ok and "other than JSON" in r.reason


def test_hang_times_out_within_the_budget(stub: Stub) -> None:
    stub.on("GET", "/health", HANG)
    started = time.monotonic()
    r = Prober(stub.url, "vllm", timeout=0.3).probe()
    elapsed = time.monotonic() - started
    assert not r.ok and r.reason == "timeout after 0.3 s"
    assert 0.25 < elapsed < 1.0


def test_slow_second_request_shares_one_budget(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on("GET", "/v1/models", HANG)
    started = time.monotonic()
    r = Prober(stub.url, "vllm", timeout=0.3).probe()
    assert not r.ok and "timeout" in r.reason
    assert time.monotonic() - started < 1.0


def test_nothing_listening(stub: Stub) -> None:
    r = Prober("http://127.0.0.1:9", "vllm", timeout=0.5).probe()
    assert not r.ok and r.reason.startswith("unreachable")


def test_tgi_health_and_info(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on(
        "GET",
        "/info",
        (200, {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "max_batch_total_tokens": 65536}),
    )
    r = Prober(stub.url, "tgi", timeout=1).probe()
    assert r.ok and r.models == ("meta-llama/Llama-3.1-8B-Instruct",)
    assert r.facts == {"max_batch_total_tokens": 65536.0}
    wrong = Prober(stub.url, "tgi", ["llama-3-70b"], timeout=1).probe()
    assert not wrong.ok and "llama-3-70b" in wrong.reason


def test_tgi_unhealthy(stub: Stub) -> None:
    stub.on("GET", "/health", (503, {"error": "unhealthy", "error_type": "healthcheck"}))
    assert not Prober(stub.url, "tgi", timeout=1).probe().ok


def test_triton_named_models(stub: Stub) -> None:
    stub.on("GET", "/v2/health/ready", (200, ""))
    stub.on("GET", "/v2/models/ensemble/ready", (200, ""))
    stub.on("GET", "/v2/models/tensorrt_llm/ready", (400, {"error": "not ready"}))
    ok = Prober(stub.url, "triton", ["ensemble"], timeout=1).probe()
    assert ok.ok
    bad = Prober(stub.url, "triton", ["ensemble", "tensorrt_llm"], timeout=1).probe()
    assert not bad.ok and bad.reason == "model not ready: tensorrt_llm (400)"


def test_triton_repository_index_when_no_model_is_named(stub: Stub) -> None:
    stub.on("GET", "/v2/health/ready", (200, ""))
    stub.on(
        "POST",
        "/v2/repository/index",
        (
            200,
            [
                {"name": "ensemble", "version": "1", "state": "READY"},
                {"name": "tensorrt_llm", "version": "1", "state": "UNAVAILABLE"},
            ],
        ),
    )
    r = Prober(stub.url, "triton", timeout=1).probe()
    assert r.ok and r.models == ("ensemble",)
    stub.on("POST", "/v2/repository/index", (200, [{"name": "x", "state": "LOADING"}]))
    assert Prober(stub.url, "triton", timeout=1).probe().reason == "no model loaded"


def test_auto_kind_follows_the_metrics_and_falls_back_to_plain_http(stub: Stub) -> None:
    stub.on("GET", "/health", (200, ""))
    stub.on("GET", "/v1/models", (200, MODELS))
    stub.on("GET", "/", (204, ""))
    prober = Prober(stub.url, "auto", timeout=1)
    assert prober.probe("vllm").models == ("llama-3-70b",)
    plain = prober.probe(None)
    assert plain.ok and stub.seen[-1].path == "/"


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="unknown probe kind"):
        Prober("http://127.0.0.1:1", "grpc")
