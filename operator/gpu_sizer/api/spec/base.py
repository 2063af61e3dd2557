"""The base of every spec object, and the error its cross-field rules raise.

Every spec model derives from :class:`_Model` so that the wire format is the same everywhere:
camelCase names (Kubernetes API conventions), unknown fields refused (a typo is an error, not a
silently ignored setting), objects frozen (a parsed spec is hashed and compared, never mutated).
"""

from __future__ import annotations

from pydantic import AliasGenerator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["FieldError"]


class FieldError(ValueError):
    """Cross-field rules failed; ``items`` holds (camelCase path relative to the model, message).

    :func:`gpu_sizer.api.errors.problems_from` appends each path to pydantic's location so that the
    reported path names the offending field, not the object that holds it, one line per problem.
    """

    def __init__(self, items: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{f}: {m}" for f, m in items))
        self.items = items


class _Problems:
    """Collects every cross-field problem of one model so that all are reported at once."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field: str, message: str) -> None:
        self.items.append((field, message))

    def raise_if_any(self) -> None:
        if self.items:
            raise FieldError(self.items)


class _Model(BaseModel):
    """Base for spec objects: camelCase on the wire, unknown fields rejected (typos are errors)."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel),
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        use_enum_values=False,
    )
