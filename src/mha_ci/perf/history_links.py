"""Links from the history page to the commits it names.

The page is made offline, from a clone, so the repository's address is whatever the clone was
made from: `git remote get-url origin`, when that is a GitHub repository. Anything else (no
remote, another host, a local path) gives no template, and the page shows the hash as text
rather than a link that may lead nowhere.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from mha_ci.git import output_or_none

# https://github.com/o/r(.git), git@github.com:o/r(.git), ssh://git@github.com/o/r(.git)
_GITHUB = re.compile(r"^(?:https://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
                     r"(?P<owner>[A-Za-z0-9][A-Za-z0-9_.-]*)/(?P<name>[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def template_of_url(url: str) -> str | None:
    """'https://github.com/o/r/commit/{sha}' for a GitHub remote URL, else None."""
    found = _GITHUB.match(url.strip())
    if not found:
        return None
    return f"https://github.com/{found['owner']}/{found['name']}/commit/{{sha}}"


def commit_link_template(root: Path) -> str | None:
    """The template of the checkout's origin; None without a GitHub origin (or without git)."""
    url = output_or_none(root, "remote", "get-url", "origin")
    return template_of_url(url) if url is not None else None


def commit_html(sha: str, template: str | None, length: int = 12) -> str:
    """The short hash as a link to the commit, or as code where there is no template."""
    short = f"<code>{html.escape(sha[:length])}</code>"
    if not template:
        return short
    return f'<a href="{html.escape(template.format(sha=sha))}">{short}</a>'


def commit_markdown(sha: str, template: str | None, length: int = 12) -> str:
    short = f"`{sha[:length]}`"
    return f"[{short}]({template.format(sha=sha)})" if template else short
