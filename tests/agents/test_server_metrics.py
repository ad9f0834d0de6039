"""Prometheus text from vLLM, TGI and Triton: parsing, garbage lines, rates, TTFT quantiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.server_metrics import (
    Exposition,
    Histogram,
    ServerMetrics,
    detect_kind,
    histogram,
    histogram_delta,
    parse_exposition,
    quantile,
)

FIXTURES = Path(__file__).parent / "fixtures"
GARBAGE = [
    "this is not a metric",
    'vllm:num_requests_running{model_name="x" 3',
    "\x00\x01\x02 binary noise",
    "vllm:num_requests_waiting{} abc",
    "{} 1",
]


def ms(value: float | None) -> float:
    assert value is not None
    return value


def page(name: str) -> str:
    return (FIXTURES / name).read_text()


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def scraper(*pages: str, kind: str = "auto") -> tuple[ServerMetrics, Clock]:
    queue = list(pages)
    clock = Clock()
    return ServerMetrics(lambda: queue.pop(0), kind, clock=clock), clock


def test_vllm_v1_page() -> None:
    metrics, _ = scraper(page("vllm_v1.txt"))
    r = metrics.collect()
    assert (r.kind, r.scrape_ok, r.garbage_lines) == ("vllm", True, 0)
    assert (r.requests_running, r.requests_waiting) == (42, 7)
    assert r.kv_cache_usage == pytest.approx(0.6731)
    assert r.models_loaded == ("meta-llama/Llama-3.1-70B-Instruct",)
    # 12480 observations; the median falls in (0.1, 0.25], p99 in (1.0, 2.5]
    assert 100 < ms(r.ttft_p50_ms) <= 250
    assert 1000 < ms(r.ttft_p99_ms) <= 2500
    assert r.tokens_per_s is None  # a rate needs two scrapes


def test_vllm_v0_page_uses_the_older_kv_gauge() -> None:
    metrics, _ = scraper(page("vllm_v0.txt"))
    r = metrics.collect()
    assert r.kind == "vllm"
    assert r.kv_cache_usage == pytest.approx(0.2417)
    assert (r.requests_running, r.requests_waiting) == (11, 0)
    assert r.models_loaded == ("llama-3-8b",)
    assert 40 < ms(r.ttft_p50_ms) <= 60


def test_vllm_tokens_per_second_between_scrapes() -> None:
    first = page("vllm_v1.txt")
    line = next(x for x in first.splitlines() if x.startswith("vllm:generation_tokens_total{"))
    total = float(line.rsplit(" ", 1)[1])
    second = first.replace(line, line.rsplit(" ", 1)[0] + f" {total + 5000.0}")
    metrics, clock = scraper(first, second)
    metrics.collect()
    clock.t += 2.0
    assert metrics.collect().tokens_per_s == pytest.approx(2500.0)


def test_counter_reset_gives_no_rate() -> None:
    first = page("vllm_v0.txt")
    line = next(x for x in first.splitlines() if x.startswith("vllm:generation_tokens_total{"))
    restarted = first.replace(line, line.rsplit(" ", 1)[0] + " 10.0")
    metrics, clock = scraper(first, restarted)
    metrics.collect()
    clock.t += 1.0
    assert metrics.collect().tokens_per_s is None


def test_ttft_follows_the_recent_window_not_all_time() -> None:
    first = page("vllm_v0.txt")
    prefix = 'vllm:time_to_first_token_seconds_bucket{le="'
    lines = []
    for line in first.splitlines():
        if line.startswith(prefix) or line.startswith("vllm:time_to_first_token_seconds_count"):
            head, value = line.rsplit(" ", 1)
            le = line[len(prefix) :].split('"', 1)[0] if line.startswith(prefix) else "+Inf"
            slow = 100.0 if le in ("5.0", "7.5", "10.0", "+Inf") else 0.0  # 100 new, 2.5-5 s
            line = f"{head} {float(value) + slow}"
        lines.append(line)
    metrics, clock = scraper(first, "\n".join(lines) + "\n")
    assert ms(metrics.collect().ttft_p50_ms) < 100
    clock.t += 1.0
    r = metrics.collect()
    assert 2500 < ms(r.ttft_p50_ms) <= 5000


def test_tgi_page() -> None:
    metrics, _ = scraper(page("tgi.txt"))
    r = metrics.collect({"max_batch_total_tokens": 65536.0})
    assert r.kind == "tgi"
    assert (r.requests_running, r.requests_waiting) == (29, 3)
    assert r.kv_cache_usage == pytest.approx(41760 / 65536)
    # queue-time quantile plus the mean prefill forward pass (~0.085 s)
    assert 80 < ms(r.ttft_p50_ms) < 200
    assert ms(r.ttft_p99_ms) > ms(r.ttft_p50_ms)


def test_tgi_without_probe_facts_has_no_kv_usage() -> None:
    metrics, _ = scraper(page("tgi.txt"))
    assert metrics.collect().kv_cache_usage is None


def test_triton_trtllm_page() -> None:
    metrics, _ = scraper(page("triton_trtllm.txt"))
    r = metrics.collect()
    assert r.kind == "triton"
    assert (r.requests_running, r.requests_waiting) == (37, 5)  # TRT-LLM active, pending
    assert r.kv_cache_usage == pytest.approx(0.580024)
    assert set(r.models_loaded) == {"ensemble", "preprocessing", "tensorrt_llm", "postprocessing"}
    assert 100 < ms(r.ttft_p50_ms) <= 500  # first-response histogram, in ms
    assert 500 < ms(r.ttft_p99_ms) <= 5000


def test_triton_without_trtllm_uses_littles_law() -> None:
    plain = "\n".join(
        line
        for line in page("triton_trtllm.txt").splitlines()
        if not line.startswith(("nv_trt_llm", "nv_inference_first_response"))
    )
    name = 'nv_inference_compute_infer_duration_us{model="tensorrt_llm",version="1"}'
    before = next(x for x in plain.splitlines() if x.startswith(name))
    value = float(before.rsplit(" ", 1)[1])
    later = plain.replace(before, f"{name} {value + 24_000_000}")  # 24 s of compute in 2 s
    metrics, clock = scraper(plain, later)
    assert metrics.collect().requests_running is None
    clock.t += 2.0
    assert metrics.collect().requests_running == 12


@pytest.mark.parametrize("name", ["vllm_v1.txt", "vllm_v0.txt", "tgi.txt", "triton_trtllm.txt"])
def test_garbage_lines_are_skipped_and_counted(name: str) -> None:
    clean = page(name)
    lines = clean.splitlines()
    for offset, junk in enumerate(GARBAGE):
        lines.insert(10 + 7 * offset, junk)
    dirty = "\n".join(lines) + "\n"
    good, _ = scraper(clean)
    bad, _ = scraper(dirty)
    expected, got = good.collect(), bad.collect()
    assert got.garbage_lines == len(GARBAGE)
    assert got.scrape_ok
    assert got.requests_running == expected.requests_running
    assert got.requests_waiting == expected.requests_waiting
    assert got.ttft_p50_ms == pytest.approx(expected.ttft_p50_ms)


def test_page_of_pure_garbage() -> None:
    x = parse_exposition("\n".join(GARBAGE) + "\n")
    assert x.garbage_lines == len(GARBAGE)
    assert detect_kind(x) == "unknown"
    metrics, _ = scraper("\n".join(GARBAGE))
    r = metrics.collect()
    assert r.kind == "unknown" and r.error and r.requests_running is None


def test_failed_scrape_is_a_reading_not_an_exception() -> None:
    def broken() -> str:
        raise ConnectionRefusedError("connection refused")

    r = ServerMetrics(broken, "vllm").collect()
    assert r.scrape_ok is False and "refused" in (r.error or "")


def test_explicit_kind_overrides_detection() -> None:
    metrics, _ = scraper(page("triton_trtllm.txt"), kind="vllm")
    r = metrics.collect()
    assert r.kind == "vllm" and r.requests_running is None


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="unknown server kind"):
        ServerMetrics(lambda: "", "sglang")


def test_quantile_interpolates_like_promql() -> None:
    h = Histogram(((0.1, 10.0), (0.5, 60.0), (1.0, 100.0), (float("inf"), 100.0)), 100.0, 30.0)
    assert quantile(h, 0.5) == pytest.approx(0.1 + 0.4 * (50 - 10) / 50)
    assert quantile(h, 0.05) == pytest.approx(0.05)
    assert quantile(h, 0.99) == pytest.approx(0.5 + 0.5 * (99 - 60) / 40)
    overflow = Histogram(((0.1, 1.0), (float("inf"), 10.0)), 10.0, 50.0)
    assert quantile(overflow, 0.9) == 0.1  # in +Inf: the highest finite bound
    empty = Histogram(((0.1, 0.0), (float("inf"), 0.0)), 0.0, 0.0)
    assert quantile(empty, 0.5) is None


def test_histogram_sums_label_sets_and_delta_handles_resets() -> None:
    x = parse_exposition(
        'h_bucket{engine="0",le="1"} 2\nh_bucket{engine="0",le="+Inf"} 3\n'
        'h_bucket{engine="1",le="1"} 1\nh_bucket{engine="1",le="+Inf"} 5\n'
        'h_count{engine="0"} 3\nh_count{engine="1"} 5\nh_sum{engine="0"} 4\nh_sum{engine="1"} 9\n'
    )
    h = histogram(x, "h")
    assert h is not None
    assert h.buckets == ((1.0, 3.0), (float("inf"), 8.0)) and h.count == 8 and h.total == 13
    smaller = Histogram(((1.0, 1.0), (float("inf"), 1.0)), 1.0, 1.0)
    assert histogram_delta(smaller, h) is smaller  # a reset: the new totals stand
    assert histogram_delta(h, smaller).count == 7


def test_counters_match_with_or_without_type_lines() -> None:
    typed = parse_exposition("# TYPE c counter\nc_total 5\n")
    untyped = parse_exposition("c 5\n")
    assert isinstance(typed, Exposition)
    assert typed.total("c_total") == untyped.total("c_total") == 5
