"""Dashboard assets (HTML and JS, no external code), shipped as package data."""
