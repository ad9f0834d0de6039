"""SM activity from GPM where the GPU has it, utilization.gpu where it does not or GPM fails."""

from __future__ import annotations

import pynvml
import pytest

from agents.heartbeat import GpuReading, gpu_to_json
from agents.nvml import NvmlCollector
from tests.agents.fake_nvml import FakeNvml

SERVING = [0, 1, 2, 3, 4, 6, 7]  # GPU 5 has fallen off the bus


def open_collector(nvml: FakeNvml) -> NvmlCollector:
    collector = NvmlCollector(nvml)
    collector.open()
    return collector


def sources(gpus: tuple[GpuReading, ...]) -> list[str | None]:
    return [g.util_source for g in gpus]


def test_sm_activity_over_one_interval_replaces_kernel_busy_time(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    first = collector.read()  # one sample per GPU so far: nothing to compare it with
    assert (first[0].util_pct, first[0].util_source) == (94, "nvml_util")
    second = collector.read()
    assert (second[0].util_pct, second[0].util_source) == (58.4, "gpm_sm")
    assert (second[3].util_pct, second[3].util_source) == (41.3, "gpm_sm")
    assert all(second[i].errors == () for i in SERVING)
    fake_nvml.set_sm(0, 12.5)
    assert collector.read()[0].util_pct == 12.5  # the interval since the previous reading
    lost = second[5]
    assert lost.lost and lost.util_pct is None and lost.util_source is None


def test_one_sample_per_gpu_is_kept_and_close_frees_them(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    for _ in range(20):
        collector.read()
    assert len(fake_nvml.gpm_live) == len(SERVING)  # the previous reading's samples only
    assert fake_nvml.gpm_metric_calls == 19 * len(SERVING)
    collector.close()
    assert fake_nvml.gpm_live == {}


def test_gpus_without_gpm_report_utilization_gpu(fake_nvml: FakeNvml) -> None:
    fake_nvml.no_gpm()
    collector = open_collector(fake_nvml)
    for _ in range(3):
        gpus = collector.read()
    assert [gpus[i].util_pct for i in (0, 1, 2)] == [94, 97, 91]
    assert sources(gpus) == ["nvml_util"] * 5 + [None] + ["nvml_util"] * 2
    assert all(g.errors == () for i, g in enumerate(gpus) if i != 5)
    assert fake_nvml.gpm_taken == 0 and fake_nvml.gpm_live == {}


def test_a_mixed_node_reports_each_gpus_own_source(fake_nvml: FakeNvml) -> None:
    fake_nvml.no_gpm(1)
    collector = open_collector(fake_nvml)
    collector.read()
    gpus = collector.read()
    assert (gpus[0].util_source, gpus[1].util_source) == ("gpm_sm", "nvml_util")
    assert gpus[1].util_pct == 97


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("nvmlGpmQueryDeviceSupport", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),  # an older driver
        ("nvmlGpmQueryDeviceSupport", pynvml.NVML_ERROR_NOT_SUPPORTED),
        ("nvmlGpmSampleGet", pynvml.NVML_ERROR_NOT_SUPPORTED),  # e.g. a MIG-enabled GPU
    ],
)
def test_gpm_missing_from_the_driver_is_a_quiet_fallback(
    fake_nvml: FakeNvml, call: str, code: int
) -> None:
    fake_nvml.fail(0, call, code)
    collector = open_collector(fake_nvml)
    for _ in range(3):
        gpu = collector.read()[0]
    assert (gpu.util_pct, gpu.util_source, gpu.errors) == (94, "nvml_util", ())
    assert not any(record.index == 0 for record in fake_nvml.gpm_live.values())


@pytest.mark.parametrize("call", ["nvmlGpmSampleGet", "nvmlGpmMetricsGet"])
def test_a_failing_gpm_call_falls_back_and_is_listed(fake_nvml: FakeNvml, call: str) -> None:
    collector = open_collector(fake_nvml)
    collector.read()
    fake_nvml.fail(0, call, pynvml.NVML_ERROR_UNKNOWN)
    gpus = collector.read()
    gpu = gpus[0]
    assert (gpu.util_pct, gpu.util_source) == (94, "nvml_util")
    assert len(gpu.errors) == 1 and "Unknown Error" in gpu.errors[0]
    assert gpu.errors[0].startswith("gpm ")
    assert gpus[1].util_source == "gpm_sm"  # the other GPUs carry on
    assert not any(record.index == 0 for record in fake_nvml.gpm_live.values())  # freed
    del fake_nvml.devices[0]["errors"]
    assert collector.read()[0].util_source == "nvml_util"  # a fresh first sample
    assert collector.read()[0].util_source == "gpm_sm"
    collector.close()
    assert fake_nvml.gpm_live == {}


def test_a_failing_metric_inside_a_good_call_falls_back(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    collector.read()
    fake_nvml.fail_metric(0, pynvml.NVML_GPM_METRIC_SM_UTIL, pynvml.NVML_ERROR_UNKNOWN)
    gpu = collector.read()[0]
    assert (gpu.util_pct, gpu.util_source) == (94, "nvml_util")
    assert gpu.errors == ("gpm sm_util: NVML return code 999",)


def test_a_gpu_falling_off_the_bus_during_gpm_is_reported_lost(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    collector.read()
    fake_nvml.fail(2, "nvmlGpmSampleGet", pynvml.NVML_ERROR_GPU_IS_LOST)
    gpus = collector.read()
    assert gpus[2].lost and gpus[2].util_pct is None
    assert any("GPU is lost" in e for e in gpus[2].errors)
    assert gpus[3].util_source == "gpm_sm" and not gpus[3].lost
    assert not any(record.index == 2 for record in fake_nvml.gpm_live.values())
    fake_nvml.lose(4)  # every call fails now, the GPM ones too
    assert collector.read()[4].lost
    assert not any(record.index == 4 for record in fake_nvml.gpm_live.values())
    collector.close()
    assert fake_nvml.gpm_live == {}


def test_a_gpu_back_after_a_reset_is_asked_about_gpm_again(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    collector.read()
    fake_nvml.fail(0, "nvmlGpmQueryDeviceSupport", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake_nvml.fail(0, "nvmlGpmSampleGet", pynvml.NVML_ERROR_RESET_REQUIRED)
    assert collector.read()[0].lost
    fake_nvml.devices[0]["errors"] = {}
    collector.read()
    assert collector.read()[0].util_source == "gpm_sm"


def test_the_heartbeat_says_where_util_pct_comes_from(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    first = [gpu_to_json(g) for g in collector.read()]
    second = [gpu_to_json(g) for g in collector.read()]
    assert (first[0]["util_pct"], first[0]["util_source"]) == (94, "nvml_util")
    assert (second[0]["util_pct"], second[0]["util_source"]) == (58.4, "gpm_sm")
    assert second[5]["util_pct"] is None and "util_source" not in second[5]
