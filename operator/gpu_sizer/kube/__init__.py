"""The official kubernetes client, for the parts of gpu-sizer that do not run inside kopf.

:mod:`.client` is the one place that loads its configuration (in-cluster service account,
kubeconfig, an explicit file and context): the admission webhook's reads and patches and the
``gpu-sizer accuracy --from-cluster`` listing both use it. The operator's own writes go through
kopf's session instead (:mod:`gpu_sizer.controller.kube`).
"""
