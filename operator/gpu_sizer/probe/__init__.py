"""The measurement probe: what the measurement Job runs.

- :mod:`gpu_sizer.probe.run`: reads the spec, measures, writes the result (stdout and the
  termination message);
- :mod:`gpu_sizer.probe.nvml`: the NVML device-memory sampler;
- :mod:`gpu_sizer.probe.model`, :mod:`~gpu_sizer.probe.inference`,
  :mod:`~gpu_sizer.probe.training`: the synthetic workloads (torch);
- :mod:`gpu_sizer.probe.command_mode`, :mod:`~gpu_sizer.probe.vllm_log`: Command mode;
- :mod:`gpu_sizer.probe.support`: what synthetic mode cannot reproduce, and why.

Importing this package imports neither torch nor pynvml.
"""
