"""Turning pydantic validation errors into one line per problem, each naming its field path.

The same lines appear in ``gpu-sizer estimate``, the admission webhook's rejection and the
``Stalled`` condition of an invalid object already stored in the API.
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, cast

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from gpu_sizer.api.spec import FieldError

__all__ = ["MAX_PROBLEMS", "InvalidWorkload", "Problem", "problems_from"]

#: Most problems reported for one document; a last line counts the rest. Thousands of problems
#: are one mistake repeated (a list pasted at the wrong level, a generated spec gone wrong), and
#: each costs work (an unknown field looks for the closest allowed name): 50,000 unknown keys took
#: 4 s and an 8 MB denial to report in full.
MAX_PROBLEMS = 20
#: Longest field name shown in a path, in characters (a user's key can be any length).
_MAX_KEY = 64


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
            if len(part) > _MAX_KEY:
                part = part[: _MAX_KEY - 3] + "..."
            out += ("." if out else "") + part
    return out


def _show(value: Any) -> str:
    """A user's input, quoted and cut short enough for one line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_TYPE_NAMES = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
}
_INT_KINDS = frozenset({"int_type", "int_parsing", "int_from_float"})


def _whole_number(value: Any) -> int | None:
    """The integer a user meant by ``7.6e9`` or ``7600000000.0``, else ``None``.

    YAML 1.1 (PyYAML, and so kubectl's and our reader) reads ``7.6e9`` as text: its floats need
    a sign in the exponent (``7.6e+9``), which is then a float. Integer fields accept neither.
    """
    if isinstance(value, bool) or not isinstance(value, (str, float)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or not number.is_integer():
        return None
    return int(number)


_BOUNDS = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``X | None`` or ``list[X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, list):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def _model_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the field ``loc`` (a pydantic error location) names."""
    for part in loc[:-1]:
        if model is None:
            return None
        if isinstance(part, int):
            continue
        field = _field_named(model, part)
        model = _model_of(field.annotation) if field is not None else None
    return model


def _field_named(model: type[BaseModel], name: Any) -> FieldInfo | None:
    """The field of ``model`` whose Python or wire name is ``name``."""
    return next((f for n, f in model.model_fields.items() if name in (n, f.alias)), None)


def _allowed_fields(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """Wire names of the fields allowed where ``loc`` (a pydantic error location) points."""
    holder = _model_at(model, loc)
    if holder is None:
        return []
    return [f.alias or n for n, f in holder.model_fields.items()]


def _out_of_bounds(model: type[BaseModel] | None, loc: tuple[Any, ...], value: int) -> str | None:
    """Why ``value`` breaks a bound of the field at ``loc`` (``"at most 16777216"``), or None.

    Used before suggesting ``write N`` for ``1e30``: a suggestion the next validation rejects
    sends the user round twice.
    """
    holder = _model_at(model, loc)
    field = _field_named(holder, loc[-1]) if holder is not None and loc else None
    if field is None:
        return None
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge) and value < cast(float, bound.ge):
            return f"at least {bound.ge}"
        if isinstance(bound, annotated_types.Gt) and value <= cast(float, bound.gt):
            return f"greater than {bound.gt}"
        if isinstance(bound, annotated_types.Le) and value > cast(float, bound.le):
            return f"at most {bound.le}"
        if isinstance(bound, annotated_types.Lt) and value >= cast(float, bound.lt):
            return f"less than {bound.lt}"
    return None


def not_an_object(value: Any, *, document: bool = False) -> str:
    """The message for ``value`` where an object (a mapping of fields) belongs.

    A list of mappings there is nearly always a stray ``-`` in YAML (``model:`` then
    ``- name: ...``) or, for a whole document, several objects in one list; say which fix
    applies instead of printing the list back.
    """
    what = "a YAML/JSON object" if document else "an object"
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        if document:
            return (
                f"must be {what}, not a list of {len(value)}; separate documents with '---' "
                "or wrap them in 'kind: List' with 'items:'"
            )
        if len(value) == 1:
            return f"must be {what}, not a list; remove the '-' before its first field"
        return f"must be {what}, not a list of {len(value)}; write one object"
    if value is None or isinstance(value, (dict, list)) or document:
        return f"must be {what}"
    return f"must be {what}, not {_show(value)}"


#: Spellings newcomers use for a value the API spells otherwise (PyTorch's and engines' short
#: dtype names: vLLM's ``--dtype`` takes ``half`` and ``float``, PyTorch has ``torch.half``).
_VALUE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
}


def _enum_guess(value: Any, choices: list[str]) -> str | None:
    """The allowed value ``value`` most likely meant: the same but for case (``vLLM``), a
    common alias (``bf16``) or a near spelling (``bfloat17``); None when nothing is close."""
    if not isinstance(value, str) or not choices or value in choices:
        return None
    folded = {c.lower(): c for c in choices}
    if value.lower() in folded:
        return folded[value.lower()]
    alias = _VALUE_ALIASES.get(value.lower())
    if alias in choices:
        return alias
    close = difflib.get_close_matches(value, choices, n=1)
    return close[0] if close else None


def _null_message(expected: str, model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    """The message for ``null`` (YAML ``~``, an empty value) where ``expected`` belongs: a
    field with a default is set by leaving it out; a required one needs a value."""
    holder = _model_at(model, loc)
    field = _field_named(holder, loc[-1]) if holder is not None and loc else None
    if field is None:
        return f"must be {expected} (null given)"
    if field.is_required():
        return f"required: must be {expected} (null given)"
    return f"must be {expected} (null given; remove the field to use the default)"


def _message(err: Any, model: type[BaseModel] | None) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "extra_forbidden":
        allowed = _allowed_fields(model, tuple(err["loc"]))
        if not allowed:
            return "unknown field"
        close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"unknown field; {hint}allowed: {', '.join(allowed)}"
    if kind == "missing":
        return "required field is missing"
    if kind == "enum" and "expected" in ctx:
        message = f"must be one of {ctx['expected']}, not {_show(err.get('input'))}"
        guess = _enum_guess(err.get("input"), re.findall(r"'([^']*)'", str(ctx["expected"])))
        return message if guess is None else f"{message}; did you mean {guess!r}?"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items, not {ctx.get('actual_length')}"
    if kind == "too_short":
        least = ctx.get("min_length")
        items = "item" if least == 1 else "items"
        return f"must have at least {least} {items}, not {ctx.get('actual_length')}"
    if kind == "string_too_long":
        length = len(err["input"]) if isinstance(err.get("input"), str) else "more"
        return f"must be at most {ctx.get('max_length')} characters long, not {length}"
    if kind in _BOUNDS:
        key, op = _BOUNDS[kind]
        return f"must be {op} {ctx.get(key)}, not {_show(err.get('input'))}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return not_an_object(err.get("input"))
    if kind in _TYPE_NAMES and "input" in err and err["input"] is None:
        return _null_message(_TYPE_NAMES[kind], model, tuple(err["loc"]))
    if kind in _TYPE_NAMES:
        message = f"must be {_TYPE_NAMES[kind]}, not {_show(err.get('input'))}"
        whole = _whole_number(err.get("input")) if kind in _INT_KINDS else None
        if whole is None:
            return message
        bound = _out_of_bounds(model, tuple(err["loc"]), whole)
        return f"{message}, and {bound}" if bound else f"{message}: write {whole}"
    return str(err["msg"]).removeprefix("Value error, ")


def problems_from(
    error: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> list[Problem]:
    """One :class:`Problem` per pydantic error, paths camelCased and prefixed with ``prefix``.

    Messages say what is allowed (bounds, enum values, types, and for an unknown field the
    allowed names of that object, which needs ``model``, the validated root model). At most
    :data:`MAX_PROBLEMS` are reported; when there are more, a last problem at ``prefix`` counts
    the pydantic errors not shown.
    """
    problems: list[Problem] = []
    errors = error.errors(include_url=False, include_input=True)
    for done, err in enumerate(errors):
        if len(problems) >= MAX_PROBLEMS:
            problems.append(
                Problem(
                    prefix or "(document)",
                    f"{len(errors) - done} more problems not shown; fix the ones above first",
                )
            )
            break
        loc: list[str | int] = [prefix] if prefix else []
        loc += [p for p in err["loc"] if p not in ("function-after",)]
        original = (err.get("ctx") or {}).get("error")
        if isinstance(original, FieldError):
            problems.extend(Problem(_join([*loc, *f.split(".")]), m) for f, m in original.items)
            continue
        problems.append(Problem(_join(loc), _message(err, model)))
    return problems
