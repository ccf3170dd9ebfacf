"""report_harness: a small native UHP harness server (conformance class Core, UHP 2026-08-11,
2026-09-12, 2026-09-28 and 2026-10-04 from one code path; request fields it does not act on
are named in ``metadata.ignored_fields``) that runs a deterministic scripted agent and makes
its MCP tool calls through the bridge.

    python -m harness_examples.report_harness --host 127.0.0.1 --port 8800 \
        --config harness.json --db harness.db

Serves ``GET /v1/uhp`` (no credential), ``GET /v1/harnesses[/{id}[/models]]``,
``GET /v1/models``, ``POST /v1/responses`` (blocking, ``stream``, ``background``;
``previous_response_id``; ``Idempotency-Key``), ``GET /v1/responses/{id}`` (``?stream=true`` or
``Accept: text/event-stream`` replays the persisted event log, resuming after ``Last-Event-ID``),
``GET /v1/responses/{id}/input_items``, ``POST /v1/responses/{id}/cancel``,
``DELETE /v1/responses/{id}`` (not cancelled), ``GET /v1/sessions/{id}``,
``DELETE /v1/sessions/{id}`` (what runs in it is cancelled first), ``POST /v1/sessions/{id}/cancel``
and one vendor extension,
``POST /v1/responses/{id}/mcp_inputs`` (answer a ``bridge.mcp_task.input_required`` event:
``{"task_ref", "input_ref", "response"}``; a ``bridge.mcp_call.input_required`` one, MRTR:
``{"op_ref", "input_ref", "response"}``).

The scripted agent (no model, no network except the configured MCP servers)
---------------------------------------------------------------------------
The task's input text (all ``input_text`` parts, joined by newlines) is read line by line:

* ``call SERVER.TOOL {json args} [policy=wait|detach|ask|fail_recoverable]`` — one tool call
  through ``bridge.Run.call_tool`` on the harness's MCP server ``SERVER`` (its
  ``mcpServers`` entry), with ``operation_id = "<response id>:step-<n>"`` so that a resumed run
  never repeats a call. Without ``policy=`` the bridge's default (``wait``) applies. The call is
  streamed as a ``function_call`` item, its outcome as a ``function_call_output`` item (JSON:
  ``{"outcome": "result" | "task_settled" | "task_pending" | "task_lost" |
  "step_failed_recoverably" | "rejected" | "unknown_outcome" | "server_unreachable" |
  "skipped" | "error", ...}``). A disabled server is never contacted (outcome ``skipped``);
  an unreachable one does not fail the task: the outcome is ``server_unreachable`` and a
  ``report_harness.mcp_server.unreachable`` event is streamed.
* Every other line is prose. After the tool calls the agent answers with one ``message`` item:

  - ``reply with the word X`` -> ``X``; ``reply with exactly: TEXT`` -> ``TEXT``;
  - ``count slowly to N`` / ``count slowly from A to N`` -> the numbers, one per line, with
    ``count_interval_seconds`` between them (cancellable at any point, partial output kept);
  - ``repeat your last answer`` -> the previous answer of the session (session context);
  - no prose -> one line per tool call with its outcome;
  - anything else -> ``Scripted agent received N word(s): ...``.

``max_step`` (request or harness ``maxStep``) bounds the number of tool calls and
``timeout_seconds`` the wall-clock time; hitting either ends the task ``incomplete``.

The bridge's events for the run (``Run.subscribe``) are forwarded into the response's own
stream as ``bridge.*`` vendor events (``bridge.uhp.to_uhp_event``) with the harness's
own sequence numbers, and the final response's ``metadata`` carries
``bridge.uhp.nested_tasks_summary`` (read through ``Bridge.read``).

Durability
----------
Responses, sessions (chains of responses), idempotency keys and event logs live in the
``--db`` database (SQLite path or ``postgresql://`` URL) in ``harness_*`` tables next to the
bridge's ledger. On start, responses left ``in_progress`` by an earlier process are RESUMED:
a ``report_harness.resumed`` event is appended, items the crash left open are closed as
``incomplete``, and the scripted plan continues at its persisted step (the interrupted step is
re-run as a new item; its tool call is replayed by operation id, not sent again). A response
whose harness is no longer configured is finished ``failed`` (``harness_error``) instead.
"""
