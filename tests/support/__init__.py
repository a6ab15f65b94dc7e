"""Helpers shared by tests of several folders: topic readers and producers, corpus texts."""
