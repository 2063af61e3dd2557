"""Live bytes of tensor storages on the CPU, and their peak: the CPU's ``max_memory_allocated``.

PyTorch's CPU allocator keeps no statistics, and a process's resident set size mixes tensors
with the interpreter, the libraries and freed-but-cached heap pages, so neither says how many
bytes of tensors a training step holds at its peak. :class:`TensorMeter` counts them the way
PyTorch's own ``torch.distributed._tools.mem_tracker.MemTracker`` does (PyTorch 2.13): a
``TorchDispatchMode`` sees every tensor an operator returns, records each distinct storage's
size once (views share their base's storage), and a weak reference's callback subtracts it when
the storage is freed; ``UntypedStorage.resize_``, which FSDP2 uses to free and re-allocate
unsharded parameters (``_fsdp_common.free_storage``/``alloc_storage``), is patched while the
meter is active. DTensor operations are left to DTensor (the mode returns ``NotImplemented``),
whose local operations then pass through the mode.

What it cannot see: storages allocated outside the dispatcher (the gloo backend's internal
buffers, a library's own ``malloc``). Only storages on the meter's device are counted.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import wraps
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only

__all__ = ["TensorMeter"]


class _Entry:
    __slots__ = ("nbytes", "ref")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.ref: weakref.ref[torch.UntypedStorage] | None = None


class TensorMeter(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts live tensor-storage bytes on ``device`` while active (a context manager).

    ``current`` and ``peak`` are bytes; :meth:`reset_peak` starts a new window at ``current``;
    :meth:`track` registers tensors created before the meter was entered.
    """

    def __init__(self, device: torch.device) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = device
        self.current = 0
        self.peak = 0
        # Keyed by the storage's C++ StorageImpl address, unique while the storage lives; the
        # weak reference's callback removes the entry when it dies.
        self._entries: dict[int, _Entry] = {}
        self._original_resize: Callable[..., Any] | None = None

    def reset_peak(self) -> None:
        """Start a new peak window at the current live bytes."""
        self.peak = self.current

    def track(self, *tensors: torch.Tensor) -> None:
        """Count ``tensors``' storages (e.g. parameters created before the meter was entered)."""
        for t in tensors:
            self._track(t)

    def _add(self, delta: int) -> None:
        self.current += delta
        self.peak = max(self.peak, self.current)

    def _track(self, t: torch.Tensor) -> None:
        from torch.distributed.tensor import DTensor

        if isinstance(t, DTensor):
            t = t.to_local()
        if t.device != self.device:
            return
        try:
            storage = t.untyped_storage()
        except (NotImplementedError, RuntimeError):  # meta/fake/sparse tensors have none
            return
        key = storage._cdata
        if key in self._entries:
            return
        entry = _Entry(storage.nbytes())

        def release(_: object, entry: _Entry = entry, key: int = key) -> None:
            self.current -= entry.nbytes
            if self._entries.get(key) is entry:
                del self._entries[key]

        entry.ref = weakref.ref(storage, release)
        self._entries[key] = entry
        self._add(entry.nbytes)

    def _resized(self, storage: torch.UntypedStorage) -> None:
        entry = self._entries.get(storage._cdata)
        if entry is None:
            return
        nbytes = storage.nbytes()
        self._add(nbytes - entry.nbytes)
        entry.nbytes = nbytes

    def __enter__(self) -> TensorMeter:
        original = torch.UntypedStorage.resize_
        self._original_resize = original

        def resize_(storage: torch.UntypedStorage, size: int) -> Any:
            result = original(storage, size)
            self._resized(storage)
            return result

        torch.UntypedStorage.resize_ = wraps(original)(resize_)  # type: ignore[method-assign,assignment]
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *args: Any) -> None:
        super().__exit__(*args)  # type: ignore[no-untyped-call]
        if self._original_resize is not None:
            torch.UntypedStorage.resize_ = self._original_resize  # type: ignore[method-assign]

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        from torch.distributed.tensor import DTensor

        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        tree_map_only(torch.Tensor, self._track, out)
        return out
