"""What `worx serve` runs around :class:`experts.serving.ExpertServer`.

- ``http_api``: the serving HTTP API (aiohttp): /health, /experts, /score, /generate;
- ``registration_follower``: ``worx.experts`` into the running server (hot registration).
"""
