"""Retention guide: a policy in the settings, and a prune on demand (a dry run first).

Needs only BRIDGE_EXAMPLE_DB (a ledger file; no server is called). Leaves three finished runs
of "acme" in it, for the guide's CLI commands.
"""

# --8<-- [start:setup]
import os
import secrets

import anyio

from bridge import Bridge, BridgeSettings, OuterStatus, RetentionPolicy

LEDGER = os.environ["BRIDGE_EXAMPLE_DB"]  # a SQLite file path, or a postgresql:// URL
# --8<-- [end:setup]


async def finished_runs(count: int) -> list[str]:
    async with Bridge.open(BridgeSettings(ledger_url=LEDGER, principals=["acme"])) as bridge:
        refs = []
        for _ in range(count):
            run = await bridge.register_served_run(
                "acme",
                response_id="resp_" + secrets.token_hex(8),
                session_id="hsess" + secrets.token_hex(8),
                harness_id="chrn_example",
            )
            await run.record_status(OuterStatus.COMPLETED)
            refs.append(run.ref)
        return refs


async def main() -> None:
    refs = await finished_runs(3)
    # --8<-- [start:settings]
    settings = BridgeSettings(
        ledger_url=LEDGER,
        principals=["acme", "globex"],
        retention={
            "acme": RetentionPolicy(max_age_days=30),
            "globex": RetentionPolicy(keep_runs=500),
        },
    )
    async with Bridge.open(settings) as bridge:
        # The scheduled pruner runs now and every hour; a prune on demand, same rules:
        report = await bridge.prune("acme", dry_run=True)  # removes nothing: what would go
        print(report.runs, "runs would go;", report.unresolved, "kept unresolved")
        # --8<-- [end:settings]
        assert report.runs == 0, report  # one day's minimum age: today's runs stay
        # --8<-- [start:now]
        everything_finished = RetentionPolicy(max_age_days=0, min_age_days=0)
        report = await bridge.prune("acme", policy=everything_finished, dry_run=True)
        print(report.runs, "finished runs would go:", report.sample)
        # --8<-- [end:now]
        assert report.runs == 3 and sorted(report.sample) == sorted(refs), report


anyio.run(main)
