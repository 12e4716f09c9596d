"""Stand-ins for prometheus_client's `Counter` and `Histogram` where it is not installed.

The guard's metrics are read by the service's /metrics (the `service` extra brings the client) or
by an app that installs the client itself; without it nothing could read them, so nothing is
counted.
"""

from __future__ import annotations

from collections.abc import Iterable


class Counter:
    """Counts nothing."""

    def __init__(self, name: str, documentation: str, labelnames: Iterable[str] = ()) -> None:
        self._name = name

    def labels(self, *values: str) -> Counter:
        return self

    def inc(self, amount: float = 1) -> None:
        """Nothing to count into."""


class Histogram:
    """Observes nothing."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Iterable[str] = (),
        buckets: Iterable[float] = (),
    ) -> None:
        self._name = name

    def labels(self, *values: str) -> Histogram:
        return self

    def observe(self, amount: float) -> None:
        """Nothing to observe into."""
