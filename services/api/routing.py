"""The route class of every API router: a request's text is checked before FastAPI reads it,
and a path with a literal segment is never taken by a route with a parameter in its place.

- A body is JSON in UTF-8: FastAPI hands any other Content-Type to the model as bytes (a
  422 "Input should be a valid dictionary" that says nothing of JSON), and reads JSON with
  `json.loads(bytes)`, which also takes UTF-16, UTF-32 and a byte order mark.
- A query value is UTF-8 without NUL: Starlette decodes bad bytes to U+FFFD silently.
- GET …/memories/search is a 405 naming POST, not a search for the memory "search".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any
from urllib.parse import unquote_to_bytes

from fastapi import Request, Response
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic_core import PydanticCustomError
from starlette._utils import get_route_path  # what Starlette's own routes match against
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from shared.errors import InvalidInput, UnsupportedMediaType
from shared.inputs import storable

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
JSON_ONLY = "send the body as JSON with Content-Type: application/json"
UTF8_QUERY = "percent-encode the UTF-8 bytes of the text"


class Utf8JsonRequest(Request):
    async def json(self) -> Any:
        # Decoded here, strictly: bytes that are not UTF-8 fail (FastAPI: 400), and a
        # leading byte order mark is a JSON syntax error (400 naming it).
        if not hasattr(self, "_json"):
            self._json = json.loads((await self.body()).decode("utf-8"))
        return self._json


class ApiRoute(APIRoute):
    # Paths of routes with a literal segment where this one has a parameter (set by
    # `yield_to_literal_segments`): those paths are theirs, whatever the method.
    literal_twins: tuple[re.Pattern[str], ...] = ()

    def yields_to(self, scope: Scope) -> bool:
        path = get_route_path(scope)
        return any(twin.match(path) for twin in self.literal_twins)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if self.literal_twins and self.yields_to(scope):
            return Match.NONE, {}
        return super().matches(scope)

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None

        async def checked(request: Request) -> Response:
            request = Utf8JsonRequest(request.scope, request.receive)
            check_query_string(request.scope["query_string"])
            if takes_body and await request.body():
                check_json_content_type(request.headers.get("content-type"))
            return await handler(request)

        return checked


def check_json_content_type(content_type: str | None) -> None:
    media = (content_type or "").partition(";")[0].strip().lower()
    if media != "application/json" and not (
        media.startswith("application/") and media.endswith("+json")
    ):
        raise UnsupportedMediaType(
            f"the body is {media or 'sent without a Content-Type'}; {JSON_ONLY}",
            details={"content_type": content_type},
        )


def check_query_string(raw: bytes) -> None:
    """Each query parameter's name and value, percent-decoded, are UTF-8 text that can be
    stored (no NUL), or a 422 names the parameter."""
    for pair in raw.split(b"&"):
        raw_name, _, raw_value = pair.partition(b"=")
        name, value = _utf8(raw_name), _utf8(raw_value)
        if name is None or "\x00" in name:
            raise InvalidInput(f"a query parameter's name is not UTF-8 text; {UTF8_QUERY}")
        if value is None:
            raise InvalidInput(
                f"{name}: not UTF-8 once percent-decoded; {UTF8_QUERY}",
                details={"parameter": name},
            )
        try:
            storable({name: value})
        except PydanticCustomError as exc:
            raise InvalidInput(exc.message(), details={"parameter": name}) from None


def _utf8(part: bytes) -> str | None:
    try:
        return unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        return None


def yield_to_literal_segments(routes: Sequence[BaseRoute]) -> None:
    """Give each ApiRoute the paths it must leave to a route with a literal segment where it
    has a parameter (/memories/search beside /memories/{memory_id})."""
    contexts = [c for c in iter_route_contexts(routes) if isinstance(c.original_route, ApiRoute)]
    for context in contexts:
        route = context.original_route
        assert isinstance(route, ApiRoute)
        route.literal_twins = tuple(
            other.path_regex
            for other in contexts
            if _literal_where_parameter(context.path_format or "", other.path_format or "")
        )


def _literal_where_parameter(path: str, other: str) -> bool:
    ours, theirs = path.split("/"), other.split("/")
    if len(ours) != len(theirs) or ours == theirs:
        return False
    return all(
        a == b or (_is_parameter(a) and not _is_parameter(b))
        for a, b in zip(ours, theirs, strict=True)
    )


def _is_parameter(segment: str) -> bool:
    return segment.startswith("{") and segment.endswith("}")


def allowed_methods(routes: Iterable[BaseRoute], scope: Scope) -> set[str]:
    """Every method some route serves at the scope's path (Starlette's 405 names only the
    first route's, and a path such as /v1/users/{id} has a route per method)."""
    methods: set[str] = set()
    for context in iter_route_contexts(list(routes)):
        route = context.original_route
        if isinstance(route, ApiRoute) and route.yields_to(scope):
            continue
        match, _ = context.matches(scope)
        if match != Match.NONE:
            methods |= context.methods or set()
    return methods
