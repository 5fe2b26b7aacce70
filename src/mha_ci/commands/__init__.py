"""One module per `mha-ci` subcommand; each defines register(subparsers) setting `handler`."""
