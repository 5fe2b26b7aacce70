"""mha-ci: plans and runs the jobs that guard the mha kernels (see docs/architecture.md for the data flow)."""

__version__ = "0.1.0"
