"""The calibration factors the operator judges workloads with, learned from shared records.

Only GPUMeasurement records are evidence (:mod:`gpu_sizer.records.calibration`): a tenant who may
write its workload's status could forge one, while every measurement the operator trusts is a
record. Learning walks every record, so the factors are learned again at most every
:data:`CALIBRATION_REFRESH_SECONDS` and after a record comes or goes; in between the samples
follow the record watch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_sizer.api import CalibrationMode, GPUWorkloadStatus
from gpu_sizer.controller.events import Said
from gpu_sizer.records.calibration import Calibration, Sample, learn_calibration, sample_from_record

__all__ = ["CALIBRATION_REFRESH_SECONDS", "CalibrationCache"]

log = logging.getLogger("gpu_sizer.controller")

#: Seconds between two full rebuilds of the calibration samples from the indexes (between them
#: the samples follow this process's own writes and the record watch).
CALIBRATION_REFRESH_SECONDS = 600.0


class CalibrationCache:
    """The samples of the shared records and the factors learned from them.

    :param mode: the ``--calibration`` mode.
    :param records: the record watch's index (by name), read when the samples are rebuilt.
    :param said: where each change of a usable factor is said once.
    """

    def __init__(
        self,
        mode: CalibrationMode,
        records: Callable[[], Mapping[Any, Iterable[Mapping[str, Any]]]],
        said: Said,
    ) -> None:
        self._mode = mode
        self._records = records
        self._said = said
        #: Calibration factors and the monotonic time they were learned.
        self._calibration: tuple[Calibration, float] | None = None
        #: The calibration sample of each shared measurement record (by name), with its key;
        #: built from the index on first use, then kept up to date from the record watch.
        self._samples: dict[str, tuple[Sample, str]] = {}
        self._built = False

    def calibration(self) -> Calibration | None:
        """The ``--calibration`` mode with the factors learned from the shared measurement
        records (cluster-wide from the records no tenant could have written, from several
        namespaces; each namespace's own from its own records), learned again at most every
        :data:`CALIBRATION_REFRESH_SECONDS` and after each record that came or went; None when
        off. The same records give the same factors, so a restart writes nothing new over
        settled workloads. New factors reach a workload when its spec is next estimated."""
        mode = self._mode
        if mode is CalibrationMode.Off:
            return None
        now = time.monotonic()
        if not self._built or (
            self._calibration is not None
            and now - self._calibration[1] >= CALIBRATION_REFRESH_SECONDS
        ):
            self._samples = {}
            for name, store in list(self._records().items()):
                for body in store:
                    self._sample(str(name), body)
            self._built = True
            self._calibration = None
        if self._calibration is None:
            samples = [s for s, _ in self._samples.values()]
            learned = learn_calibration(mode, samples)
            self._calibration = (learned, now)
            self._log_factors(learned)
        return self._calibration[0]

    def record_seen(self, name: str, body: Mapping[str, Any] | None) -> None:
        """The record ``name`` is now ``body`` (None: deleted): its sample follows, and the
        factors are learned again when next asked."""
        if self._built:
            self._sample(name, body)
            self._calibration = None

    def for_workload(
        self, prev: GPUWorkloadStatus | None, hash_: str, namespace: str
    ) -> Calibration | None:
        """The factors a workload is judged with: those learned now (the cluster's, and its
        namespace's own where they are larger) when its spec is new or changed; for the same
        spec, the ones its status was judged with (they are in it). A settled workload keeps its
        figures and recommendation while the fleet's records grow (a GitOps gate does not flip
        because other teams measured), and a restart writes nothing new over it; the live
        factors reach it with its next spec change."""
        live = self.calibration()
        if live is None:
            return None
        if prev is not None and prev.spec_hash == hash_ and prev.estimate is not None:
            return Calibration.frozen(live.mode, prev.estimate.calibration)
        return live.for_namespace(namespace)

    def _log_factors(self, learned: Calibration) -> None:
        """Say which cluster-wide factors are usable and which workloads moved them, once per
        change (the record of who moved calibration)."""
        for (engine, gpu_class, comp), f in (learned.factors or {}).items():
            if not f.usable:
                continue
            text = (
                f"x{f.factor:g} (observed {f.observed_ratio:g}) from {f.records} records in "
                f"{f.namespaces} namespaces: {', '.join(f.sources)}"
            )
            if self._said.say(("", f"calibration {engine} {gpu_class} {comp}"), "factor", text):
                log.info("calibration: %s on %s, %s %s", engine, gpu_class, comp, text)

    def _sample(self, name: str, body: Mapping[str, Any] | None) -> None:
        """Take a record's calibration sample (or drop it: gone, or not a usable one)."""
        spec = body.get("spec") if body is not None else None
        sample = sample_from_record(body)[0] if body is not None else None
        key = spec.get("key") if isinstance(spec, Mapping) else None
        if sample is None or not key:
            self._samples.pop(name, None)
        else:
            self._samples[name] = (sample, str(key))
