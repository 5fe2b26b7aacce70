"""mha-ci export: files generated from pipelines/ for GitHub and the README.

  mha-ci export github [--out DIR] [--check]   .github/workflows/*.yml and .github/actionlint.yaml
  mha-ci export matrix --plan plan.json        $GITHUB_OUTPUT lines for the workflows' job matrices
  mha-ci export ci-guide [--write] [--check]   the README's CI guide (docs/ci-guide.md); alias: readme

`--check` exits 1 (a gate failed: the committed files are stale) and prints a unified diff.
"""
from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

from mha_ci.errors import ExitCode
from mha_ci.export import ci_guide, github, matrix
from mha_ci.files import write_atomic
from mha_ci.model.loader import load_pipeline


def register(sub) -> None:
    parser = sub.add_parser("export", help="generate the GitHub workflows, job matrices and the CI guide from pipelines/")
    targets = parser.add_subparsers(dest="target", required=True, parser_class=type(parser))

    gh = targets.add_parser("github", help="write .github/workflows/ and .github/actionlint.yaml")
    gh.add_argument("--out", type=Path, default=None, help="root to write under (default: the checkout root)")
    gh.add_argument("--check", action="store_true", help="write nothing; exit 1 with a diff when the files are stale")
    gh.set_defaults(handler=_github)

    mx = targets.add_parser("matrix", help="job matrices for $GITHUB_OUTPUT from `mha-ci plan --format json` output")
    mx.add_argument("--plan", type=Path, required=True, help="plan.json written by `mha-ci plan --format json`")
    mx.add_argument("--group-plan", nargs=2, metavar=("GROUP", "FILE"),
                    help="also write the plan's jobs of one matrix (cpu or gpu) to FILE: that workflow's gate plan")
    mx.set_defaults(handler=_matrix)

    for name in ("ci-guide", "readme"):
        guide = targets.add_parser(name, help="print the README's CI guide (markdown)")
        guide.add_argument("--write", action="store_true", help=f"also write {ci_guide.GUIDE_PATH}")
        guide.add_argument("--check", action="store_true", help=f"exit 1 with a diff when {ci_guide.GUIDE_PATH} is stale")
        guide.set_defaults(handler=_guide)


def _github(args) -> int:
    pipeline = load_pipeline(args.root)
    files = github.generate(pipeline)
    out_root = args.out or args.root
    if args.check:
        diff = github.stale(files, out_root)
        if diff:
            sys.stdout.write(diff)
            print("mha-ci: generated workflows are stale: run `mha-ci export github`", file=sys.stderr)
            return ExitCode.GATE_FAILED
        print(f"{len(files)} generated files up to date")
        return ExitCode.OK
    for path in github.write(files, out_root):
        print(f"wrote {path}")
    return ExitCode.OK


def _matrix(args) -> int:
    pipeline = load_pipeline(args.root)
    plan = matrix.read_plan(args.plan)
    sys.stdout.write(matrix.github_output(pipeline, plan))
    if args.group_plan:
        group, target = args.group_plan
        # The gate reads it as the list of jobs to judge: half a file must never be that list.
        write_atomic(Path(target), json.dumps(matrix.group_plan(pipeline, plan, group), indent=2) + "\n")
    return ExitCode.OK


def _guide(args) -> int:
    text = ci_guide.render(load_pipeline(args.root))
    target = Path(args.root) / ci_guide.GUIDE_PATH
    if args.check:
        current = target.read_text() if target.is_file() else ""
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(current.splitlines(keepends=True), text.splitlines(keepends=True),
                                                       fromfile=f"{ci_guide.GUIDE_PATH} (committed)",
                                                       tofile=f"{ci_guide.GUIDE_PATH} (from pipelines/)"))
            return ExitCode.GATE_FAILED
        return ExitCode.OK
    sys.stdout.write(text)
    if args.write:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return ExitCode.OK
