"""mha-ci: plans and runs the jobs that guard the mha kernels (see DESIGN.md for the data flow)."""

__version__ = "0.1.0"
