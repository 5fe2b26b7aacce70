"""Executors run a job payload inside a pinned toolchain: venv (default), docker, host."""
