"""Hypothesis settings shared by the ledger's property tests."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def ledger_property_settings(examples: int) -> settings:
    """Each example writes under fresh runs or principals in the same database, so a
    function-scoped ledger fixture is fine."""
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
