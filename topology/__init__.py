"""Wiring only: topics, the embedded broker, stream runtimes and the `worx` command line."""
