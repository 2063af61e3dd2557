"""The one reader of GPU catalogs: the built-in ``gpus.yaml`` and a user's catalog file.

Both are the same format (camelCase keys, ``classes:`` list, ``replaceDefaults``) and go through
the same validation: the built-in file is merged over nothing (``replaceDefaults: true``), a
user's file over the built-in classes. A built-in file that does not validate is a packaging
defect: importing the package raises :class:`InvalidCatalog` naming the field, rather than
sizing against a partial catalog.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpu_sizer.api import Problem, problems_from
from gpu_sizer.catalog.classes import DERIVED_RESERVE_BYTES, GIB, MIB, GPUClass

__all__ = [
    "BUILTIN_CATALOG_FILE",
    "DEFAULT_CATALOG",
    "MIG_CLASSES",
    "WHOLE_GPU_CLASSES",
    "InvalidCatalog",
    "catalog_to_data",
    "load_catalog",
    "load_catalog_file",
    "to_snake",
]

#: The built-in catalog's file name in this package (package data: pyproject's
#: ``[tool.setuptools.package-data]``).
BUILTIN_CATALOG_FILE: Final = "gpus.yaml"


class InvalidCatalog(ValueError):
    """A catalog YAML failed validation; ``problems`` names each bad field (``classes[2].name``)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


