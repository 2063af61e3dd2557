"""The project's one way to read YAML files: bounded, strict about keys, and readable errors. Pure.

Every YAML input (``gpu-sizer estimate`` documents, catalog.yaml, policy.yaml) goes through
:func:`load_all` / :func:`load` and every file through :func:`read_text`, so that the CLI, the
webhook's configuration and the operator fail the same way on the same bad file:

- Aliases: YAML lets ``*a`` refer to an anchored node, so nine levels of ten aliases each (a
  "billion laughs" document of a few hundred bytes) expand to 10**9 nodes when the loaded data is
  walked. PyYAML shares the aliased object rather than copying it, but everything downstream
  (pydantic, ``json.dumps``, the spec hash) walks it as a tree. The loader counts the nodes each
  alias stands for and refuses a document whose expanded size exceeds :data:`MAX_EXPANDED_NODES`
  (Kubernetes' own YAML decoder, ``sigs.k8s.io/yaml`` over ``go-yaml`` v2, refuses documents
  whose alias expansion exceeds a similar budget for the same reason).
- Duplicate keys: the YAML 1.2 spec (section 3.2.1.1) requires mapping keys to be unique; PyYAML
  silently keeps the last one, so a second ``maxNumSeqs:`` would win unseen. They are refused
  with the line of the duplicate.
- Integers: one longer than Python converts (``sys.get_int_max_str_digits()``, 4300 digits) is
  refused at its line, in the words :mod:`gpu_sizer.jsonio` uses for JSON, rather than escaping
  the loader as a plain ``ValueError`` (a traceback in the CLI).
- Speed: libyaml parses when PyYAML has it; malformed text is read again by the pure-Python
  loader, so that acceptance, types and every message are the same with or without libyaml.
- Files: a file that is not UTF-8 is reported as such rather than with a decode traceback, and
  one larger than :data:`MAX_FILE_BYTES` (or an endless stream: ``/dev/zero``, a pipe that never
  closes its writer... stops being read at the bound) is refused with its size, as the webhook
  refuses a request body over its limit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpu_sizer.jsonio import too_long_integer

__all__ = [
    "MAX_EXPANDED_NODES",
    "MAX_FILE_BYTES",
    "UnreadableFile",
    "YamlError",
    "load",
    "load_all",
    "read_text",
]

MAX_EXPANDED_NODES: Final = 100_000
"""Most nodes one document may expand to, aliases counted at their expanded size. A GPUWorkload
has about 60 nodes and a large catalog a few thousand; 100,000 is far above any real input and
far below what hangs a loader."""

MAX_FILE_BYTES: Final = 8 << 20
"""Largest file (or stdin) :func:`read_text` reads, in bytes: the webhook's request body limit
(``gpu_sizer.admission.server.MAX_BODY_BYTES``), so the CLI accepts what admission accepts. A
GPUWorkload is a few KiB, the largest catalog or policy a few hundred."""


class YamlError(ValueError):
    """A document is not acceptable YAML; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class UnreadableFile(OSError):
    """A file could not be read as UTF-8 text; ``str()`` is the reason, without the path."""


class _Strict:
    """Bounds alias expansion and refuses duplicate mapping keys; mixed into a PyYAML loader.

    The size check runs on each composed document (``get_node`` / ``get_single_node`` are the
    entry points of both the pure-Python ``Composer`` and libyaml's ``CParser``, PyYAML 6.0), the
    duplicate check in ``construct_mapping`` (``SafeConstructor``, pure Python in both loaders).
    """

    def get_node(self) -> Node | None:
        node: Node | None = super().get_node()  # type: ignore[misc]
        if node is not None:
            _check_size(node)
        return node

    def get_single_node(self) -> Node | None:
        node: Node | None = super().get_single_node()  # type: ignore[misc]
        if node is not None:
            _check_size(node)
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[attr-defined]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue
            if duplicate:
                raise ConstructorError(None, None, f"duplicate key {key}", key_node.start_mark)
        result: dict[Any, Any] = super().construct_mapping(node, deep=deep)  # type: ignore[misc]
        return result

    def construct_yaml_int(self, node: ScalarNode) -> int:
        """``SafeConstructor.construct_yaml_int``, an integer longer than Python converts
        (``sys.get_int_max_str_digits()``) refused at its line: ``int()`` raises a plain
        ``ValueError`` there, which no caller expects from a loader, and a traceback follows."""
        try:
            value: int = super().construct_yaml_int(node)  # type: ignore[misc]
        except ValueError:
            digits = sum(c.isdigit() for c in str(node.value))
            raise ConstructorError(None, None, too_long_integer(digits), node.start_mark) from None
        return value


