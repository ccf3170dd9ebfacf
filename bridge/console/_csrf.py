"""Refusing cross-site POSTs: the session's CSRF token in every form, and the request's own
word about where it came from.

A browser says where a request was made (``Sec-Fetch-Site``, ``Origin``); a POST another site
made is refused before its form is even read, and any POST whose form lacks this session's
CSRF token is refused too (``SameSite=Strict`` on the cookie is a third line)."""

from __future__ import annotations

from starlette.requests import Request

SAME_SITE_FETCH = frozenset({"same-origin", "none"})  # "none": typed in, bookmarked


def own_origin(request: Request) -> str:
    """``scheme://host[:port]`` of the console as this request addressed it."""
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    return f"{request.url.scheme}://{host}"


def cross_origin_reason(request: Request) -> str | None:
    """Why this request looks made by another site (``None``: it does not)."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:  # a browser's own word, more precise than Origin
        if fetch_site in SAME_SITE_FETCH:
            return None
        return f"the browser says the request came from a {fetch_site} page"
    origin = request.headers.get("origin")
    if origin is not None and origin != own_origin(request):
        return "the request's Origin is not this console"
    return None
