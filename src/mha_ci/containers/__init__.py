"""Toolchain container images: which image a (toolchain, platform) needs, its content-derived
tag, the build context (Dockerfile + lock + host-downloaded wheelhouse) and the build itself.

Used by the docker executor (build on demand) and by `mha-ci containers build`
(`make containers`). The orchestrating side only: never imported by payloads.
"""
