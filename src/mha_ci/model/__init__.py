"""The validated pipeline model: pipelines/*.yaml -> frozen dataclasses (see types.py)."""
