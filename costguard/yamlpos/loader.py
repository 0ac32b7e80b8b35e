"""Parse one YAML document into plain Python and a map of where each value sits."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from costguard.errors import CostguardError, SourceError
from costguard.limited_json import ODD_TEXT

YamlPath = tuple[Hashable, ...]

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"

# Aliases can make a small file expand exponentially ("billion laughs"): what aliases add
# past the nodes the text itself writes is bounded (a file's own values are bounded by its
# size: 3,000 ordinary policies are 150,000 values). No real configuration comes near these.
MAX_ALIAS_VALUES = 50_000
MAX_DEPTH = 100


@dataclass(frozen=True)
class Position:
    """A 1-based line and column in a source file."""

    line: int
    column: int


@dataclass
class PositionMap:
    """Where each value (and each mapping key) of a loaded document sits in the text."""

    values: dict[YamlPath, Position] = field(default_factory=dict)
    keys: dict[YamlPath, Position] = field(default_factory=dict)

    def value(self, path: YamlPath) -> Position | None:
        """Position of the value at `path`, or None if the document has no such path."""
        return self.values.get(path)

    def key(self, path: YamlPath) -> Position | None:
        """Position of the mapping key whose value is at `path` (None for list items/root)."""
        return self.keys.get(path)

    def nearest(self, path: Sequence[Hashable]) -> tuple[YamlPath, Position]:
        """The longest prefix of `path` present in the document, and its value position."""
        candidate = tuple(path)
        while candidate:
            pos = self.values.get(candidate)
            if pos is not None:
                return candidate, pos
            candidate = candidate[:-1]
        return (), self.values.get((), Position(1, 1))

    def key_or_value(self, path: YamlPath) -> Position:
        """The key position when `path` is a mapping entry, else where its value starts."""
        return self.keys.get(path) or self.nearest(path)[1]


class _Located(Exception):
    """Raised inside this module for one located problem; callers get a SourceError."""

    def __init__(self, mark: yaml.Mark | None, message: str) -> None:
        super().__init__(message)
        self.position = _pos(mark) if mark is not None else Position(1, 1)
        self.message = message


def _pos(mark: yaml.Mark) -> Position:
    return Position(mark.line + 1, mark.column + 1)


def load_yaml_with_positions(text: str, filename: str) -> tuple[Any, PositionMap]:
    """Parse one YAML document; return its plain-Python value and a position map.

    An empty document (or one of comments only) yields `None`. Every problem is raised as
    `YamlLoadError` carrying a `SourceError`.
    """
    if _FAST is not None:
        # libyaml parses a 3,000-policy file in a tenth of the time; any problem is read
        # again by the pure-Python parser, whose messages and marks the errors are made of
        try:
            yaml.reader.Reader(text)  # the same check for unprintable characters up front
            return _load(_FAST, text, filename)
        except (YamlLoadError, yaml.YAMLError, RecursionError):
            pass
    return _load(yaml.SafeLoader, text, filename)


# libyaml's loader where PyYAML was built with it (the wheels are)
_FAST: Any = getattr(yaml, "CSafeLoader", None) if yaml.__with_libyaml__ else None


def _load(make: Any, text: str, filename: str) -> tuple[Any, PositionMap]:
    loader: Any = None
    try:
        loader = make(text)  # the pure-Python one checks for unprintable characters here
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise _Located(None, "YAML is nested too deeply to read") from None
        positions = PositionMap()
        if node is None:
            return None, positions
        value = _Converter(loader, positions).convert(node, ())
        return value, positions
    except _Located as exc:
        raise YamlLoadError(
            SourceError(filename, exc.position.line, exc.position.column, exc.message)
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise YamlLoadError(_marked_error(filename, text, exc, mark)) from None
    except yaml.reader.ReaderError as exc:
        line, column = _line_col(text, exc.position)
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        message = f"character {char!r} is not allowed in YAML ({exc.reason})"
        raise YamlLoadError(SourceError(filename, line, column, message)) from None
    except yaml.YAMLError as exc:
        raise YamlLoadError(SourceError(filename, 1, 1, f"invalid YAML: {exc}")) from None
    finally:
        if loader is not None:
            loader.dispose()


class YamlLoadError(CostguardError, ValueError):
    """The text is not a YAML document costguard can read; `error` says where and why."""

    def __init__(self, error: SourceError) -> None:
        super().__init__(str(error))
        self.error = error


def _marked_error(
    filename: str, text: str, exc: yaml.MarkedYAMLError, mark: yaml.Mark | None
) -> SourceError:
    problem = exc.problem or "invalid YAML"
    if exc.context:
        where = ""
        if (
            exc.context_mark is not None
            and exc.problem_mark is not None
            and (exc.context_mark.line != exc.problem_mark.line)
        ):
            where = (
                f" (started on line {exc.context_mark.line + 1}, column "
                f"{exc.context_mark.column + 1})"
            )
        problem = f"{exc.context}{where}, {problem}"
    hint = ""
    if "found character '\\t'" in problem:
        hint = " (indent with spaces, not tabs)"
    elif "mapping values are not allowed here" in problem:
        hint = " (a value containing ': ' must be quoted)"
    message = f"invalid YAML: {problem}{hint}"
    if mark is None:
        return SourceError(filename, 1, 1, message)
    line, column = mark.line + 1, mark.column + 1
    if line > text.count("\n") + 1:  # end-of-stream marks point past the last line
        line, column = _line_col(text, len(text))
    return SourceError(filename, line, column, message)


# a pair of surrogates, as PyYAML leaves a pair of escapes ("\\ud83d\\ude00")
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _joined(pair: re.Match[str]) -> str:
    text = pair.group()
    return chr(0x10000 + (ord(text[0]) - 0xD800) * 0x400 + ord(text[1]) - 0xDC00)


def _text_of(value: str, node: yaml.Node) -> str:
    """`value` as text, from what YAML's escapes made of it: a pair of surrogate escapes
    ("\\ud83d\\ude00") is the one character it stands for (PyYAML keeps the halves); NUL
    ("\\0") or a lone half is refused at the scalar. Either failed the cycle that wrote a
    message or a tag holding it (no store, cloud or UTF-8 writer takes it), after `validate`
    had said the file was fine."""
    if "\x00" in value:
        raise _Located(node.start_mark, "text holds a NUL character (an escape such as "
                       "\"\\0\"): no store, cloud or message can carry it; remove it")
    text = _PAIR.sub(_joined, value)
    if (lone := ODD_TEXT.search(text)) is not None:
        raise _Located(node.start_mark, f"text holds an unpaired surrogate "
                       f"(\"\\u{ord(lone.group()):04x}\"), which is not Unicode text: write "
                       "the character itself, or both halves of its pair")
    return text


def _line_col(text: str, offset: int) -> tuple[int, int]:
    before = text[:offset]
    line = before.count("\n") + 1
    return line, offset - (before.rfind("\n") + 1) + 1


class _Converter:
    """Turns composed nodes into plain values, recording positions on the way."""

    def __init__(self, loader: Any, positions: PositionMap) -> None:
        self._loader = loader
        self._positions = positions
        self._expanded = 0  # values converted again through an alias
        self._converted: set[int] = set()
        self._active: set[int] = set()  # nodes being converted: an alias to one is a cycle

    def convert(self, node: yaml.Node, path: YamlPath) -> Any:
        if id(node) in self._converted:  # the text's node again: an alias expands it
            self._expanded += 1
            if self._expanded > MAX_ALIAS_VALUES:
                raise _Located(
                    node.start_mark,
                    f"aliases expand to more than {MAX_ALIAS_VALUES} values (the limit on "
                    "what `*name` may repeat): check for aliases that expand recursively",
                )
        else:
            self._converted.add(id(node))
        if len(path) > MAX_DEPTH:
            raise _Located(node.start_mark, f"nested deeper than {MAX_DEPTH} levels")
        self._positions.values.setdefault(path, _pos(node.start_mark))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if id(node) in self._active:
            raise _Located(node.start_mark, "an alias refers to the value containing it")
        self._active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                self._require_tag(node, _SEQ_TAG)
                return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
            assert isinstance(node, yaml.MappingNode)
            self._require_tag(node, _MAP_TAG)
            return self._mapping(node, path)
        finally:
            self._active.discard(id(node))

    def _require_tag(self, node: yaml.Node, tag: str) -> None:
        if node.tag != tag:
            raise _Located(node.start_mark, f"unsupported YAML tag {node.tag!r}")

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            value = self._loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise _Located(node.start_mark, exc.problem or "invalid value") from None
        except (ValueError, TypeError, OverflowError) as exc:
            # e.g. `2024-13-45` matches the timestamp pattern but is no date
            raise _Located(node.start_mark, f"invalid value {node.value!r}: {exc}") from None
        if isinstance(value, str) and ODD_TEXT.search(value) is not None:
            value = _text_of(value, node)
        return value

    def _mapping(self, node: yaml.MappingNode, path: YamlPath) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        first_seen: dict[Any, yaml.Node] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            key = self._key(key_node)
            if key in first_seen:
                first = first_seen[key].start_mark.line + 1
                raise _Located(
                    key_node.start_mark,
                    f"duplicate key {key_node.value!r} (first defined on line {first})",
                )
            first_seen[key] = key_node
        # Merged mappings only fill keys the mapping does not set itself; convert them first
        # so the explicit entries' positions win.
        for merge_node in merges:
            for source in self._merge_sources(merge_node):
                merged = self.convert(source, path)
                for key, value in merged.items():
                    if key not in first_seen and key not in result:
                        result[key] = value
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node)
            child = (*path, key)
            self._positions.keys[child] = _pos(key_node.start_mark)
            self._positions.values[child] = _pos(value_node.start_mark)
            result[key] = self.convert(value_node, child)
        self._positions.values[path] = _pos(node.start_mark)
        return result

    def _merge_sources(self, node: yaml.Node) -> list[yaml.MappingNode]:
        if isinstance(node, yaml.MappingNode):
            return [node]
        if isinstance(node, yaml.SequenceNode) and all(
            isinstance(item, yaml.MappingNode) for item in node.value
        ):
            # Earlier mappings in a merge list take precedence, as in safe_load.
            return list(node.value)
        raise _Located(node.start_mark, "a merge key '<<' needs a mapping or a list of them")

    def _key(self, key_node: yaml.Node) -> Hashable:
        if not isinstance(key_node, yaml.ScalarNode):
            raise _Located(key_node.start_mark, "mapping keys must be plain values")
        key = self._scalar(key_node)
        if not isinstance(key, Hashable):
            raise _Located(key_node.start_mark, "mapping keys must be plain values")
        return key
