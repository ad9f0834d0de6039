"""Parse fleet YAML safely, remembering the line of every path (no Django).

Aliases and anchors are refused, which also defuses YAML bombs; size, list lengths, nesting
depth (PyYAML composes recursively) and the digits of a number (Python refuses to convert
thousands) are bounded; control characters are refused by PyYAML's reader. Every refusal is a
``FleetError`` naming the path (``fleet`` for the document) and, where known, the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

MAX_BYTES = 1_000_000
MAX_ITEMS = 5_000
# A fleet file nests five levels (regions[0].endpoints[0].models[0]); the rest is headroom.
MAX_DEPTH = 32
# The longest number literal: coordinates and rates fit in 30 characters.
MAX_NUMBER_CHARS = 64
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


@dataclass(frozen=True)
class FleetIssue:
    path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"{self.path}: {self.message}{where}"


class FleetError(ValueError):
    """The fleet file is invalid; ``issues`` names every problem found."""

    def __init__(self, issues: list[FleetIssue]) -> None:
        self.issues = issues
        super().__init__("; ".join(str(i) for i in issues))

    def as_fields(self) -> dict[str, list[str]]:
        fields: dict[str, list[str]] = {}
        for issue in self.issues:
            fields.setdefault(issue.path or "fleet", []).append(str(issue).split(": ", 1)[-1])
        return fields


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases and nesting deeper than ``MAX_DEPTH``."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = getattr(event, "start_mark", None)
        if isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError("aliases are not allowed in a fleet file", None, None, mark)
        if getattr(event, "anchor", None):
            raise yaml.MarkedYAMLError("anchors are not allowed in a fleet file", None, None, mark)
        if self.depth >= MAX_DEPTH:
            line = mark.line + 1 if mark is not None else None
            raise FleetError(
                [FleetIssue("fleet", f"nested too deeply (more than {MAX_DEPTH} levels)", line)]
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _construct(node: yaml.Node, path: str, loader: Any) -> Any:
    """Build a scalar (or a key) from its node; refuse number literals too long to convert."""
    line = node.start_mark.line + 1
    if (
        isinstance(node, yaml.ScalarNode)
        and node.tag in _NUMBER_TAGS
        and len(node.value) > MAX_NUMBER_CHARS
    ):
        message = f"a number of {len(node.value)} digits (at most {MAX_NUMBER_CHARS})"
        raise FleetError([FleetIssue(path or "fleet", message, line)])
    try:
        return loader.construct_object(node, deep=True)
    except (ValueError, OverflowError) as exc:
        message = f"unreadable value: {exc}"[:200]
        raise FleetError([FleetIssue(path or "fleet", message, line)]) from None


def _node_to_python(node: yaml.Node, path: str, lines: dict[str, int], loader: Any) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _construct(key_node, path, loader)
            if not isinstance(key, str):
                raise FleetError(
                    [
                        FleetIssue(
                            path or "fleet",
                            f"key {repr(key)[:60]} is not a string",
                            key_node.start_mark.line + 1,
                        )
                    ]
                )
            if key in out:
                line = key_node.start_mark.line + 1
                raise FleetError([FleetIssue(join_path(path, key), "duplicate key", line)])
            out[key] = _node_to_python(value_node, join_path(path, key), lines, loader)
        return out
    if isinstance(node, yaml.SequenceNode):
        if len(node.value) > MAX_ITEMS:
            raise FleetError(
                [FleetIssue(path, f"more than {MAX_ITEMS} items", node.start_mark.line + 1)]
            )
        return [_node_to_python(v, f"{path}[{i}]", lines, loader) for i, v in enumerate(node.value)]
    return _construct(node, path, loader)


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def parse_yaml(data: str | bytes) -> tuple[Any, dict[str, int]]:
    """Parse YAML into Python values plus a path → line map."""
    if isinstance(data, bytes):
        if len(data) > MAX_BYTES:
            raise FleetError([FleetIssue("fleet", f"file is larger than {MAX_BYTES} bytes")])
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FleetError([FleetIssue("fleet", f"not UTF-8 text (byte {exc.start})")]) from exc
    if len(data) > MAX_BYTES:
        raise FleetError([FleetIssue("fleet", f"file is larger than {MAX_BYTES} bytes")])
    try:
        loader = _NoAliasLoader(data)  # its reader checks every character first
    except yaml.reader.ReaderError as exc:
        raise FleetError([_unprintable(data, exc)]) from None
    lines: dict[str, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            raise FleetError([FleetIssue("fleet", "the file is empty")])
        return _node_to_python(node, "", lines, loader), lines
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        msg = exc.problem or exc.context or "invalid YAML"
        raise FleetError([FleetIssue("fleet", f"YAML syntax error: {msg}", line)]) from exc
    except yaml.YAMLError as exc:
        raise FleetError([FleetIssue("fleet", f"YAML syntax error: {exc}")]) from exc
    finally:
        loader.dispose()


def _unprintable(data: str, exc: yaml.reader.ReaderError) -> FleetIssue:
    """Name a character YAML does not allow (controls but tab and newlines), with its line."""
    position = exc.position if isinstance(exc.position, int) else 0
    code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "?")
    kind = "control character" if code < 0x20 or 0x7F <= code <= 0x9F else "character"
    line = data.count("\n", 0, position) + 1
    return FleetIssue("fleet", f"{kind} U+{code:04X} is not allowed in a fleet file", line)
