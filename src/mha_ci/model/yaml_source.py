"""Strict YAML loading that remembers where every key came from, and pydantic errors turned
into ConfigErrors that name file, line, key path and the closest valid key (exit 2).

Every pipelines/*.yaml file goes through `load_validated`; modules that own a file (perf gate,
workloads, ...) pass their own pydantic model (with `extra="forbid"`).
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import yaml

from mha_ci.errors import ConfigError
from mha_ci.files import read_capped

M = TypeVar("M", bound=pydantic.BaseModel)


# No pipelines file nests deeper than a handful of levels. PyYAML composes and constructs nodes
# recursively, so a document nested thousands deep ends in RecursionError; it is refused at this
# depth instead, naming the line.
MAX_YAML_DEPTH = 64
# No setting needs more than a 64-bit integer; a number of hundreds of digits is a mistake or an
# attack (Python's int-from-text conversion is quadratic in the digits).
MAX_INT_DIGITS = 19


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that records the line of every mapping key, rejects duplicate keys, and refuses
    documents nested deeper than MAX_YAML_DEPTH or integers of more than MAX_INT_DIGITS digits."""

    _depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"nested more than {MAX_YAML_DEPTH} levels deep", file=self.name,
                                  line=mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node):
        digits = sum(c.isalnum() for c in str(node.value).lower().removeprefix("-").removeprefix("+")
                     .removeprefix("0x").removeprefix("0o").removeprefix("0b"))
        if digits > MAX_INT_DIGITS:
            raise ConfigError(f"an integer of {digits} digits; settings take at most {MAX_INT_DIGITS}",
                              file=self.name, line=node.start_mark.line + 1)
        return super().construct_yaml_int(node)


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    mapping: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in mapping:
            raise ConfigError(f"duplicate key '{key}'", file=loader.name, line=key_node.start_mark.line + 1, key=str(key))
        mapping[key] = loader.construct_object(value_node, deep=deep)
        lines[key] = key_node.start_mark.line + 1
    result = _LinedDict(mapping)
    result.lines = lines
    result.line = node.start_mark.line + 1
    return result


class _LinedDict(dict):
    lines: dict[Any, int]
    line: int


class _LinedList(list):
    lines: list[int]
    line: int


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode, deep: bool = False) -> list:
    result = _LinedList(loader.construct_object(child, deep=deep) for child in node.value)
    result.lines = [child.start_mark.line + 1 for child in node.value]
    result.line = node.start_mark.line + 1
    return result


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)
_LineLoader.add_constructor("tag:yaml.org,2002:int", _LineLoader.construct_yaml_int)


# The largest pipelines file is a few KiB; a parse of megabytes takes minutes and gigabytes of
# memory (PyYAML keeps every node), so anything this big is refused before it is read.
MAX_YAML_BYTES = 1 << 20


def read_text_file(path: Path, what: str, max_bytes: int) -> str:
    """The UTF-8 text of the regular file `path`; unreadable, special (device, FIFO), oversized or
    non-UTF-8 files are a ConfigError naming it."""
    data = read_capped(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{what} is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})",
                          file=str(path), line=line) from None


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; syntax errors become ConfigError with the file and line."""
    text = read_text_file(path, "YAML file", MAX_YAML_BYTES)
    loader = _LineLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise ConfigError(f"invalid YAML: {exc.problem}", file=str(path), line=mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()


def line_of(data: Any, loc: tuple) -> int | None:
    """The line of the deepest element of `loc` (a pydantic error location) found in the data."""
    line = getattr(data, "line", None)
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            line = getattr(node, "lines", {}).get(part, line)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            lines = getattr(node, "lines", None)
            line = lines[part] if lines else line
            node = node[part]
        else:
            break
    return line


def model_at(model: type[pydantic.BaseModel], loc: tuple) -> type[pydantic.BaseModel] | None:
    """The pydantic model class that owns the mapping at `loc` (to list its valid keys)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return current if fields else None
        current = _inner_model(fields[part].annotation)
        if current is None:
            return None
    return current


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def closest(name: str, choices: Any) -> str | None:
    matches = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return matches[0] if matches else None


def validate(model: type[M], data: Any, path: Path) -> M:
    """Validate parsed YAML against a pydantic model; the first error becomes a ConfigError."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors()
        # An unknown key explains a "field required" error next to it (a misspelt required key),
        # so report it first: its message carries the "did you mean".
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = tuple(err["loc"])
        line = line_of(data, loc)
        key_path = " / ".join(str(p) for p in loc) or "(top level)"
        if err["type"] == "extra_forbidden":
            owner = model_at(model, loc[:-1])
            valid = sorted(owner.model_fields) if owner else []
            raise ConfigError(f"unknown key '{loc[-1]}' at {key_path}; valid keys: {', '.join(valid)}",
                              file=str(path), line=line, key=str(loc[-1]),
                              suggestion=closest(str(loc[-1]), valid)) from None
        raise ConfigError(f"{key_path}: {err['msg']}", file=str(path), line=line,
                          key=str(loc[-1]) if loc else None) from None


def load_validated(model: type[M], path: Path) -> M:
    return validate(model, load_yaml(path), path)
