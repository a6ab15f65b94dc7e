"""Trunk loader, expert modules, the mixture, the write-once expert store."""
