"""The console's HTML renderer: every page is built from :class:`markupsafe.Markup` snippets.

``html(template, *values)`` escapes every value it puts into the template (``Markup.format``);
only other ``Markup`` (already rendered, hence already escaped) passes through as is. There is
no other way to put text into a page: nothing is concatenated unescaped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from markupsafe import Markup, escape

__all__ = ["Markup", "attrs", "escape", "html", "join"]


def html(template: str, *args: Any, **kwargs: Any) -> Markup:
    """``template`` (trusted, written in this package) with each value escaped into it."""
    return Markup(template).format(*args, **kwargs)


def join(parts: Iterable[Markup | str], separator: str = "") -> Markup:
    """Rendered parts one after the other (plain strings among them are escaped)."""
    return Markup(separator).join(escape(part) for part in parts)


def attrs(**values: str | int | bool | None) -> Markup:
    """HTML attributes (``class_`` for ``class``, ``data_x`` for ``data-x``); ``True`` writes a
    bare attribute, ``False`` or ``None`` none."""
    parts: list[Markup] = []
    for key, value in values.items():
        name = key.rstrip("_").replace("_", "-")
        if value is True:
            parts.append(html(" {}", name))
        elif value is not None and value is not False:
            parts.append(html(' {}="{}"', name, str(value)))
    return join(parts)
