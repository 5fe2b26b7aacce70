"""mha-ci checksums (placeholder until its owner lands it)."""
from mha_ci.errors import ConfigError


def register(sub):
    p = sub.add_parser("checksums", help="(not yet implemented)")
    p.set_defaults(handler=_handler)


def _handler(args):
    raise ConfigError("mha-ci checksums is not implemented yet")
