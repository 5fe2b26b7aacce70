"""Deterministic YAML text for generated files.

PyYAML with insertion order kept (the builders choose a readable order: name, on, permissions,
jobs), multi-line strings as literal blocks (shell scripts stay readable in review), and no line
folding (a folded `run:` line would change what the shell sees). A `Noted` key or value is
written with a comment after it on its line: the reason for a permission, or a zizmor ignore
with its justification (zizmor reads ignores from YAML comments on the finding's line).
"""
from __future__ import annotations

import hashlib
import re

import yaml

# A note travels through PyYAML as a short digest suffix of the plain scalar (short, so a noted
# key stays a simple key), then becomes the comment the digest names.
_MARK = " ~~"
_NOTES: dict[str, str] = {}
_NOTED_KEY = re.compile(r"^(.*\S) ~~([0-9a-f]+):$", re.MULTILINE)
_NOTED_VALUE = re.compile(r"^(.*\S) ~~([0-9a-f]+)$", re.MULTILINE)


class Noted(str):
    """A string written as itself, with `note` as a YAML comment at the end of its line."""

    note: str

    def __new__(cls, value: str, note: str) -> Noted:
        noted = super().__new__(cls, value)
        noted.note = note
        _NOTES[_digest(note)] = note
        return noted


def _digest(note: str) -> str:
    return hashlib.sha256(note.encode()).hexdigest()[:16]


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:   # a step shared by two jobs is written twice,
        return True                                   # never as &anchor / *alias

    def increase_indent(self, flow: bool = False, indentless: bool = False):  # lists indented under keys
        return super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _noted(dumper: yaml.SafeDumper, value: Noted):
    if "\n" in value:
        raise ValueError(f"a noted scalar must be one line: {value!r}")
    return dumper.represent_scalar("tag:yaml.org,2002:str", f"{value}{_MARK}{_digest(value.note)}")


def _comment(match: re.Match, colon: str) -> str:
    return f"{match[1]}{colon}  # {_NOTES[match[2]]}"


_Dumper.add_representer(str, _str)
_Dumper.add_representer(Noted, _noted)


def dump(data: object, header: str = "") -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10_000, default_flow_style=False,
                     allow_unicode=True)
    # "on" is a boolean in YAML 1.1, so PyYAML quotes the key; GitHub reads both, people prefer bare.
    body = body.replace("\n'on':\n", "\non:\n", 1) if body.startswith(("name:",)) else body
    body = _NOTED_KEY.sub(lambda m: _comment(m, ":"), body)
    body = _NOTED_VALUE.sub(lambda m: _comment(m, ""), body)
    if _MARK in body:
        raise ValueError("a noted scalar was not written plain (quoted or folded): its note would be lost")
    return header + body
