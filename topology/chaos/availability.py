"""Serve's outages as the prober saw them, and which of them followed a fault of serve
itself (a SIGKILL or SIGSTOP of its process) rather than a fault elsewhere in the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Outage:
    start_s: float  # the first failed probe
    end_s: float  # the next answered one (or the last failed one, if none came)
    failed: int  # probes failed in it

    @property
    def seconds(self) -> float:
        return round(self.end_s - self.start_s, 1)


def outages(outcomes: Sequence[tuple[float, bool]]) -> list[Outage]:
    """Runs of failed probes (``outcomes``: (time, answered) in time order).

    >>> [(o.start_s, o.end_s, o.failed) for o in outages([(0, True), (1, False), (2, False),
    ...                                                    (3, True), (4, False)])]
    [(1, 3, 2), (4, 4, 1)]
    """
    found, start, failed, last = [], None, 0, None
    for at, answered in outcomes:
        if not answered:
            start = at if start is None else start
            failed, last = failed + 1, at
        elif start is not None:
            found.append(Outage(start, at, failed))
            start, failed = None, 0
    if start is not None:
        found.append(Outage(start, last, failed))
    return found


def after_own_faults(
    found: Sequence[Outage], fault_times: Sequence[float], within_s: float
) -> tuple[list[Outage], list[Outage]]:
    """``found`` split into the outages that began within ``within_s`` after one of serve's
    own faults (``fault_times``, on the outcomes' clock) and the others.

    >>> own, other = after_own_faults([Outage(10, 20, 9), Outage(50, 52, 2)], [8.5], 6.0)
    >>> [o.start_s for o in own], [o.start_s for o in other]
    ([10], [50])
    """
    own, other = [], []
    for outage in found:
        hit = any(0 <= outage.start_s - at <= within_s for at in fault_times)
        (own if hit else other).append(outage)
    return own, other
