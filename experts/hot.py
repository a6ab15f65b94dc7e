"""Hot registration: apply the events of the compacted ``worx.experts`` topic to a server.

The topic plus the store *is* the expert table: a serving process replays the whole topic
from the beginning on every start (the runtime that reads it is
:class:`topology.serve.registration_follower.RegistrationFollower`). Replayed registrations
are no-ops (same id, same sha256); a tombstone (null value) removes the expert from the
table; a record that does not decode is reported as a refusal and skipped. No event can
fail the server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from experts.records import ExpertRegistration
from experts.serving import ExpertServer, RegisterOutcome

log = logging.getLogger(__name__)


class HotRegistry:
    """Apply registrations, tombstones and undecodable events to ``server``.

    Parameters
    ----------
    server : ExpertServer
        Receives every registration.
    on_outcome : callable, optional
        Called with every :class:`RegisterOutcome` (tests and benches await on it).
    """

    def __init__(
        self,
        server: ExpertServer,
        on_outcome: Callable[[RegisterOutcome], None] | None = None,
    ) -> None:
        self.server = server
        self.on_outcome = on_outcome
        self.outcomes: list[RegisterOutcome] = []

    def register(self, registration: ExpertRegistration) -> RegisterOutcome:
        """A registration: verify and swap in (a replay is ``unchanged``)."""
        return self._done(self.server.register(registration))

    def remove(self, key: bytes | None) -> RegisterOutcome | None:
        """A tombstone of ``key``: the expert leaves the table (the store keeps it)."""
        if key is None:
            return None
        return self._done(self.server.unregister(key.decode("utf-8", "replace")))

    def refuse(self, key: bytes | None, value: bytes, error: Exception) -> None:
        """An event that is not a registration: reported as a refusal, skipped."""
        who = key.decode("utf-8", "replace") if key else "?"
        self.server.refusals.append(
            {"expert_id": who, "reason": "bad_registration", "detail": str(error)}
        )
        log.warning("undecodable registration for %s: %s", who, error)

    def _done(self, outcome: RegisterOutcome) -> RegisterOutcome:
        self.outcomes.append(outcome)
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        return outcome
