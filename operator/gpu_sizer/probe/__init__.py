"""The measurement probe: what the measurement Job runs.

- :mod:`gpu_sizer.probe.run`: reads the spec, measures, writes the result (stdout and the
  termination message);
- :mod:`gpu_sizer.probe.nvml`: the NVML device-memory sampler;
- :mod:`gpu_sizer.probe.model`, :mod:`~gpu_sizer.probe.inference`,
  :mod:`~gpu_sizer.probe.training`: the synthetic workloads (torch);
- :mod:`gpu_sizer.probe.command_mode`, :mod:`~gpu_sizer.probe.vllm_log`: Command mode;
- :mod:`gpu_sizer.probe.support`: what synthetic mode cannot reproduce, and why;
- :mod:`gpu_sizer.probe.memory`: per-phase peaks, out-of-memory recognition;
  :mod:`gpu_sizer.probe.errors`: the deadline / SIGTERM signal.

Exit status: 0 whenever a result was produced in Synthetic mode (Succeeded, OutOfMemory,
Unsupported, Timeout); Command mode passes the command's own status through (``128 + N`` for
signal N, 124 when the deadline stopped it); 1 when the probe itself failed and 2 for an invalid
spec, both still with a ``Failed`` result on stdout and in the termination log.

Importing this package imports neither torch nor pynvml.
"""
