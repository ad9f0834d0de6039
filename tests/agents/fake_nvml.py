"""A stand-in for pynvml that answers from recorded NVML-shaped data (fixtures/nvml_8xh100.json).

It raises the real ``pynvml.NVMLError`` subclasses and returns the real ctypes structs, so the
collector meets the same objects it gets on a GPU node.

GPM (a device's ``gpm``): ``nvmlGpmQueryDeviceSupport`` answers ``supported`` (a device without
``gpm`` has none); a sample records the device's ``sm_util``/``sm_occupancy`` when taken, and
``nvmlGpmMetricsGet`` answers the second sample's figures, as NVML answers the activity between
the two. Samples are real ``c_nvmlGpmSample_t`` pointers; ``gpm_live`` holds the ones not yet
freed, so a test can see a leak, and a freed or foreign sample is an INVALID_ARGUMENT.
``metric_errors`` (metric id -> NVML return code) fails single metrics inside a good call.
"""

from __future__ import annotations

import copy
import ctypes
import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

FIXTURE = Path(__file__).parent / "fixtures" / "nvml_8xh100.json"
# queries a lost GPU still answers: NVML keeps the identity it read at init
IDENTITY_CALLS = {"nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetHandleByIndex"}


@dataclass(frozen=True)
class FakeHandle:
    index: int


@dataclass
class GpmSampleRecord:
    buffer: Any  # keeps the memory the sample pointer points at alive
    index: int | None = None  # the device it was taken on; None until nvmlGpmSampleGet
    taken: int = 0  # order of taking
    figures: dict[int, float] | None = None  # metric id -> value


def _address(sample: Any) -> int:
    return ctypes.cast(sample, ctypes.c_void_p).value or 0


class FakeNvml:
    NVMLError = pynvml.NVMLError
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = copy.deepcopy(doc)
        self.devices: list[dict[str, Any]] = self.doc["devices"]
        self.events: deque[dict[str, Any]] = deque(self.doc.get("pending_events", []))
        self.init_error: int | None = None
        self.initialised = False
        self.registered: dict[int, int] = {}
        self.wait_timeouts: list[int] = []
        self.gpm_live: dict[int, GpmSampleRecord] = {}  # address -> sample not yet freed
        self.gpm_taken = 0
        self.gpm_metric_calls = 0

    @classmethod
    def from_fixture(cls, path: Path = FIXTURE) -> FakeNvml:
        return cls(json.loads(path.read_text()))

    # --- test controls -------------------------------------------------------------
    def lose(self, index: int) -> None:
        self.devices[index]["lost"] = True

    def fail(self, index: int, call: str, code: int) -> None:
        self.devices[index].setdefault("errors", {})[call] = code

    def push_xid(self, index: int, xid: int) -> None:
        self.events.append({"index": index, "event_type": 8, "event_data": xid})

    def no_gpm(self, index: int | None = None) -> None:
        """Make one GPU (or all) a GPU without GPM, like an A100 or an L4."""
        for dev in self.devices if index is None else [self.devices[index]]:
            dev.pop("gpm", None)

    def set_sm(self, index: int, sm_util: float, sm_occupancy: float | None = None) -> None:
        gpm = self.devices[index].setdefault("gpm", {"supported": True})
        gpm["sm_util"] = sm_util
        if sm_occupancy is not None:
            gpm["sm_occupancy"] = sm_occupancy

    def fail_metric(self, index: int, metric: int, code: int) -> None:
        self.devices[index]["gpm"].setdefault("metric_errors", {})[metric] = code

    # --- pynvml surface ------------------------------------------------------------
    def _device(self, handle: FakeHandle, call: str) -> dict[str, Any]:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        dev = self.devices[handle.index]
        code = dev.get("errors", {}).get(call)
        if code is not None:
            raise pynvml.NVMLError(code)
        if dev.get("lost") and call not in IDENTITY_CALLS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return dev

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.doc["driver_version"])

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if index >= len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._device(FakeHandle(index), "nvmlDeviceGetHandleByIndex")
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return str(self._device(handle, "nvmlDeviceGetUUID")["uuid"])

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return str(self._device(handle, "nvmlDeviceGetName")["name"])

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        util = self._device(handle, "nvmlDeviceGetUtilizationRates")["utilization"]
        return pynvml.c_nvmlUtilization_t(gpu=util["gpu"], memory=util["memory"])

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> Any:
        mem = self._device(handle, "nvmlDeviceGetMemoryInfo")["memory"]
        return pynvml.c_nvmlMemory_t(total=mem["total"], free=mem["free"], used=mem["used"])

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return int(self._device(handle, "nvmlDeviceGetTemperature")["temperature_c"])

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return int(self._device(handle, "nvmlDeviceGetPowerUsage")["power_usage_mw"])

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return int(
            self._device(handle, "nvmlDeviceGetEnforcedPowerLimit")["enforced_power_limit_mw"]
        )

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        dev = self._device(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return int(dev["clocks_event_reasons"])

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        dev = self._device(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return int(dev["clocks_event_reasons"])

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:
        assert counter == pynvml.NVML_VOLATILE_ECC
        ecc = self._device(handle, "nvmlDeviceGetTotalEccErrors")["ecc_volatile"]
        kind = (
            "uncorrected"
            if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
            else "corrected"
        )
        return int(ecc[kind])

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types: int, event_set: object) -> None:
        self.registered[handle.index] = types

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> Any:
        self.wait_timeouts.append(timeout_ms)
        if not self.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        event = self.events.popleft()
        return SimpleNamespace(
            device=FakeHandle(event["index"]),
            eventType=event["event_type"],
            eventData=event["event_data"],
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None

    # --- GPM -----------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle) -> Any:
        dev = self._device(handle, "nvmlGpmQueryDeviceSupport")
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if dev.get("gpm", {}).get("supported") else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        buffer = ctypes.create_string_buffer(16)
        sample = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)
        self.gpm_live[_address(sample)] = GpmSampleRecord(buffer)
        return sample

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        if self.gpm_live.pop(_address(sample), None) is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample: Any) -> Any:
        dev = self._device(handle, "nvmlGpmSampleGet")
        record = self.gpm_live.get(_address(sample))
        gpm = dev.get("gpm")
        if record is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not gpm or not gpm.get("supported"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.gpm_taken += 1
        record.index, record.taken = handle.index, self.gpm_taken
        record.figures = {
            pynvml.NVML_GPM_METRIC_SM_UTIL: float(gpm.get("sm_util", 0.0)),
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: float(gpm.get("sm_occupancy", 0.0)),
        }
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self.gpm_live.get(_address(request.sample1))
        second = self.gpm_live.get(_address(request.sample2))
        if first is None or second is None or second.figures is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if first.index != second.index or first.taken >= second.taken:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        assert second.index is not None
        dev = self._device(FakeHandle(second.index), "nvmlGpmMetricsGet")
        failing = dev.get("gpm", {}).get("metric_errors", {})
        self.gpm_metric_calls += 1
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            code = failing.get(metric.metricId)
            value = second.figures.get(metric.metricId)
            if code is None and value is None:
                code = pynvml.NVML_ERROR_NOT_SUPPORTED
            metric.nvmlReturn = code if code is not None else pynvml.NVML_SUCCESS
            metric.value = value if code is None and value is not None else 0.0
        return request
