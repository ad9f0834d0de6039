"""GPU readings from NVML (nvidia-ml-py's ``pynvml``), the module passed in so tests can fake it.

``util_pct`` is SM activity from GPM where the GPU has it (``util_source: "gpm_sm"``), else
``utilization.gpu``, the share of the sample period in which any kernel ran (``"nvml_util"``).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from agents.gpm import GpmSampler
from agents.heartbeat import UTIL_GPM_SM, UTIL_NVML, GpuReading

log = logging.getLogger(__name__)

# NVML return codes and flags (nvml.h); stable ABI values, repeated here so a fake module
# need not define them.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
MAX_EVENTS_PER_TICK = 64

# nvmlClocksEventReasons / nvmlClocksThrottleReasons bits, in nvml.h order.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x0001, "gpu_idle"),
    (0x0002, "applications_clocks_setting"),
    (0x0004, "sw_power_cap"),
    (0x0008, "hw_slowdown"),
    (0x0010, "sync_boost"),
    (0x0020, "sw_thermal"),
    (0x0040, "hw_thermal"),
    (0x0080, "hw_power_brake"),
    (0x0100, "display_clock_setting"),
    (0x0200, "board_limit"),
    (0x0400, "reliability"),
)
_KNOWN_BITS = sum(bit for bit, _ in THROTTLE_REASONS)
MIB = 1024 * 1024

# (heartbeat field, pynvml function, arguments after the handle)
_QUERIES: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("utilization", "nvmlDeviceGetUtilizationRates", ()),
    ("memory", "nvmlDeviceGetMemoryInfo", ()),
    ("temperature", "nvmlDeviceGetTemperature", (NVML_TEMPERATURE_GPU,)),
    ("power", "nvmlDeviceGetPowerUsage", ()),
    ("power_limit", "nvmlDeviceGetEnforcedPowerLimit", ()),
    ("throttle_reasons", "throttle_mask", ()),
    (
        "ecc_uncorrected",
        "nvmlDeviceGetTotalEccErrors",
        (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC),
    ),
    (
        "ecc_corrected",
        "nvmlDeviceGetTotalEccErrors",
        (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC),
    ),
)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this host (no driver, no library, no GPU)."""


class _GpuLost(Exception):
    def __init__(self, call: str, message: str) -> None:
        super().__init__(f"{call}: {message}")


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Name the bits of a clocks-event (throttle) reason mask; unknown bits as ``unknown_0x..``."""
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    rest = mask & ~_KNOWN_BITS
    if rest:
        names.append(f"unknown_{rest:#x}")
    return tuple(names)


def _scaled(value: Any, divisor: float) -> float | None:
    return float(value) / divisor if value is not None else None


def _count(value: Any) -> int | None:
    return int(value) if value is not None else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def load_pynvml() -> ModuleType:
    """Import nvidia-ml-py's ``pynvml``, or say clearly why it cannot be used."""
    try:
        import pynvml
    except ImportError as exc:  # the package is a declared dependency, but be clear anyway
        raise NvmlUnavailable(f"the nvidia-ml-py package is not installed ({exc})") from exc
    module: ModuleType = pynvml
    return module