class _ClassEntry(BaseModel):
    """One ``classes[]`` entry of catalog.yaml; unset fields keep the default class's value."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    display_name: str | None = None
    memory_bytes: int | None = Field(None, ge=1 << 30, le=1 << 42, strict=True)
    products: list[str] | None = None
    interconnect: str | None = None
    vendor: str | None = None
    rank: int | None = Field(None, strict=True)
    source: str | None = None
    mig_profile: str | None = Field(None, pattern=r"^[1-9]g\.[0-9]+gb$")
    parent: str | None = None
    usable_bytes: int | None = Field(None, ge=1 << 30, le=1 << 42, strict=True)
    gpus_per_node: int | None = Field(None, ge=1, le=64, strict=True)
    compute_capability: str | None = Field(
        None, max_length=16, pattern=r"^([0-9]{1,2}\.[0-9]|gfx[0-9a-f]{3,4})$"
    )


class _CatalogFile(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    replace_defaults: bool = Field(False, strict=True)
    classes: list[_ClassEntry] = Field(default_factory=list)


def load_catalog(data: Any, defaults: Sequence[GPUClass] | None = None) -> tuple[GPUClass, ...]:
    """Merge catalog.yaml content (already parsed) over ``defaults``.

    Entries override default classes by ``name`` field by field; new names add classes and need
    ``memoryBytes`` and ``products``. ``replaceDefaults: true`` drops every default first.
    ``defaults`` is the built-in catalog (:data:`DEFAULT_CATALOG`) unless given.

    :raises InvalidCatalog: one :class:`~gpu_sizer.api.Problem` per bad field.
    """
    if defaults is None:
        defaults = DEFAULT_CATALOG
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InvalidCatalog([Problem("(catalog)", "must be a mapping with a 'classes' list")])
    try:
        parsed = _CatalogFile.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidCatalog(problems_from(exc, model=_CatalogFile)) from None
    merged: dict[str, GPUClass] = {} if parsed.replace_defaults else {c.name: c for c in defaults}
    gaps = _measured_gaps(defaults)
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, entry in enumerate(parsed.classes):
        if entry.name in seen:
            problems.append(Problem(f"classes[{i}].name", f"duplicate class {entry.name!r}"))
            continue
        seen.add(entry.name)
        updates = entry.model_dump(exclude_unset=True, exclude={"name"})
        if "products" in updates:
            updates["products"] = tuple(updates["products"])
        base = merged.get(entry.name)
        if base is None:
            missing = [f for f in ("memoryBytes", "products") if to_snake(f) not in updates]
            if missing:
                problems.extend(
                    Problem(f"classes[{i}].{f}", f"required for the new class {entry.name!r}")
                    for f in missing
                )
                continue
            if "usable_bytes" not in updates:
                usable, why = _derived_usable(updates["memory_bytes"], updates["products"], gaps)
                updates["usable_bytes"] = usable
                said = "DERIVED_RESERVE_BYTES" if usable is None else why
                if said not in updates.get("source", ""):
                    updates["source"] = _with_reason(updates.get("source", ""), why)
            cls = GPUClass(
                name=entry.name,
                display_name=updates.pop("display_name", entry.name),
                memory_bytes=updates.pop("memory_bytes"),
                products=updates.pop("products"),
                interconnect=updates.pop("interconnect", "unknown"),
                **updates,
            )
        else:
            if "memory_bytes" in updates and "usable_bytes" not in updates:
                # the override moves the usable figure with it: the class's own gap between
                # NVML's total and cudaMemGetInfo's (an L4 set to 1 GiB is not 22 GiB usable)
                gap = base.memory_bytes - base.usable
                updates["usable_bytes"] = max(updates["memory_bytes"] - gap, 0)
                updates["source"] = _with_reason(
                    updates.get("source", base.source),
                    f"usable moved with the memoryBytes override: less the class's "
                    f"{gap // MIB} MiB between NVML's and cudaMemGetInfo's totals",
                )
            cls = replace(base, **updates)
        if cls.usable_bytes is not None and cls.usable_bytes > cls.memory_bytes:
            problems.append(
                Problem(
                    f"classes[{i}].usableBytes",
                    f"{cls.usable_bytes} bytes ({cls.usable_bytes / GIB:.2f} GiB) is above "
                    f"memoryBytes {cls.memory_bytes} ({cls.memory_bytes / GIB:.2f} GiB): a process "
                    "cannot allocate more than the device has; give cudaMemGetInfo's total "
                    "(torch.cuda.mem_get_info()[1]), at most NVML's",
                )
            )
            continue
        if cls.usable <= 0:
            problems.append(
                Problem(
                    f"classes[{i}].memoryBytes",
                    f"{cls.memory_bytes} bytes leave no usable memory once the class's driver "
                    "reserve is taken; give usableBytes",
                )
            )
            continue
        merged[entry.name] = cls
    owner: dict[str, str] = {}
    for cls in merged.values():
        for product in cls.products:
            other = owner.setdefault(product, cls.name)
            if other != cls.name:
                problems.append(
                    Problem(
                        "classes",
                        f"product label {product!r} is claimed by both {other!r} and "
                        f"{cls.name!r}; a node must map to one class (remove it from one)",
                    )
                )
    if problems:
        raise InvalidCatalog(problems)
    if not merged:
        raise InvalidCatalog([Problem("classes", "the catalog has no GPU classes")])
    return tuple(sorted(merged.values(), key=lambda c: (c.rank, c.memory_bytes, c.name)))


def _measured_gaps(classes: Sequence[GPUClass]) -> dict[str, int]:
    """NVML total less cudaMemGetInfo total (bytes) of each product label whose class has a
    published usable figure."""
    return {
        product: c.memory_bytes - c.usable_bytes
        for c in classes
        if c.usable_bytes is not None and not c.is_mig
        for product in c.products
    }


def _derived_usable(
    memory: int, products: Sequence[str], gaps: dict[str, int]
) -> tuple[int | None, str]:
    """Usable bytes of a catalog class that gives only ``memoryBytes``, and how they were derived:
    the gap the default class of one of its products measures (the same figures a built-in class
    uses), else ``None``: :data:`DERIVED_RESERVE_BYTES` less, as for a built-in class without a
    published figure (:attr:`GPUClass.usable`)."""
    known = [gaps[p] for p in products if p in gaps]
    if known:
        gap = max(known)
        return memory - gap, (
            f"usable derived from memoryBytes less {gap // MIB} MiB, the gap the built-in class "
            "of its product label measures (no usableBytes given)"
        )
    return None, _DERIVED_REASON


#: What a class without ``usableBytes`` and without a built-in class for its products says.
_DERIVED_REASON: Final = (
    f"usable: NVML total less DERIVED_RESERVE_BYTES ({DERIVED_RESERVE_BYTES // MIB} MiB; no "
    "usableBytes given and no built-in class measures its product labels): give usableBytes, "
    "torch.cuda.mem_get_info()[1] on the GPU, for the exact figure"
)


def _with_reason(source: str, reason: str) -> str:
    return f"{source}; {reason}" if source else reason


def to_snake(camel: str) -> str:
    """``memoryBytes`` -> ``memory_bytes``."""
    return "".join("_" + ch.lower() if ch.isupper() else ch for ch in camel)


def load_catalog_file(path: str | Path) -> tuple[GPUClass, ...]:
    """Read and merge a catalog YAML file over the defaults.

    :raises InvalidCatalog: unreadable file, bad YAML, or invalid content.
    """
    from gpu_sizer.yamlio import UnreadableFile, YamlError, load, read_text

    try:
        text = read_text(path)
    except UnreadableFile as exc:
        raise InvalidCatalog([Problem(str(path), f"cannot read: {exc}")]) from None
    try:
        data = load(text)
    except YamlError as exc:
        raise InvalidCatalog([Problem(str(path), f"invalid YAML: {exc}")]) from None
    if data is None:
        # A file with no document is a wrong path or an unrendered value far more often than a
        # wish for the defaults: say so, as empty workload input does, so that a gate fails.
        raise InvalidCatalog(
            [
                Problem(
                    str(path),
                    "empty catalog file: give a mapping with 'classes' (and 'replaceDefaults'), "
                    "or leave --catalog out to use the built-in classes",
                )
            ]
        )
    return load_catalog(data)


def catalog_to_data(catalog: Sequence[GPUClass]) -> dict[str, Any]:
    """The catalog in catalog.yaml form (``replaceDefaults: true``), camelCase keys."""
    return {
        "replaceDefaults": True,
        "classes": [
            {
                "name": c.name,
                "displayName": c.display_name,
                "memoryBytes": c.memory_bytes,
                "products": list(c.products),
                "interconnect": c.interconnect,
                "vendor": c.vendor,
                "rank": c.rank,
                "source": c.source,
                **({"migProfile": c.mig_profile, "parent": c.parent} if c.is_mig else {}),
                **({"usableBytes": c.usable_bytes} if c.usable_bytes is not None else {}),
                **({"computeCapability": c.compute_capability} if c.compute_capability else {}),
                **({"gpusPerNode": c.gpus_per_node} if c.gpus_per_node != 8 else {}),
            }
            for c in catalog
        ],
    }


def _builtin() -> tuple[GPUClass, ...]:
    """The classes of the package's ``gpus.yaml``, in rank order.

    :raises InvalidCatalog: the packaged file does not validate (a packaging defect).
    """
    from gpu_sizer.yamlio import load

    text = resources.files("gpu_sizer.catalog").joinpath(BUILTIN_CATALOG_FILE).read_text("utf-8")
    return load_catalog(load(text), defaults=())


#: The default catalog: whole GPUs (ranks from 1), then MIG slices (ranks from 101).
DEFAULT_CATALOG: Final[tuple[GPUClass, ...]] = _builtin()
#: Whole GPUs, 24 GB to 192 GB.
WHOLE_GPU_CLASSES: Final[tuple[GPUClass, ...]] = tuple(c for c in DEFAULT_CATALOG if not c.is_mig)
#: One class per MIG profile of the A100 40/80 GB, H100 80 GB and H200 (NVIDIA MIG User Guide).
MIG_CLASSES: Final[tuple[GPUClass, ...]] = tuple(c for c in DEFAULT_CATALOG if c.is_mig)
