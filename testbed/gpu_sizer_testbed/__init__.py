"""Kubernetes APIs on loopback for gpu-sizer's demo and tests, kept out of the operator's wheel.

- :mod:`gpu_sizer_testbed.controlplane`: a real control plane (etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler) from the binaries in ``KUBEBUILDER_ASSETS``, as
  controller-runtime's envtest runs them. Everything that can run against real API semantics
  (schemas, RBAC, admission, the Job controller, the scheduler) is judged there;
  :mod:`gpu_sizer_testbed.controlplane_api` is an asyncio client for a started one.
- kmock's emulator (:mod:`gpu_sizer_testbed.emulator`, with what real ``kubectl`` needs in
  :mod:`~gpu_sizer_testbed.kubectl` and its helpers: ``openapi``, ``protobuf``, ``selector``,
  ``tables``, ``validation``), for what a real server cannot be told to do: injected
  500/409/410/429, delayed or dropped watches, slow clients; and the demo's no-binaries default.
- :mod:`gpu_sizer_testbed.demo`: ``gpu-sizer demo`` (the ``demo`` extra of gpu-sizer).
"""
