"""A stand-in for pynvml that answers from recorded NVML-shaped data (fixtures/nvml_8xh100.json).

It raises the real ``pynvml.NVMLError`` subclasses and returns the real ctypes structs, so the
collector meets the same objects it gets on a GPU node.
"""

from __future__ import annotations

import copy
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


class FakeNvml:
    NVMLError = pynvml.NVMLError

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = copy.deepcopy(doc)
        self.devices: list[dict[str, Any]] = self.doc["devices"]
        self.events: deque[dict[str, Any]] = deque(self.doc.get("pending_events", []))
        self.init_error: int | None = None
        self.initialised = False
        self.registered: dict[int, int] = {}
        self.wait_timeouts: list[int] = []

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
