"""The activation oracle: the live tensors of a real diffusers forward pass on the meta device.

A ``TorchDispatchMode`` sees every ATen operator's outputs; each output storage counts from the
moment an operator creates it until the last Python tensor on it is collected (a weakref
finalizer per tensor object). On the meta device nothing is allocated, so the published configs
run at their real output sizes in seconds. What it measures is the set of tensors alive at the
worst moment (what a CUDA caching allocator must hold, before its rounding and reserve); kernel
workspaces (cuDNN, FlashAttention's logsumexp) are not tensors and are not counted.

Scaled-dot-product attention runs through :func:`fused_attention`, which allocates only the
output as the fused CUDA kernels do: on the meta device PyTorch would pick its reference math
path and materialise the score matrix, which ``attentionBackend: native`` does not do on a GPU.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["fused_attention", "live_peak_bytes"]


class _Live(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.current -= self.sizes.pop(key)

    def _track(self, tensor: torch.Tensor) -> None:
        key = tensor.untyped_storage()._cdata
        if key not in self.sizes:
            self.sizes[key] = tensor.untyped_storage().nbytes()
            self.current += self.sizes[key]
            self.peak = max(self.peak, self.current)
        self.refs[key] = self.refs.get(key, 0) + 1
        weakref.finalize(tensor, self._free, key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for item in tree_flatten(out)[0]:
            if isinstance(item, torch.Tensor):
                self._track(item)
        return out


def live_peak_bytes(fn: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()) -> int:
    """Bytes of the tensors ``fn`` creates that are alive together at the worst moment.

    ``exclude``: tensors (a model's parameters) whose storage is not counted when an operator
    returns a view of it (``weight.t()`` in ``F.linear``'s decomposition on the meta device
    would otherwise count a whole weight matrix as an activation while the product runs)."""
    mode = _Live()
    for tensor in exclude:
        key = tensor.untyped_storage()._cdata
        mode.sizes[key] = 0
        mode.refs[key] = 1  # held by the model: never freed, never counted
    with mode:
        fn()
    return mode.peak


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """``F.scaled_dot_product_attention`` allocating only its output ``[..., Nq, Dv]``."""
    original = F.scaled_dot_product_attention

    def fused(*args: Any, **kwargs: Any) -> torch.Tensor:
        query = kwargs["query"] if "query" in kwargs else args[0]
        value = kwargs["value"] if "value" in kwargs else args[2]
        return query.new_empty((*query.shape[:-1], value.shape[-1]))

    F.scaled_dot_product_attention = fused  # type: ignore[assignment]
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
