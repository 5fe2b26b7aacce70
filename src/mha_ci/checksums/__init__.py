"""Code-object checksums: every kernel variant the configs can select, compiled ahead of time.

Two halves, split by where they run (docs/architecture.md, data flow):
- inside a toolchain environment (payload side, stdlib + triton + mha only):
  `variants` (what to compile), `compile` (how, in a process pool, with a cache),
  `resources` (registers / spills read from the code object itself);
- on the orchestrating side (no torch, no triton): `diff` and `explain` compare a fresh
  record file with the stored one, `job` runs the payload through an executor and gates.
`records` (the stored format, mha-ci.codeobj/1) is shared by both and is stdlib only.
"""
