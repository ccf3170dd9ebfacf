"""The ``bridge`` operator CLI: read a ledger (runs, show, timeline, events) and act on it
through the :class:`bridge.Bridge` (recover, cancel-task, answer, db upgrade)."""

from bridge._extras import require_extra

require_extra("the operator CLI (bridge.cli)", "cli")


def main() -> None:
    """The ``bridge`` command (the console script's entry point)."""
    from bridge.cli._app import main as run_cli  # typer and rich load only for the command

    run_cli()
