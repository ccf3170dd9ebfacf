"""Recover a run whose process died after the POST but before `response.created` arrived
(docs/guides/resume-after-sse-loss.md, section 3).

A first process sends a streaming `POST /v1/responses` and is killed with SIGKILL as soon as
the server has accepted it, before reading a single event: the ledger holds the run and its
`Idempotency-Key`, but no response id, so the run cannot be followed. This process sends the
same request again with the recorded key and checks that it gets the first request's response
(the same run in the ledger, one response however often the key is sent) and follows it to
the end.

    python docs/examples/resume_before_response_created.py

Environment: BRIDGE_EXAMPLE_UHP_URL, BRIDGE_EXAMPLE_UHP_TOKEN, BRIDGE_EXAMPLE_DB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import anyio

from bridge import Ledger
from bridge.uhp import ResponseNotFollowable, UhpClient

base_url = os.environ["BRIDGE_EXAMPLE_UHP_URL"]
token = os.environ["BRIDGE_EXAMPLE_UHP_TOKEN"]
ledger = Ledger.open(os.environ["BRIDGE_EXAMPLE_DB"])
prompt = "count slowly to 3"


async def first_process() -> None:
    async with UhpClient(base_url, token=token, ledger=ledger, principal="acme") as uhp:
        await uhp.discover()
        follower = await uhp.stream_response(prompt, harness_id="chrn_reports")
        print("run", follower.run_ref, flush=True)  # the POST was accepted; no event read
        await anyio.sleep_forever()  # until killed


async def resend(run_ref: str) -> tuple[str, str]:
    async with UhpClient(base_url, token=token, ledger=ledger, principal="acme") as uhp:
        await uhp.discover()
        try:
            await uhp.follow(run_ref)
        except ResponseNotFollowable:
            print("the run has no response id yet: sending the request again with its key")
        else:
            sys.exit("a run without a response id was followable")
        # --8<-- [start:resend]
        unanswered = await uhp.unanswered_posts()  # POST sent (or about to be), no response id
        post = next(p for p in unanswered if p.run_ref == run_ref)  # body + key recorded
        run = await post.repost()  # the same body, the same Idempotency-Key
        # --8<-- [end:resend]
        if run.run_ref != run_ref:
            sys.exit(f"the resent request opened a new run {run.run_ref}")
        again = await uhp.repost(run_ref)  # as often as needed: still the first response
        return run.response.id, again.response.id


if __name__ == "__main__":
    if sys.argv[1:] == ["--first-process"]:
        anyio.run(first_process)
    first = subprocess.Popen(
        [sys.executable, __file__, "--first-process"], stdout=subprocess.PIPE, text=True
    )
    assert first.stdout is not None
    announced = first.stdout.readline().split()  # "run <run_ref>", or nothing if it failed
    first.send_signal(signal.SIGKILL)
    first.wait()
    if announced[:1] != ["run"]:
        sys.exit("the first process failed before its POST was accepted")
    run_ref = announced[1]
    if ledger.for_principal("acme").reads.get_run(run_ref).response_id is not None:
        sys.exit("the first process recorded a response id: it died too late for this example")
    streamed, blocking = anyio.run(resend, run_ref)
    if streamed != blocking:
        sys.exit(f"one Idempotency-Key gave two responses: {streamed} and {blocking}")
    run = ledger.for_principal("acme").reads.get_run(run_ref)
    if (run.response_id, run.status) != (streamed, "completed"):
        sys.exit(f"the ledger holds {run.response_id} {run.status}, not {streamed} completed")
    print(f"run {run_ref}: one response ({streamed}), completed, for one Idempotency-Key")
    ledger.close()
