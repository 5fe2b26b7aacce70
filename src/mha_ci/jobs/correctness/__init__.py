"""The correctness job: the kernel tests of tests/mha, sharded, in a pinned toolchain."""
