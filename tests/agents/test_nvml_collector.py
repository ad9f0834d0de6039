"""The NVML collector against recorded 8x H100 data: units, throttling, lost GPUs, XID events."""

from __future__ import annotations

import pynvml
import pytest

from agents.nvml import NvmlCollector, NvmlUnavailable, decode_throttle_reasons
from tests.agents.fake_nvml import FakeNvml


def open_collector(nvml: FakeNvml) -> NvmlCollector:
    collector = NvmlCollector(nvml)
    collector.open()
    return collector


def test_reads_every_gpu_in_heartbeat_units(fake_nvml: FakeNvml) -> None:
    gpus = open_collector(fake_nvml).read()
    assert [g.index for g in gpus] == list(range(8))
    gpu0 = gpus[0]
    assert gpu0.uuid == "GPU-3f1c8a52-6b0e-4d1e-9a47-1c2f9e0b7d31"
    assert gpu0.name == "NVIDIA H100 80GB HBM3"
    assert gpu0.util_pct == 94
    assert gpu0.mem_total_mb == 81559  # 85520809984 bytes
    assert gpu0.mem_used_mb == 73712
    assert gpu0.temp_c == 61
    assert gpu0.power_w == pytest.approx(612.483)
    assert gpu0.power_limit_w == 700
    assert gpu0.throttle_reasons == ()
    assert (gpu0.ecc_errors, gpu0.ecc_corrected) == (0, 0)
    assert gpu0.errors == () and not gpu0.lost
    assert gpus[6].ecc_corrected == 12


def test_throttled_gpus_are_named(fake_nvml: FakeNvml) -> None:
    gpus = open_collector(fake_nvml).read()
    assert gpus[3].throttle_reasons == ("hw_slowdown", "sw_thermal", "hw_thermal")
    assert gpus[7].throttle_reasons == ("sw_power_cap",)


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, ()),
        (0x1, ("gpu_idle",)),
        (0x80, ("hw_power_brake",)),
        (0x4 | 0x8, ("sw_power_cap", "hw_slowdown")),
        (0x40 | 0x1000, ("hw_thermal", "unknown_0x1000")),
    ],
)
def test_decode_throttle_bitmask(mask: int, names: tuple[str, ...]) -> None:
    assert decode_throttle_reasons(mask) == names


def test_decode_agrees_with_pynvml_constants() -> None:
    assert decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonHwSlowdown) == ("hw_slowdown",)
    assert decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonSwThermalSlowdown) == (
        "sw_thermal",
    )
    assert decode_throttle_reasons(pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown) == (
        "hw_power_brake",
    )


def test_lost_gpu_is_reported_not_raised(fake_nvml: FakeNvml) -> None:
    gpus = open_collector(fake_nvml).read()
    lost = gpus[5]
    assert lost.lost is True
    assert lost.uuid == "GPU-e3f4a5b6-c7d8-4e9f-80a1-b2c3d4e5f6a7"
    assert lost.util_pct is None and lost.mem_used_mb is None and lost.power_w is None
    assert any("GPU is lost" in e for e in lost.errors)
    assert not any(g.lost for i, g in enumerate(gpus) if i != 5)


def test_gpu_lost_mid_run_keeps_its_identity(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    before = collector.read()[2]
    fake_nvml.lose(2)
    fake_nvml.fail(2, "nvmlDeviceGetUUID", pynvml.NVML_ERROR_GPU_IS_LOST)
    after = collector.read()[2]
    assert after.lost and not before.lost
    assert after.uuid == before.uuid and after.name == before.name


def test_handle_lookup_failing_with_gpu_lost(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    fake_nvml.fail(4, "nvmlDeviceGetHandleByIndex", pynvml.NVML_ERROR_GPU_IS_LOST)
    assert collector.read()[4].lost


def test_xid_events_counted_per_gpu_with_zero_timeout(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    assert set(fake_nvml.registered) == set(range(8))
    assert all(t & pynvml.nvmlEventTypeXidCriticalError for t in fake_nvml.registered.values())
    gpus = collector.read()
    assert (gpus[5].xid_errors, gpus[5].xid_last) == (1, 79)
    assert (gpus[2].xid_errors, gpus[2].xid_last) == (1, 13)
    assert gpus[0].xid_errors == 0 and gpus[0].xid_last is None
    assert set(fake_nvml.wait_timeouts) == {0}  # never blocks the tick
    again = collector.read()  # drained: no double counting
    assert again[5].xid_errors == 1
    fake_nvml.push_xid(2, 48)
    third = collector.read()
    assert (third[2].xid_errors, third[2].xid_last) == (2, 48)


def test_not_supported_is_quiet_other_errors_are_listed(fake_nvml: FakeNvml) -> None:
    fake_nvml.fail(1, "nvmlDeviceGetTotalEccErrors", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake_nvml.fail(1, "nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_UNKNOWN)
    gpu = open_collector(fake_nvml).read()[1]
    assert gpu.ecc_errors is None and gpu.ecc_corrected is None
    assert gpu.power_w is None
    assert gpu.errors == ("power: Unknown Error",)
    assert gpu.util_pct == 97 and not gpu.lost


def test_falls_back_to_throttle_reasons_on_old_drivers(fake_nvml: FakeNvml) -> None:
    for index in range(8):
        fake_nvml.fail(
            index, "nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
        )
    gpus = open_collector(fake_nvml).read()
    assert gpus[3].throttle_reasons == ("hw_slowdown", "sw_thermal", "hw_thermal")


def test_init_failure_is_nvml_unavailable(fake_nvml: FakeNvml) -> None:
    fake_nvml.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        NvmlCollector(fake_nvml).open()


def test_real_pynvml_without_a_driver_says_so() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has a working NVIDIA driver")
    with pytest.raises(NvmlUnavailable, match="NVML"):
        NvmlCollector(pynvml).open()


def test_close_shuts_nvml_down(fake_nvml: FakeNvml) -> None:
    collector = open_collector(fake_nvml)
    collector.close()
    assert not fake_nvml.initialised
