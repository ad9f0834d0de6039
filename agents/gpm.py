"""SM activity from NVML's GPU Performance Monitoring (GPM: Hopper and newer GPUs).

``utilization.gpu`` only says that some kernel ran during the sample period: a GPU running
one small kernel all the time reads 100 % while most of its SMs idle. GPM reports the share of
SMs that were busy (``NVML_GPM_METRIC_SM_UTIL``), computed from two samples. One sample is taken
per GPU each reading and compared with the previous reading's, so the figure covers exactly one
collection interval; the older sample is then freed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable
from typing import Any

log = logging.getLogger(__name__)

# nvml.h values, repeated so a fake or simulated module need not define them.
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRICS_GET_VERSION = 1
# GPM is absent on this GPU or driver: fall back quietly, and do not ask again.
_ABSENT = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND)


class GpmSampler:
    """Per-GPU GPM samples kept between readings; every sample is freed when done with."""

    def __init__(self, nvml: Any, fatal: Collection[int]) -> None:
        self._nvml = nvml
        self._error_type: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._fatal = frozenset(fatal)  # codes meaning the GPU is gone: raised to the caller
        self._supported: dict[int, bool] = {}
        self._previous: dict[int, Any] = {}  # index -> the previous reading's sample

    def available(self) -> bool:
        """Tell whether the NVML module offers GPM at all (a driver may still lack it)."""
        return all(
            hasattr(self._nvml, name)
            for name in (
                "nvmlGpmQueryDeviceSupport",
                "nvmlGpmSampleAlloc",
                "nvmlGpmSampleGet",
                "nvmlGpmSampleFree",
                "nvmlGpmMetricsGet",
                "c_nvmlGpmMetricsGet_t",
            )
        )

    def sm_util(self, index: int, handle: Any, errors: list[str]) -> float | None:
        """Return the GPU's SM activity (0..100) since the previous reading.

        None when GPM is unsupported, on the first reading and after a failed call (the reason
        in ``errors``; the next reading starts afresh). An error saying the GPU is gone is
        raised, after the GPU's samples are freed.
        """
        try:
            if not self._is_supported(index, handle):
                return None
            sample = self._take(handle)
        except self._error_type as exc:
            self._failed(index, "gpm sample", exc, errors)
            return None
        previous = self._previous.pop(index, None)
        self._previous[index] = sample
        if previous is None:
            return None
        try:
            return self._metric(index, previous, sample, errors)
        except self._error_type as exc:
            self._failed(index, "gpm metrics", exc, errors)
            return None
        finally:
            self._free(previous)

    def _is_supported(self, index: int, handle: Any) -> bool:
        known = self._supported.get(index)
        if known is None:
            if not self.available():
                known = False
            else:
                known = bool(self._nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            self._supported[index] = known
            log.log(
                logging.INFO if self.available() else logging.DEBUG,
                "GPU %d: %s",
                index,
                "SM activity from GPM" if known else "no GPM: utilization.gpu",
            )
        return known

    def _take(self, handle: Any) -> Any:
        sample = self._nvml.nvmlGpmSampleAlloc()
        try:
            self._nvml.nvmlGpmSampleGet(handle, sample)
        except BaseException:
            self._free(sample)
            raise
        return sample

    def _metric(self, index: int, first: Any, second: Any, errors: list[str]) -> float | None:
        request = self._nvml.c_nvmlGpmMetricsGet_t()
        request.version = getattr(
            self._nvml, "NVML_GPM_METRICS_GET_VERSION", NVML_GPM_METRICS_GET_VERSION
        )
        request.numMetrics = 1
        request.sample1 = first
        request.sample2 = second
        request.metrics[0].metricId = NVML_GPM_METRIC_SM_UTIL
        self._nvml.nvmlGpmMetricsGet(request)
        metric = request.metrics[0]
        code = int(metric.nvmlReturn)
        if code in _ABSENT:
            self._unsupported(index)
            return None
        if code != NVML_SUCCESS:
            errors.append(f"gpm sm_util: NVML return code {code}")
            return None
        value = float(metric.value)
        if not math.isfinite(value):
            errors.append(f"gpm sm_util: not a number ({value})")
            return None
        return min(100.0, max(0.0, value))

    def _failed(self, index: int, what: str, exc: BaseException, errors: list[str]) -> None:
        code = getattr(exc, "value", None)
        if code in self._fatal:
            self.forget(index)
            raise exc
        if code in _ABSENT:
            self._unsupported(index)
            return
        self._drop(index)
        errors.append(f"{what}: {exc}")

    def _unsupported(self, index: int) -> None:
        if self._supported.get(index) is not False:
            log.info("GPU %d: GPM not supported, reporting utilization.gpu", index)
        self._supported[index] = False
        self._drop(index)

    def _drop(self, index: int) -> None:
        self._free(self._previous.pop(index, None))

    def _free(self, sample: Any) -> None:
        if sample is None:
            return
        try:
            self._nvml.nvmlGpmSampleFree(sample)
        except self._error_type as exc:
            log.debug("freeing a GPM sample: %s", exc)

    def forget(self, index: int) -> None:
        """Free a GPU's sample and ask about its GPM support again when it is back."""
        self._drop(index)
        self._supported.pop(index, None)

    def keep(self, indices: Iterable[int]) -> None:
        """Free the samples of GPUs no longer present."""
        wanted = set(indices)
        for index in [i for i in self._previous if i not in wanted]:
            self.forget(index)

    def close(self) -> None:
        """Free every sample still held (before NVML shuts down)."""
        for index in list(self._previous):
            self._drop(index)
