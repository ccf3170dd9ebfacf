"""Bridged ``tools/call``: the write-ahead requester, how replies and failures are recorded,
unknown outcomes (admission checks, retries), and replays of an operation id."""
