"""`mha-ci tune`: search a config bucket's knobs, pruned on the CPU, timed on a GPU, proposed on a branch.

Modules: space (the candidates), rules (the kernel's guards, loaded by path), prune (AOT compile
and resource gate), outdir (the out folder, written incrementally), timing (the GPU phase),
select (the best candidate), proposal (the branch and reports). docs/tune.md describes the loop.
"""
