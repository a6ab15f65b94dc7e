"""Connectors that bring text in, validation, normalisation and dead letters."""
