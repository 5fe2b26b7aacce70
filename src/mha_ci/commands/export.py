"""mha-ci export (placeholder until its owner lands it)."""
from mha_ci.errors import ConfigError


def register(sub):
    p = sub.add_parser("export", help="(not yet implemented)")
    p.set_defaults(handler=_handler)


def _handler(args):
    raise ConfigError("mha-ci export is not implemented yet")
