"""Concurrent writers on one run keep its event sequence gapless and duplicate-free."""

from __future__ import annotations

import multiprocessing
import threading

from bridge._ledger.store import Ledger
from tests.support.builders import new_run
from tests.support.writers import EVENTS_PER_ITERATION, write_events

ITERATIONS = 30


def _assert_gapless(ledger: Ledger, run_ref: str, writers: int) -> None:
    tenant = ledger.for_principal("acme")
    seqs = [e.seq for e in tenant.reads.events(run_ref)]
    expected = 1 + writers * ITERATIONS * EVENTS_PER_ITERATION  # + run.registered
    assert seqs == list(range(1, expected + 1))
    probes = [e.detail for e in tenant.reads.events(run_ref) if e.type == "anomaly"]
    assert len(probes) == writers * ITERATIONS == len(set(probes))


def test_two_threads_on_one_run(ledger: Ledger, db_url: str) -> None:
    run = new_run(ledger.for_principal("acme"))
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            write_events(db_url, run.ref, ITERATIONS, name)
        except BaseException as exc:  # surfaced to the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    _assert_gapless(ledger, run.ref, writers=2)


def test_two_processes_on_one_run(ledger: Ledger, db_url: str) -> None:
    run = new_run(ledger.for_principal("acme"))
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=write_events, args=(db_url, run.ref, ITERATIONS, f"p{i}"))
        for i in range(2)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0, 0]
    _assert_gapless(ledger, run.ref, writers=2)
