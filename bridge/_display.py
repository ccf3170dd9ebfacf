"""How an attention item reads to a person: its summary and next step, worded from the facts
the ledger records (:class:`~bridge._ledger.reads.views.AttentionFact`), for
:meth:`bridge.Bridge.attention`, and so for the CLI and the console alike."""

from __future__ import annotations

from bridge._ledger.reads.views import AttentionFact, AttentionItem

_SHARED = [name for name in AttentionItem.__dataclass_fields__ if hasattr(AttentionFact, name)]


def worded(fact: AttentionFact) -> AttentionItem:
    """The item as a person reads it: the fact, with its summary and next step."""
    summary, next_step = _words(fact)
    shared = {name: getattr(fact, name) for name in _SHARED}
    return AttentionItem(**shared, summary=summary, next_step=next_step)


def _words(fact: AttentionFact) -> tuple[str, str]:
    where, ref = f"{fact.server}.{fact.tool}", fact.ref
    match fact.kind:
        case "input_waiting" | "input_overdue":
            accept = " ".join(f"--accept {name}=…" for name in fact.fields) or "--content '{…}'"
            return (
                f"{where} asks ({fact.method}): {fact.question or '-'}",
                f"answer it: bridge answer {fact.task_ref or fact.op_ref} {ref} {accept}"
                " (or --decline)",
            )
        case "unknown_outcome":
            return (
                f"{where}: {fact.reason or 'no reply'}",
                f"find out whether the server ran it, then: bridge resolve {ref} --ran | "
                "--never-ran (never resent until then)",
            )
        case "lost_task":
            detail = f": {fact.detail}" if fact.detail else ""
            return (
                f"{where} lost ({fact.reason}{detail}); its outcome is unknown",
                "check on the server whether the work happened, then acknowledge: "
                f"bridge ack {ref}",
            )
        case "anomaly":
            return (
                f"{fact.reason}: {fact.detail}",
                f"read it (bridge show {fact.run_ref}), then: bridge ack {ref}",
            )
    return (
        "served run still in_progress; nothing recorded about it since",
        f"if its harness is gone: bridge close-run {ref} --status failed --reason '…' (its tasks"
        " are left alone)",
    )
