"""`mha-ci perf bisect`: the first commit between a good and a bad one that moved a shape.

First on the CPU: each commit's code objects for exactly the kernels the shapes launch, compiled
ahead of time (the tune compile payload, through the checksums compile cache); commits whose code
objects equal their predecessor's are one build, since they cannot differ in kernel time. Then on
the GPU: a binary search over the distinct builds, each step the build against `good`, taking
turns shape by shape (`perf measure --against`'s method), judged with its threshold. Every result
is stored in the out folder as soon as it is known, so a rerun resumes. docs/bisect.md.

    commits   the first-parent commit list good..bad and the git facts the report shows
    code      the shapes' compile problems and the code objects of one commit
    search    the binary search, a pure function over an injected measurement
    state     the resume file (bisect.json)
    gpu       one search step measured on the GPU
    session   the two stages put together
    report    text and markdown
"""
