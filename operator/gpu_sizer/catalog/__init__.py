"""GPU classes and the choice of a class with headroom. Pure.

The built-in classes are data, ``gpus.yaml`` in this package (the catalog file format below, with
``replaceDefaults: true``), read by :mod:`.loader` at import; the types are in :mod:`.classes`,
the choice in :mod:`.choice`.

A *GPU class* is what a user names in ``spec.placement.gpuClasses`` and what the operator
recommends: one GPU model (or a family of products with the same usable memory), the memory a
process can really use on it, and the node labels that identify it.

Two memory figures per class, neither the marketing one:

- ``memory_bytes``: NVML's ``nvmlDeviceGetMemoryInfo().total`` — what ``nvidia-smi`` prints as the
  ``Memory-Usage`` total and GPU Feature Discovery as ``nvidia.com/gpu.memory``, in MiB rounded
  down. An "80 GB" H100 has 81559 MiB (79.65 GiB): ECC and the driver's region are already gone.
- ``usable_bytes``: what a CUDA process can allocate, ``cudaMemGetInfo`` total once its context
  exists (``torch.cuda.mem_get_info()[1]``, the "total capacity" of PyTorch's out-of-memory message
  and vLLM's ``total_gpu_memory``): a few hundred MiB less again (H100: 79.22 GiB). Every fit,
  headroom and engine pool is computed against this figure; vLLM's ``--gpu-memory-utilization``
  multiplies it.

Each default class says where both figures come from (``GPUClass.source``); where no public
``cudaMemGetInfo`` figure was found, ``usable_bytes`` is NVML's total less
:data:`DERIVED_RESERVE_BYTES`, and the source says so. ``compute_capability`` (NVIDIA SM version,
or the AMD GFX target) decides which kernels an engine can use: FP8 tensor cores need 8.9 (Ada)
or newer, so FP8 checkpoints on Ampere run through a weight-only path (see
``gpu_sizer.budget.engines``).

Nodes are matched by the GPU Feature Discovery label ``nvidia.com/gpu.product`` (the NVML device
name with spaces turned into dashes, e.g. ``NVIDIA-H100-80GB-HBM3``); AMD GPUs by the AMD GPU
node labeller's ``amd.com/gpu.product-name`` (e.g. ``AMD_Instinct_MI300X_OAM``).

The catalog can be overridden by a YAML file (the Helm chart mounts one at
``/etc/gpu-sizer/catalog.yaml``)::

    replaceDefaults: false        # true: only the classes below exist
    classes:
      - name: nvidia-l4           # override fields of a default class by name
        rank: 3
      - name: my-h100-nvl-mig-3g  # or add a class: memoryBytes and products are required
        displayName: H100 NVL MIG 3g.47gb
        memoryBytes: 48318382080    # NVML total
        usableBytes: 47781511168    # cudaMemGetInfo total (default: see below)
        computeCapability: "9.0"
        products: [NVIDIA-H100-NVL-MIG-3g.47gb]
        interconnect: none
        vendor: nvidia
        migProfile: 3g.47gb       # a MIG slice: its profile and whole-GPU class
        parent: nvidia-h100-nvl

A class without ``usableBytes`` derives it as a built-in class does: ``memoryBytes`` less the gap
the built-in class of one of its product labels measures, else less :data:`DERIVED_RESERVE_BYTES`
(its ``source`` says which); a ``memoryBytes`` override moves the usable figure by the class's own
gap; ``usableBytes`` above ``memoryBytes`` is refused.

MIG: every profile of the A100 40/80 GB, H100 80 GB and H200 is a class of its own
(:data:`MIG_CLASSES`, e.g. ``nvidia-a100-80gb-mig-1g.10gb``), ranked after every whole GPU, so a
slice is recommended when the cluster has it and no whole GPU present fits (re-rank them in
catalog.yaml to prefer slices). A slice serves one GPU per process: a spec that shards over
several GPUs is never placed on MIG classes.
"""

from gpu_sizer.catalog.choice import (
    Choice,
    allowed_classes,
    choose_class,
    choose_fitting,
    class_for_product,
    fits,
    headroom_fraction,
    mig_class,
)
from gpu_sizer.catalog.classes import (
    AMD_PRODUCT_LABEL,
    DERIVED_RESERVE_BYTES,
    GFD_PRODUCT_LABEL,
    GIB,
    MIB,
    GPUClass,
)
from gpu_sizer.catalog.loader import (
    DEFAULT_CATALOG,
    MIG_CLASSES,
    WHOLE_GPU_CLASSES,
    InvalidCatalog,
    catalog_to_data,
    load_catalog,
    load_catalog_file,
    to_snake,
)

__all__ = [
    "AMD_PRODUCT_LABEL",
    "DEFAULT_CATALOG",
    "DERIVED_RESERVE_BYTES",
    "GFD_PRODUCT_LABEL",
    "GIB",
    "MIB",
    "MIG_CLASSES",
    "WHOLE_GPU_CLASSES",
    "Choice",
    "GPUClass",
    "InvalidCatalog",
    "allowed_classes",
    "catalog_to_data",
    "choose_class",
    "choose_fitting",
    "class_for_product",
    "fits",
    "headroom_fraction",
    "load_catalog",
    "load_catalog_file",
    "mig_class",
    "to_snake",
]
