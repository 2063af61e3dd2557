"""The measurement probe: what the measurement Job runs.

- :mod:`gpu_sizer.probe.run`: reads the spec, measures, writes the result (stdout and the
  termination message);
- :mod:`gpu_sizer.probe.nvml`: the NVML device-memory sampler;
- :mod:`gpu_sizer.probe.model`, :mod:`~gpu_sizer.probe.inference`,
  :mod:`~gpu_sizer.probe.training`: the synthetic workloads (torch); the model's parts are
  :mod:`~gpu_sizer.probe.attention`, :mod:`~gpu_sizer.probe.mamba`,
  :mod:`~gpu_sizer.probe.feed_forward`, :mod:`~gpu_sizer.probe.decoder_layer`,
  :mod:`~gpu_sizer.probe.vision_tower` and :mod:`~gpu_sizer.probe.loss`;
- :mod:`gpu_sizer.probe.command_mode`, :mod:`~gpu_sizer.probe.vllm_log`: Command mode;
- :mod:`gpu_sizer.probe.support`: what synthetic mode cannot reproduce, and why;
- :mod:`gpu_sizer.probe.memory`: per-phase peaks, out-of-memory recognition;
  :mod:`gpu_sizer.probe.errors`: the deadline / SIGTERM signal.

Every run that gets past argument parsing writes exactly one result document, to stdout and
(compact) to the termination log; the operator reads that document whatever the exit status.

Exit status:

- 0: a measurement outcome in Synthetic mode (Succeeded, OutOfMemory, Unsupported, Timeout,
  including a SIGTERM from the Job's ``activeDeadlineSeconds`` or a pod deletion);
- Command mode: the command's own status (``128 + N`` for signal N, 124 when the deadline or a
  SIGTERM stopped it);
- 1: the probe itself failed (torch cannot be imported, a bug): ``Failed`` result;
- 2: the input was wrong. An unreadable or invalid spec (not UTF-8, neither JSON nor YAML,
  field errors as :func:`gpu_sizer.api.parse_spec` names them) is a ``Failed`` result, and
  non-zero because nothing was measured: scripts see the failure, the operator reads the
  message. An out-of-range option (``--deadline-seconds -5``) is an argparse usage error with
  no result document; in a Job, ``terminationMessagePolicy: FallbackToLogsOnError`` carries
  the usage message to the operator instead;
- 130: interrupted with Ctrl-C (SIGINT): ``Failed`` result.

Importing this package imports neither torch nor pynvml.
"""
