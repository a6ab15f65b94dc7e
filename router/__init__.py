"""Embedding, domain routing, online discovery, drift detectors and the inference gate."""
