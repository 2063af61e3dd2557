"""gpu-sizer: GPU memory sizing, measurement and admission for Kubernetes GPU workloads."""

__version__ = "0.1.0"
