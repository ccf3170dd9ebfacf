"""Resume a UHP run after its follower was killed (docs/guides/resume-after-sse-loss.md).

A first process starts a run on the example report harness, follows its stream and is killed
with SIGKILL right after the first nested MCP task is created. This process then resumes the
run from the ledger alone and checks that it continues exactly after the last event the dead
process delivered, up to the terminal event, with nothing skipped and nothing repeated.

    python docs/examples/resume_after_crash.py

Environment: BRIDGE_EXAMPLE_UHP_URL, BRIDGE_EXAMPLE_UHP_TOKEN (a UHP server serving the harness
chrn_reports, whose MCP server "reports" offers generate_report), BRIDGE_EXAMPLE_DB (ledger).
"""

from __future__ import annotations

# --8<-- [start:imports]
import os
import signal
import subprocess
import sys

import anyio

from bridge import FollowConfig, Ledger
from bridge.uhp import StreamEvent, UhpClient
# --8<-- [end:imports]

base_url = os.environ["BRIDGE_EXAMPLE_UHP_URL"]
token = os.environ["BRIDGE_EXAMPLE_UHP_TOKEN"]
ledger_path = os.environ["BRIDGE_EXAMPLE_DB"]
prompt = "\n".join(
    [
        'call reports.generate_report {"quarter": "Q3", "sections": 2,'
        ' "seconds_per_section": 0.5} policy=wait',
        "reply with the word done",
    ]
)


def handle(event: StreamEvent) -> None:
    """The first process renders events, and dies once the first nested task exists."""
    print("delivered", event.sequence_number, event.type, flush=True)
    if event.type == "bridge.mcp_task.created":
        os.kill(os.getpid(), signal.SIGKILL)  # a crash: no cleanup, no checkpoint on exit


async def first_process() -> None:
    # --8<-- [start:start]
    ledger = Ledger.open(ledger_path)  # or postgresql://…
    async with UhpClient(
        base_url,
        token=token,
        ledger=ledger,
        principal="acme",
        follow=FollowConfig(checkpoint_interval_ms=0),  # commit every delivered sequence
    ) as uhp:
        await uhp.discover()  # GET /v1/uhp: settles the UHP-Version this server speaks
        follower = await uhp.stream_response(prompt, harness_id="chrn_reports")
        print("run", follower.run_ref, flush=True)  # keep this: it names the run in the ledger
        async with follower:
            async for event in follower:
                handle(event)
    # --8<-- [end:start]
    sys.exit("the first process was meant to be killed before the run ended")


async def resume(run_ref: str) -> list[StreamEvent]:
    ledger = Ledger.open(ledger_path)
    received: list[StreamEvent] = []
    # --8<-- [start:resume]
    async with UhpClient(base_url, token=token, ledger=ledger, principal="acme") as uhp:
        await uhp.discover()
        follower = await uhp.follow(run_ref)  # from the ledger: ids + last sequence
        async for event in follower:  # continues after the last checkpoint
            received.append(event)
    # --8<-- [end:resume]
    ledger.close()
    return received


def inspect(run_ref: str, last_delivered: int) -> list[str]:
    ledger = Ledger.open(ledger_path)
    # --8<-- [start:inspect]
    for e in ledger.for_principal("acme").reads.events(run_ref):
        print(e.seq, e.type, getattr(e, "reason", ""), getattr(e, "kind", ""))
    # --8<-- [end:inspect]
    types = [e.type for e in ledger.for_principal("acme").reads.events(run_ref)]
    resumed = [
        e for e in ledger.for_principal("acme").reads.events(run_ref) if e.type == "outer.resumed"
    ]
    ledger.close()
    if [(e.mode, e.after_sequence) for e in resumed] != [("last_event_id", last_delivered)]:
        sys.exit(f"expected one resume by Last-Event-ID after {last_delivered}, got {resumed}")
    return types


def crash_first_process() -> tuple[str, int]:
    """Run the first process; return its run reference and the last sequence it delivered."""
    first = subprocess.run(
        [sys.executable, __file__, "--first-process"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if first.returncode != -signal.SIGKILL:
        sys.exit(f"first process exited {first.returncode}:\n{first.stdout}\n{first.stderr}")
    lines = [line.split() for line in first.stdout.splitlines()]
    run_ref = next(words[1] for words in lines if words[0] == "run")
    delivered = [int(words[1]) for words in lines if words[0] == "delivered"]
    print(f"first process killed after delivering sequences {delivered[0]}..{delivered[-1]}")
    return run_ref, delivered[-1]


if __name__ == "__main__":
    if sys.argv[1:] == ["--first-process"]:
        anyio.run(first_process)
    run_ref, last_delivered = crash_first_process()
    events = anyio.run(resume, run_ref)
    sequences = [e.sequence_number for e in events]
    expected = list(range(last_delivered + 1, last_delivered + 1 + len(events)))
    if sequences != expected:
        sys.exit(f"resumed sequences {sequences}, expected {expected}")
    if events[-1].type != "response.completed":
        sys.exit(f"the resumed stream ended with {events[-1].type}")
    types = inspect(run_ref, last_delivered)
    if types[-1] != "outer.terminal":
        sys.exit(f"the run's log ends with {types[-1]}, not outer.terminal")
    print(f"resumed after sequence {last_delivered}: {len(events)} events, none twice, none lost")
