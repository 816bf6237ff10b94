"""Every error is JSON ``{"reason": "..."}`` saying what is wrong and what is allowed; status codes are kept."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from controlplane.grant_tables import StateStoreUnavailable
from protocol import unknown_field_reason

log = logging.getLogger("controlplane")

BODY_PARSE_ERROR = "There was an error parsing the body"
NAME_RULE = "names are 1..256 characters of letters, digits, '-', '=', ':', '.' and '_' (Pulsar's rule)"


class ApiError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def not_found(reason: str) -> ApiError:
    return ApiError(404, reason)


def reason_json(status: int, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"reason": reason}, status_code=status, headers=headers)


def unavailable(exc: StateStoreUnavailable) -> JSONResponse:
    """503: a replica's shared state store cannot be used; a participant keeps its last limits and retries.
    (Logged where the store fails, once an outage: not once an answer.)"""
    return reason_json(503, f"{exc}; a participant keeps its last limits and retries", {"Retry-After": "1"})


def _one(err: dict[str, Any], body: type[BaseModel] | None = None) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    where = ".".join(loc[1:]) if loc and loc[0] in ("body", "path", "query", "header") else ".".join(loc)
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid"))
    if kind == "string_pattern_mismatch" and loc and loc[0] == "path":
        return f"invalid {where} {err.get('input')!r}: {NAME_RULE}"
    if kind == "extra_forbidden":
        if body is not None and loc and loc[0] == "body":   # (the allowed fields: from the body's model)
            return unknown_field_reason(body, loc[1:])
        return f"unknown field {where!r} is not allowed"
    if kind == "missing" and loc == ["body"]:
        return "a JSON request body is required"
    if kind == "json_invalid":
        return f"the body is not valid JSON ({err.get('ctx', {}).get('error', msg)})"
    msg = msg.removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def validation_reason(errors: list[dict[str, Any]], body: type[BaseModel] | None = None) -> str:
    """The errors (at most ten said) in one line; ``body``: the model the request's body was read as."""
    parts = [_one(e, body) for e in errors[:10]]
    more = f" (and {len(errors) - 10} more)" if len(errors) > 10 else ""
    return "; ".join(parts) + more


def _body_model(request: Request) -> type[BaseModel] | None:
    """The model the matched route reads its body as (None: no route, or a body that is not one model)."""
    field = getattr(request.scope.get("route"), "body_field", None)
    annotation = getattr(getattr(field, "field_info", None), "annotation", None)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return reason_json(exc.status, exc.reason)

    @app.exception_handler(StateStoreUnavailable)
    async def _state_store(request: Request, exc: StateStoreUnavailable) -> JSONResponse:
        return unavailable(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = list(exc.errors())
        ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
        if any(tuple(e.get("loc", ())) == ("body",) for e in errs) and not (
                ctype == "application/json" or ctype.endswith("+json")):
            return reason_json(422, f"the body must be JSON sent with 'Content-Type: application/json' "
                                    f"(got {ctype!r})")
        return reason_json(422, validation_reason(errs, _body_model(request)))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == BODY_PARSE_ERROR:  # FastAPI's, e.g. a body that is not UTF-8
            return reason_json(422, "the body is not valid JSON: it must be UTF-8 encoded JSON")
        if exc.status_code == 404 and exc.detail == "Not Found":
            reason = f"no such endpoint: {request.method} {request.url.path} (see /openapi.json)"
        elif exc.status_code == 405:
            reason = f"method {request.method} is not allowed on {request.url.path} (see /openapi.json)"
        else:
            reason = str(exc.detail)
        return reason_json(exc.status_code, reason, dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s: %s", request.method, request.url.path, type(exc).__name__,
                  exc_info=exc)
        return reason_json(500, "internal error; see the control plane's log")
