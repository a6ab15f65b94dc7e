"""``worx.experts`` into a running :class:`~experts.serving.ExpertServer` (hot registration).

The table follower of :mod:`topology.runtimes.table_follower` (whole topic, from the beginning, no
group) feeding :class:`experts.hot.HotRegistry`: registrations are verified and swapped
in, tombstones remove, undecodable events become refusals. A refused registration (the
server's verification said no), an undecodable event and a tombstone for an expert the
server does not hold also go to the dead-letter topic, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable

from experts.hot import HotRegistry
from experts.records import ExpertRegistration
from experts.serving import ExpertServer, RegisterOutcome
from topology.runtimes.table_follower import TableFollower
from worx.records import RecordError


class RegistrationFollower(TableFollower):
    """Consume ``topic`` into ``server.register`` on a background thread.

    Parameters
    ----------
    server : the server every registration goes to.
    conf : librdkafka settings (``bootstrap.servers`` and any security settings).
    topic : the experts topic (``Topics(prefix).experts``).
    on_outcome : called with every :class:`RegisterOutcome` (tests and benches await on it).
    """

    def __init__(
        self,
        server: ExpertServer,
        conf: dict,
        topic: str,
        on_outcome: Callable[[RegisterOutcome], None] | None = None,
    ) -> None:
        self.server = server
        self.registry = HotRegistry(server, on_outcome)
        super().__init__(
            conf,
            topic,
            self._register,
            ExpertRegistration,
            on_tombstone=self._remove,
            on_bad=self._bad,
            name="serve-experts",
        )

    def _register(self, registration: ExpertRegistration) -> RegisterOutcome:
        outcome = self.registry.register(registration)
        if outcome.status == "refused":  # the table is unchanged; the record is dead-lettered
            refusal = outcome.refusal or {}
            raise _Refused(
                f"registration of {outcome.expert_id} refused: {refusal.get('detail', '')}",
                reason=str(refusal.get("reason", "bad_registration")),
            )
        return outcome

    def _bad(self, key: bytes | None, value: bytes, error: Exception) -> None:
        if not isinstance(error, _Refused):  # (the server reported its own refusal)
            self.registry.refuse(key, value, error)

    def _remove(self, key: bytes | None) -> bool:
        expert_id = key.decode("utf-8", "replace") if key else ""
        if expert_id not in self.server.table:
            return False  # a tombstone for an expert this server never held
        self.registry.remove(key)
        return True

    @property
    def outcomes(self) -> list[RegisterOutcome]:
        return self.registry.outcomes


class _Refused(RecordError):
    """A registration the server refused (already in ``server.refusals``)."""
