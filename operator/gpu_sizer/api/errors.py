"""Turning pydantic validation errors into one line per problem, each naming its field path.

The same lines appear in ``gpu-sizer estimate``, the admission webhook's rejection and the
``Stalled`` condition of an invalid object already stored in the API.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from gpu_sizer.api.spec import FieldError

__all__ = ["InvalidWorkload", "Problem", "problems_from"]


@dataclass(frozen=True)
class Problem:
    """One invalid field: ``path`` is dotted camelCase (``spec.inference.maxNumSeqs``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class InvalidWorkload(ValueError):
    """A GPUWorkload document failed validation; ``problems`` lists each failure."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _join(parts: list[str | int]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def problems_from(error: ValidationError, prefix: str = "") -> list[Problem]:
    """One :class:`Problem` per pydantic error, paths camelCased and prefixed with ``prefix``."""
    problems: list[Problem] = []
    for err in error.errors(include_url=False):
        loc: list[str | int] = [prefix] if prefix else []
        loc += [p for p in err["loc"] if p not in ("function-after",)]
        message = err["msg"]
        original = (err.get("ctx") or {}).get("error")
        if isinstance(original, FieldError):
            problems.extend(Problem(_join([*loc, *f.split(".")]), m) for f, m in original.items)
            continue
        if err["type"] == "extra_forbidden":
            message = "unknown field"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif message.startswith("Value error, "):
            message = message.removeprefix("Value error, ")
        if err["type"] == "enum" and "expected" in (err.get("ctx") or {}):
            message = f"must be one of {err['ctx']['expected']}, not {err.get('input')!r}"
        problems.append(Problem(_join(loc), message))
    return problems
