"""Configuration of the route and discover stages (section ``[router]``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RouterConfig:
    embed_dim: int = 256  # dimension of the hashed TF-IDF embedding

    def validate(self) -> None:
        if self.embed_dim < 8:
            raise ValueError("router.embed_dim must be >= 8")
