"""The project's way to read JSON files the user hands the CLI: the decoder's own limits as
errors that say what is wrong, never a traceback. Pure.

:func:`json.loads` fails in two ways that are not :class:`json.JSONDecodeError`, so a caller
that catches only that one lets them through as a traceback:

- an integer literal longer than the interpreter converts (``sys.get_int_max_str_digits()``,
  4300 digits by default, CVE-2020-10735) raises a plain :class:`ValueError` whose advice,
  ``sys.set_int_max_str_digits()``, is for a programmer, not for whoever wrote the file;
- arrays and objects nested beyond the interpreter's recursion limit raise
  :class:`RecursionError` (the C decoder recurses once per level).

:func:`loads` turns both into :class:`JsonLimitError`, which names the problem (and, for the
integer, where it is), as :mod:`gpu_sizer.yamlio` does for YAML ("nesting too deep").
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["JsonLimitError", "loads", "too_long_integer"]

PairsHook = Callable[[list[tuple[str, Any]]], Any]


class JsonLimitError(ValueError):
    """Well-formed JSON that Python's decoder will not hold; ``str()`` says why, without the
    file's name (the caller knows it). Not a :class:`json.JSONDecodeError`: the text is JSON."""


class _LongInteger(Exception):
    """Raised by :func:`_parse_int` out of the decoder, carrying the literal it could not read.

    An exception of its own so that no other ``ValueError`` is mistaken for this one."""

    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _parse_int(literal: str) -> int:
    """``int(literal)``; the decoder calls it for every integer, so the too-long literal itself
    is known (the interpreter's message has only its length)."""
    try:
        return int(literal)
    except ValueError:
        raise _LongInteger(literal) from None


def _where(text: str, literal: str) -> str:
    """`` at line L, column C``: where ``literal`` stands as a whole number in ``text`` ("" if it
    cannot be found), since a number of thousands of digits is hard to spot in an editor."""
    found = re.search(rf"(?<![\d.]){re.escape(literal)}(?![\d.eE])", text)
    if found is None:
        return ""
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - (text.rfind("\n", 0, found.start()) + 1) + 1
    return f" at line {line}, column {column}"


def too_long_integer(digits: int, where: str = "") -> str:
    """The words for an integer of ``digits`` digits (``where`` it is, if known), shared with
    :mod:`gpu_sizer.yamlio` so that a JSON and a YAML file are refused alike."""
    limit = sys.get_int_max_str_digits()
    return (
        f"an integer of {digits} digits{where}, over the {limit} Python reads: no setting"
        " is anywhere near that large; fix the value"
    )


def loads(text: str, object_pairs_hook: PairsHook | None = None) -> Any:
    """``json.loads(text, object_pairs_hook=...)``, its limits raised as :class:`JsonLimitError`.

    :raises json.JSONDecodeError: ``text`` is not JSON.
    :raises JsonLimitError: an integer longer than Python reads, or nesting deeper than the
        decoder recurses.
    """
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook, parse_int=_parse_int)
    except _LongInteger as exc:
        digits = len(exc.literal.lstrip("-"))
        raise JsonLimitError(too_long_integer(digits, _where(text, exc.literal))) from None
    except RecursionError:
        raise JsonLimitError(
            "nested too deep: arrays and objects inside one another beyond the levels Python's "
            "JSON decoder reads (a config nests a few)"
        ) from None