def _strict_ints(loader: type) -> None:
    """Register :meth:`_Strict.construct_yaml_int` for ``!!int`` on ``loader``: PyYAML
    dispatches by tag through a class-level table of functions, not through the method, so
    overriding the method alone changes nothing."""
    loader.add_constructor("tag:yaml.org,2002:int", _Strict.construct_yaml_int)  # type: ignore[attr-defined]


class _Loader(_Strict, yaml.SafeLoader):
    """The pure-Python loader: the reference for what is accepted and for every message."""


_strict_ints(_Loader)


#: libyaml's parser and composer (``yaml.CSafeLoader``: C scanner, parser and composer; the same
#: pure-Python resolver and SafeConstructor, so the same types): loading is most of the CLI's
#: time over many documents, and the C scanner is several times faster (figures:
#: docs/benchmarks.md, "YAML"). None when PyYAML was built without libyaml.
_CLoader: type | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _CSafeStrict(_Strict, yaml.CSafeLoader):
        pass

    _strict_ints(_CSafeStrict)
    _CLoader = _CSafeStrict


def _check_size(root: Node) -> None:
    """Raise when ``root`` expands to more than :data:`MAX_EXPANDED_NODES` nodes.

    Sizes are memoised per node object, so an alias (the same node object met again) costs one
    lookup: the check is linear in the document's text, not in its expansion.
    """
    sizes: dict[int, int] = {}

    def size(node: Node, depth: int) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        if depth > 200:
            raise YamlError("nesting deeper than 200 levels", node.start_mark.line + 1)
        total = 1
        if isinstance(node, SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = total
        if total > MAX_EXPANDED_NODES:
            raise YamlError(
                f"document expands to more than {MAX_EXPANDED_NODES} nodes through aliases "
                "(a YAML alias bomb?); write the values out",
                node.start_mark.line + 1,
            )
        return total

    size(root, 0)


def _error(exc: yaml.YAMLError) -> YamlError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return YamlError(str(problem), mark.line + 1 if mark is not None else None)


def load_all(text: str) -> list[Any]:
    """Every document of ``text`` (``None`` for an empty one).

    :raises YamlError: malformed YAML, a duplicate key, or an alias expansion beyond the bound.
    """
    if _CLoader is not None:
        try:
            return list(yaml.load_all(text, Loader=_CLoader))
        except YamlError:
            raise  # the project's own checks: the same in both loaders
        except (yaml.YAMLError, RecursionError):
            # libyaml words syntax errors its own way: the pure-Python loader reads the text
            # again for the same message and line as always (only malformed input pays this).
            pass
    try:
        return list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        raise _error(exc) from None
    except RecursionError:
        raise YamlError("nesting too deep") from None


def load(text: str) -> Any:
    """The single document of ``text`` (``None`` when empty); see :func:`load_all`.

    :raises YamlError: as :func:`load_all`, or more than one document.
    """
    docs = load_all(text)
    if len(docs) > 1:
        raise YamlError(f"expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of ``path`` (``-`` reads stdin), at most ``limit`` bytes.

    Read in bounded chunks: an endless source (``/dev/zero``) costs ``limit`` bytes of memory
    and stops there, never grows until the machine runs out.

    :raises UnreadableFile: the file is missing or unreadable (the OS's reason), is a directory,
        is larger than ``limit`` bytes, or is not UTF-8 (with the byte offset).
    """
    try:
        if str(path) == "-":
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:  # a text stream (tests replace stdin): bounded in characters
                text = sys.stdin.read(limit + 1)
                if len(text) > limit:
                    raise UnreadableFile(_too_large(limit))
                return text
            data = _bounded(stream, limit)
        else:
            with Path(path).open("rb") as fh:
                data = _bounded(fh, limit)
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"not UTF-8 (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        if isinstance(exc, UnreadableFile):
            raise
        raise UnreadableFile(exc.strerror or str(exc)) from None


def _too_large(limit: int) -> str:
    return f"larger than {limit} bytes ({limit / (1 << 20):g} MiB), the most read from one file"


def _bounded(stream: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of a binary stream; :class:`UnreadableFile` when there is more."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(min(1 << 20, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise UnreadableFile(_too_large(limit))
