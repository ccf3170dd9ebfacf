"""What a user needs to try the bridge and its guides without an LLM or a server of their own.

* :mod:`bridge.testing.server` — a small MCP task server on the official SDK (extra
  ``[serve]``): ``generate_report`` answers with a task handle (MCP Tasks extension) that
  completes after a few seconds, ``echo`` answers inline; optional bearer token.
  ``python -m bridge.testing.server --port 8701 [--token T]``.
* :mod:`bridge.testing.langgraph` — :class:`~bridge.testing.langgraph.ScriptedChatModel`, a
  LangChain chat model that calls a scripted list of tools (extra ``[langgraph]``).
* :mod:`bridge.testing.pydantic_ai` — :func:`~bridge.testing.pydantic_ai.scripted_model`, a
  pydantic-ai model that calls one tool and reports its result (extra ``[pydantic-ai]``).

The OpenAI Agents SDK ships its own (``agents.testing.ScriptedModel``). Nothing here is
imported by :mod:`bridge` itself: each module loads its framework only when imported.
"""
