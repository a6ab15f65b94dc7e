"""``worx.experts`` into a running :class:`~experts.serving.ExpertServer` (hot registration).

The table follower of :mod:`topology.table_follower` (whole topic, from the beginning, no
group) feeding :class:`experts.hot.HotRegistry`: registrations are verified and swapped
in, tombstones remove, undecodable events become refusals.
"""

from __future__ import annotations

from collections.abc import Callable

from experts.hot import HotRegistry
from experts.records import ExpertRegistration
from experts.serving import ExpertServer, RegisterOutcome
from topology.table_follower import TableFollower


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
            self.registry.register,
            ExpertRegistration,
            on_tombstone=self.registry.remove,
            on_bad=self.registry.refuse,
        )

    @property
    def outcomes(self) -> list[RegisterOutcome]:
        return self.registry.outcomes
