"""An NVML-shaped facade (the subset of pynvml the collector calls) over a NodeSimulation."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from agents.nvml import NVML_ERROR_TIMEOUT
from agents.simulate import NodeSimulation

MIB = 1024 * 1024
CLOCKS_EVENT_GPU_IDLE = 0x1
CLOCKS_EVENT_SW_POWER_CAP = 0x4


class SimNvmlError(Exception):
    """Carries an NVML return code in ``value``, like pynvml.NVMLError."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass(frozen=True, slots=True)
class _Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class _Memory:
    total: int
    used: int
    free: int


class SimulatedNvml:
    """Answers like pynvml for the simulated GPUs; handles are GPU indices."""

    NVMLError = SimNvmlError

    def __init__(self, sim: NodeSimulation) -> None:
        self._sim = sim
        self._uuids = [
            "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{sim.endpoint}.gpu{i}.trafficmgr.sim"))
            for i in range(sim.gpus)
        ]

    def nvmlInit(self) -> None:
        self._sim.sync()

    def nvmlShutdown(self) -> None:
        return None

    def nvmlSystemGetDriverVersion(self) -> str:
        return "simulated"

    def nvmlDeviceGetCount(self) -> int:
        self._sim.sync()
        return self._sim.gpus

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._uuids[handle]

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._sim.gpu.nvml_name

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Utilization:
        util = self._sim.gpu_state(handle).util_pct
        return _Utilization(round(util), round(util * 0.6))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> _Memory:
        total = int(self._sim.gpu.mem_total_mb * MIB)
        used = int(self._sim.gpu_state(handle).mem_used_mb * MIB)
        return _Memory(total, used, total - used)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return round(self._sim.gpu_state(handle).temp_c)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return round(self._sim.gpu_state(handle).power_w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return round(self._sim.gpu.power_limit_w * 1000)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        state = self._sim.gpu_state(handle)
        mask = CLOCKS_EVENT_GPU_IDLE if state.util_pct < 1 else 0
        if state.power_w >= 0.98 * self._sim.gpu.power_limit_w:
            mask |= CLOCKS_EVENT_SW_POWER_CAP
        return mask

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        return 0

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: int, types: int, event_set: object) -> None:
        return None

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> object:
        raise SimNvmlError(NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None