class NvmlCollector:
    """Read every GPU each tick; one failing call or a lost GPU never fails the whole reading."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._error_type: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._count = 0
        self._identity: dict[int, tuple[str, str]] = {}  # index -> (uuid, name), kept when lost
        self._uuid_index: dict[str, int] = {}
        self._xid_count: dict[int, int] = {}
        self._xid_last: dict[int, int] = {}
        self._event_set: Any = None
        self._unsupported: set[tuple[int, str]] = set()
        self._gpm = GpmSampler(nvml, (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED))
        self.driver: str | None = None
        self.errors: list[str] = []  # node-level NVML problems of the last reading

    def open(self) -> None:
        """Initialise NVML and register for XID events; raise NvmlUnavailable when it cannot."""
        try:
            self._nvml.nvmlInit()
            self._count = int(self._nvml.nvmlDeviceGetCount())
        except self._error_type as exc:
            raise NvmlUnavailable(f"NVML failed to initialise: {exc}") from exc
        try:
            self.driver = _text(self._nvml.nvmlSystemGetDriverVersion())
        except self._error_type:
            self.driver = None
        self._register_events()

    def close(self) -> None:
        """Free the GPM samples and the event set and shut NVML down, ignoring NVML errors."""
        self._gpm.close()
        try:
            if self._event_set is not None:
                self._nvml.nvmlEventSetFree(self._event_set)
                self._event_set = None
            self._nvml.nvmlShutdown()
        except self._error_type as exc:
            log.debug("NVML shutdown: %s", exc)

    def _code(self, exc: BaseException) -> int | None:
        value = getattr(exc, "value", None)
        return value if isinstance(value, int) else None

    def _register_events(self) -> None:
        """Learn each GPU's identity (events name GPUs by handle) and watch for XID errors."""
        try:
            self._event_set = self._nvml.nvmlEventSetCreate()
        except self._error_type as exc:
            log.warning("NVML events unavailable, XID errors will not be seen: %s", exc)
        for index in range(self._count):
            try:
                handle = self._nvml.nvmlDeviceGetHandleByIndex(index)
                self._identify(index, [], handle)
                if self._event_set is not None:
                    self._nvml.nvmlDeviceRegisterEvents(
                        handle, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self._event_set
                    )
            except (self._error_type, _GpuLost) as exc:
                log.warning("GPU %d: cannot watch XID events: %s", index, exc)

    def _call(self, index: int, errors: list[str], what: str, fn: str, *args: Any) -> Any:
        """Run one NVML query; a lost GPU raises _GpuLost, other errors yield None."""
        try:
            if fn == "throttle_mask":
                return self._throttle_mask(*args)
            return getattr(self._nvml, fn)(*args)
        except self._error_type as exc:
            code = self._code(exc)
            if code in (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_RESET_REQUIRED):
                raise _GpuLost(what, str(exc)) from exc
            if code == NVML_ERROR_NOT_SUPPORTED:
                if (index, what) not in self._unsupported:
                    self._unsupported.add((index, what))
                    log.info("GPU %d: %s not supported", index, what)
            else:
                errors.append(f"{what}: {exc}")
            return None

    def _throttle_mask(self, handle: Any) -> int:
        nvml = self._nvml
        if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons"):
            try:
                return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
            except self._error_type as exc:
                if self._code(exc) != NVML_ERROR_FUNCTION_NOT_FOUND:
                    raise
        return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    def _identify(self, index: int, errors: list[str], handle: Any) -> None:
        if index in self._identity:
            return
        uuid = self._call(index, errors, "uuid", "nvmlDeviceGetUUID", handle)
        name = self._call(index, errors, "name", "nvmlDeviceGetName", handle)
        if uuid:
            self._identity[index] = (_text(uuid), _text(name or ""))
            self._uuid_index[_text(uuid)] = index

    def read_gpu(self, index: int) -> GpuReading:
        """Read one GPU; a GPU that fell off the bus comes back with ``lost=True``."""
        errors: list[str] = []
        got: dict[str, Any] = {}
        try:
            handle = self._call(index, errors, "handle", "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return self._reading(index, errors=tuple(errors))
            self._identify(index, errors, handle)
            for what, fn, args in _QUERIES:
                got[what] = self._call(index, errors, what, fn, handle, *args)
            sm_util = self._sm_util(index, handle, errors)
        except _GpuLost as lost:
            log.warning("GPU %d (%s) is lost: %s", index, self._uuid_of(index), lost)
            self._gpm.forget(index)
            return self._reading(index, lost=True, errors=(*errors, str(lost)))
        util, mem, mask = got["utilization"], got["memory"], got["throttle_reasons"]
        util_pct: float | None = sm_util
        util_source: str | None = UTIL_GPM_SM
        if sm_util is None:
            util_pct = float(util.gpu) if util is not None else None
            util_source = UTIL_NVML if util is not None else None
        return self._reading(
            index,
            util_pct=util_pct,
            util_source=util_source,
            mem_used_mb=mem.used / MIB if mem is not None else None,
            mem_total_mb=mem.total / MIB if mem is not None else None,
            temp_c=_scaled(got["temperature"], 1),
            power_w=_scaled(got["power"], 1000),
            power_limit_w=_scaled(got["power_limit"], 1000),
            throttle_reasons=decode_throttle_reasons(int(mask)) if mask is not None else (),
            ecc_errors=_count(got["ecc_uncorrected"]),
            ecc_corrected=_count(got["ecc_corrected"]),
            errors=tuple(errors),
        )

    def _sm_util(self, index: int, handle: Any, errors: list[str]) -> float | None:
        """Return SM activity over the last interval from GPM; None without it."""
        try:
            return self._gpm.sm_util(index, handle, errors)
        except self._error_type as exc:  # only errors saying the GPU is gone get here
            raise _GpuLost("gpm", str(exc)) from exc

    def _uuid_of(self, index: int) -> str:
        return self._identity.get(index, ("uuid unknown", ""))[0]

    def _reading(self, index: int, **fields: Any) -> GpuReading:
        uuid, name = self._identity.get(index, ("", ""))
        return GpuReading(
            index=index,
            uuid=uuid,
            name=name,
            xid_errors=self._xid_count.get(index, 0),
            xid_last=self._xid_last.get(index),
            **fields,
        )

    def poll_events(self) -> None:
        """Drain pending XID events without waiting (timeout 0)."""
        if self._event_set is None:
            return
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                data = self._nvml.nvmlEventSetWait(self._event_set, 0)
            except self._error_type as exc:
                if self._code(exc) != NVML_ERROR_TIMEOUT:
                    self.errors.append(f"events: {exc}")
                return
            if not int(data.eventType) & NVML_EVENT_TYPE_XID_CRITICAL_ERROR:
                continue
            index = self._event_index(data.device)
            xid = int(data.eventData)
            self._xid_count[index] = self._xid_count.get(index, 0) + 1
            self._xid_last[index] = xid
            log.warning("GPU %d: XID %d", index, xid)

    def _event_index(self, device: Any) -> int:
        try:
            uuid = _text(self._nvml.nvmlDeviceGetUUID(device))
        except self._error_type:
            return -1
        return self._uuid_index.get(uuid, -1)

    def read(self) -> tuple[GpuReading, ...]:
        """Read all GPUs, XID events first so a GPU's reading carries its newest XID."""
        self.errors = []
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
            self._count = count
        except self._error_type as exc:
            self.errors.append(f"device count: {exc}")
            count = self._count
        self.poll_events()
        self._gpm.keep(range(count))
        readings = [self.read_gpu(index) for index in range(count)]
        if self._xid_count.get(-1):
            self.errors.append(f"{self._xid_count[-1]} XID events from unidentified GPUs")
        return tuple(readings)
