"""Deterministic YAML text for generated files.

PyYAML with insertion order kept (the builders choose a readable order: name, on, permissions,
jobs), multi-line strings as literal blocks (shell scripts stay readable in review), and no line
folding (a folded `run:` line would change what the shell sees).
"""
from __future__ import annotations

import yaml


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False):  # lists indented under keys
        return super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(data: object, header: str = "") -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10_000, default_flow_style=False,
                     allow_unicode=True)
    # "on" is a boolean in YAML 1.1, so PyYAML quotes the key; GitHub reads both, people prefer bare.
    body = body.replace("\n'on':\n", "\non:\n", 1) if body.startswith(("name:",)) else body
    return header + body
