"""``bridge prune``, ``export``, ``import`` and ``db vacuum`` on real SQLite ledger files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bridge._ledger.reads.views import TaskObservation
from bridge._ledger.store import Ledger
from bridge._lifecycle import OuterStatus, TaskStatus
from bridge.cli._app import app
from tests.conftest import FakeClock
from tests.support.builders import new_run, new_task

PRINCIPAL = "acme"
LONG_AGO_MS = 1_600_000_000_000  # 2020: older than any --older-than-days these tests give


def cli(db: Path, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(
        app, ["--db", str(db), "--principal", PRINCIPAL, *args], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def populate(db: Path, finished: int) -> tuple[list[str], str, list[str]]:
    """``finished`` completed runs with a completed task each, and one open run, long ago."""
    ledger = Ledger.open(db, clock=FakeClock(LONG_AGO_MS))
    try:
        tenant = ledger.for_principal(PRINCIPAL)
        done, raw_ids = [], []
        for i in range(finished):
            run = new_run(tenant)
            raw = f"raw-task-id-{i}-never-printed"
            task = new_task(tenant, run.ref, task_id=raw)
            tenant.tasks.observe_task(
                task.ref,
                TaskObservation(
                    TaskStatus.COMPLETED,
                    result={"content": [{"type": "text", "text": f"{raw} finished"}]},
                ),
            )
            tenant.runs.observe_outer(run.ref, OuterStatus.COMPLETED)
            done.append(run.ref)
            raw_ids.append(raw)
        open_run = new_run(tenant).ref
        return done, open_run, raw_ids
    finally:
        ledger.close()


def test_prune_dry_run_then_archive_then_import(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    done, open_run, raw_ids = populate(db, 7)
    dry = cli(db, "prune", "--older-than-days", "30", "--dry-run", "--json")
    assert dry["dry_run"] is True and dry["runs"] == 7
    assert open_run not in dry["sample"]  # type: ignore[operator]

    archive = tmp_path / "acme.jsonl.gz"
    removed = cli(
        db, "prune", "--older-than-days", "30", "--batch", "3", "--archive", str(archive), "--json"
    )
    assert removed["runs"] == 7 and removed["batches"] == 3
    runs = cli(db, "runs", "--json")["runs"]
    assert [r["run"]["run_ref"] for r in runs] == [open_run]  # type: ignore[index,union-attr]
    assert not any(raw.encode() in archive.read_bytes() for raw in raw_ids)

    restored = tmp_path / "restored.db"
    CliRunner().invoke(app, ["--db", str(restored), "db", "upgrade"])
    report = cli(restored, "import", str(archive), "--json")
    assert report["runs"] == 7 and report["skipped"] == 0
    for ref in done:
        shown = cli(restored, "show", ref, "--json")
        assert json.dumps(shown).count("tk_") >= 1
        assert cli(restored, "timeline", ref, "--json")
        events = CliRunner().invoke(
            app, ["--db", str(restored), "--principal", PRINCIPAL, "events", ref, "--json"]
        )
        assert events.exit_code == 0 and json.loads(events.stdout)
        assert not any(raw in events.stdout for raw in raw_ids)


def test_export_writes_without_removing(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    populate(db, 3)
    archive = tmp_path / "export.jsonl.gz"
    report = cli(db, "export", str(archive), "--keep", "1", "--json")
    assert report["runs"] == 2 and archive.stat().st_size == report["archived_bytes"]
    assert len(cli(db, "runs", "--json")["runs"]) == 4  # type: ignore[arg-type]


def test_prune_needs_a_bound_and_import_refuses_another_principal(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    populate(db, 2)
    result = CliRunner().invoke(app, ["--db", str(db), "--principal", PRINCIPAL, "prune"])
    assert result.exit_code == 1 and "--older-than-days" in result.output
    archive = tmp_path / "a.jsonl.gz"
    cli(db, "export", str(archive), "--older-than-days", "1", "--json")
    other = CliRunner().invoke(
        app, ["--db", str(db), "--principal", "globex", "import", str(archive)]
    )
    assert other.exit_code == 1 and "another principal" in other.output


def test_db_vacuum_returns_free_pages(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    populate(db, 40)
    cli(db, "prune", "--older-than-days", "30", "--json")
    result = CliRunner().invoke(app, ["--db", str(db), "db", "vacuum"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "free pages returned" in result.output
    full = CliRunner().invoke(app, ["--db", str(db), "db", "vacuum", "--full"])
    assert full.exit_code == 0 and "rebuilt" in full.output
