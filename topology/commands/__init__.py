"""One module per `worx` subcommand; each defines ``register(subparsers)``."""
