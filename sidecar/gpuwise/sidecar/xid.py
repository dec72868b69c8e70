"""XID errors: NVML reports them as events, so a thread waits for them.

An XID is the driver's code for a GPU fault (79: fallen off the bus, 48: double-bit ECC, 13/31/43:
the application's fault...). dcgm-exporter shows the last one per GPU; gpuwise also counts them by
code, since two different faults between scrapes would otherwise hide one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gpuwise.metrics import catalog
from gpuwise.sidecar import backend, nvml_errors
from gpuwise.sidecar.backend import Device, SampleBuilder

log = logging.getLogger(__name__)

WAIT_MS = 500  # how long one wait blocks; also how soon close() is noticed


class XidWatcher:
    def __init__(self, nvml: Any, gpus: Sequence[tuple[Device, Any]]) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._last: dict[int, int] = {}
        self._counts: Counter[tuple[int, int]] = Counter()
        # Why a GPU has no XID series: its registration failed for this reason.
        self._unwatched: dict[int, str] = {}
        self._by_uuid = {device.uuid: device.index for device, _ in gpus}
        self._set: Any = None
        self._thread: threading.Thread | None = None
        try:
            self._set = nvml.nvmlEventSetCreate()
        except Exception as exc:
            self._unwatched = {device.index: nvml_errors.reason(nvml, exc) for device, _ in gpus}
            return
        for device, handle in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set)
            except Exception as exc:
                self._unwatched[device.index] = nvml_errors.reason(nvml, exc)
        if len(self._unwatched) < len(gpus):
            self._thread = threading.Thread(target=self._run, name="gpuwise-xid", daemon=True)
            self._thread.start()

    def report(self, builder: SampleBuilder, device: Device) -> None:
        """Add this GPU's XID series to a sample, or the reason it has none."""
        reason = self._unwatched.get(device.index)
        if reason is not None:
            builder.fail(catalog.XID_LAST, device, reason)
            return
        with self._lock:
            last = self._last.get(device.index, 0)
            counts = [(xid, n) for (index, xid), n in self._counts.items() if index == device.index]
        builder.add(catalog.XID_LAST, device, last)
        for xid, n in counts:
            builder.add(catalog.XID_EVENTS, device, n, xid=str(xid))

    def _run(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, WAIT_MS)
            except Exception as exc:
                if nvml_errors.reason(nvml, exc) != backend.TIMEOUT:
                    log.warning("waiting for XID events failed: %s; retrying", exc)
                    self._stop.wait(1.0)
                continue
            if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
                continue
            try:
                index = self._by_uuid.get(nvml_errors.text(nvml.nvmlDeviceGetUUID(data.device)))
            except Exception:
                index = None
            if index is None:
                continue
            with self._lock:
                self._last[index] = int(data.eventData)
                self._counts[index, int(data.eventData)] += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * WAIT_MS / 1000)
        if self._set is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlEventSetFree(self._set)
            self._set = None
