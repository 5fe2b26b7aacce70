"""The H200 PR job's summary.md as HTML, near GitHub's rendering (Python-Markdown with tables,
fenced code and markdown inside <details>, which GitHub renders too), for a headless screenshot.
usage: python summary.py SUMMARY.md OUT.html   (with the `markdown` package; see shoot.sh)"""
import re
import sys

import markdown

text = open(sys.argv[1]).read()
# GitHub renders markdown inside <details>; Python-Markdown does where the tag says markdown="1".
text = re.sub(r"<details>", '<details markdown="1">', text)
body = markdown.markdown(text, extensions=["tables", "fenced_code", "md_in_html"])
css = ("body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:14px;line-height:1.5;"
       "max-width:1012px;margin:24px auto;color:#1f2328}code{background:#eff1f3;padding:.2em .4em;border-radius:6px;"
       "font-size:85%}pre{background:#f6f8fa;padding:16px;overflow:auto;border-radius:6px}pre code{background:none;"
       "padding:0}table{border-collapse:collapse;display:block;overflow:auto}td,th{border:1px solid #d1d9e0;"
       "padding:6px 13px}h1,h2{border-bottom:1px solid #d1d9e0;padding-bottom:.3em}")
open(sys.argv[2], "w").write(f"<!doctype html><meta charset=utf-8><style>{css}</style>{body}")
