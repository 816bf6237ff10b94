"""Settings from the environment, read one way by every process (participants, control plane, dashboard).

A process's settings are one ``EnvSettings`` model (pydantic-settings): each field a ``THROTTLESCOPE_*`` variable
(``THROTTLESCOPE_`` + the field's name in capitals, or the field's ``validation_alias``), an empty or blank variable
meaning "not set" (unless the model says ``blank_is_unset = False``). Built directly -- ``RuntimeConfig(report_interval_s=0.5)`` -- a model reads only what it is
given; ``from_env()`` adds the environment (or a mapping, in tests) under what is given. Either way a bad value is
a ``ConfigError`` that names what was wrong the way the user wrote it -- the variable, the command-line flag, or
the keyword -- with the value and what is allowed:

    THROTTLESCOPE_REPORT_INTERVAL_S must be a number of seconds 0.05..3600, got 'soon'

The field types here (``between``, ``whole_between``, ``switch``) parse the text of a variable and say what is
allowed in those words; the rest of a message is pydantic's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

__all__ = ["ConfigError", "EnvSettings", "between", "whole_between", "switch", "PREFIX", "MIN_INTERVAL_S",
           "MAX_INTERVAL_S", "IntervalSeconds", "BearerToken", "ControlPlaneUrl", "token_problem", "ControlPlaneAccess", "MIN_TOKEN_LEN", "MAX_TOKEN_LEN"]

PREFIX = "THROTTLESCOPE_"
# the report interval, as the control plane tells it and a participant accepts it
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
# a bearer token, as the control plane accepts one (its generated tokens are 43 characters)
MIN_TOKEN_LEN = 16
MAX_TOKEN_LEN = 1024
_ENV: ContextVar[Mapping[str, str] | None] = ContextVar("throttlescope_settings_env", default=None)
_NAMES: ContextVar[Mapping[str, str] | None] = ContextVar("throttlescope_settings_names", default=None)


class ConfigError(ValueError):
    """A setting is not valid; the message names it, shows the value and says what is allowed."""


def _number(text: Any) -> float:
    if isinstance(text, bool):
        return math.nan
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def between(low: float, high: float, what: str = "a number") -> Any:
    """A float ``low..high`` (finite), from a number or its text."""
    def check(value: Any) -> float:
        number = _number(value)
        if not (math.isfinite(number) and low <= number <= high):
            raise ValueError(f"must be {what} {low:g}..{high:g}, got {value!r}")
        return number
    return Annotated[float, BeforeValidator(check)]


def whole_between(low: int, high: int, what: str = "a whole number") -> Any:
    """An int ``low..high``, from a whole number or its text."""
    def check(value: Any) -> int:
        number = _number(value)
        if not (math.isfinite(number) and number.is_integer() and low <= number <= high):
            raise ValueError(f"must be {what} {low}..{high}, got {value!r}")
        return int(number)
    return Annotated[int, BeforeValidator(check)]


IntervalSeconds = between(MIN_INTERVAL_S, MAX_INTERVAL_S, "a number of seconds")
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def switch() -> Any:
    """A bool from a bool or the words 1/true/yes/on, 0/false/no/off."""
    def check(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in _ON or word in _OFF or not word:   # (an empty variable: off)
            return word in _ON
        raise ValueError(f"must be one of {'/'.join(_ON)} or {'/'.join(_OFF)}, got {value!r}")
    return Annotated[bool, BeforeValidator(check)]


def token_problem(token: str) -> str | None:
    """What is wrong with a bearer token, in words that never show it; None if nothing is."""
    if not all(33 <= ord(c) <= 126 for c in token):
        return "must be printable ASCII without spaces"
    if not MIN_TOKEN_LEN <= len(token) <= MAX_TOKEN_LEN:
        return (f"must be {MIN_TOKEN_LEN}..{MAX_TOKEN_LEN} characters long (got {len(token)}); generate one with: "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return None


def _bearer_token(value: Any) -> str | None:
    text = "" if value is None else str(value)
    if not text.strip():
        return None          # not set
    problem = token_problem(text)
    if problem:
        raise ValueError(problem)
    return text


# Optional; blank is unset. Declare it with ``Field(None, repr=False)``: a token is never shown.
BearerToken = Annotated[str | None, BeforeValidator(_bearer_token)]


def _control_plane_url(value: Any) -> str | None:
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"must be the control plane's base URL, http(s)://host[:port][/path], got {text!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"has an invalid port: {text!r}") from None
    return text.rstrip("/")


# Optional; blank is unset; a trailing slash dropped.
ControlPlaneUrl = Annotated[str | None, BeforeValidator(_control_plane_url)]


def _env_name(name: str, field: FieldInfo) -> str:
    alias = field.validation_alias
    return alias if isinstance(alias, str) else PREFIX + name.upper()


class _Environment(PydanticBaseSettingsSource):
    """The variables of ``env`` that name a field of the model (blank ones not set, if the model says so)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str], blank_is_unset: bool):
        super().__init__(settings_cls)
        self.env, self.blank_is_unset = env, blank_is_unset

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        key = _env_name(field_name, field)
        value = self.env.get(key)
        if value is not None and self.blank_is_unset and not value.strip():
            value = None
        return value, key, False

    def __call__(self) -> dict[str, Any]:
        out = {}
        for name, field in self.settings_cls.model_fields.items():
            value, _, _ = self.get_field_value(field, name)
            if value is not None:
                out[field.validation_alias if isinstance(field.validation_alias, str) else name] = value
        return out


@contextmanager
def _reading(env: Mapping[str, str] | None, names: Mapping[str, str]) -> Iterator[None]:
    env_token, names_token = _ENV.set(os.environ if env is None else env), _NAMES.set(names)
    try:
        yield
    finally:
        _ENV.reset(env_token)
        _NAMES.reset(names_token)


def _describe(e: ValidationError, model: type[BaseSettings]) -> str:
    names, from_env = _NAMES.get() or {}, _ENV.get() is not None
    by_alias = {(f.validation_alias if isinstance(f.validation_alias, str) else n): n
                for n, f in model.model_fields.items()}
    problems = []
    for error in e.errors():
        field = next((str(x) for x in error["loc"] if isinstance(x, str)), "")
        field = by_alias.get(field, field)
        info = model.model_fields.get(field)
        shown = names.get(field) or (_env_name(field, info) if from_env and info is not None else field)
        problems.append(f"{shown} {str(error['msg']).removeprefix('Value error, ')}")
    return "; ".join(problems)


class EnvSettings(BaseSettings):
    """A process's settings (see the module essay). Subclasses declare fields; frozen once built."""

    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True)
    # a blank variable is not set (the participant's rule); False: it is a value, checked like any other
    blank_is_unset: ClassVar[bool] = True

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise ConfigError(_describe(e, type(self))) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        env = _ENV.get()
        if env is None:
            return (init_settings,)
        return init_settings, _Environment(settings_cls, env, getattr(settings_cls, "blank_is_unset", True))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, given: Mapping[str, Any] | None = None,
                 given_as: Mapping[str, str] | None = None) -> Self:
        """The settings from ``env`` (default: the process environment) under ``given`` values (command-line
        flags, by field name; ``given_as``: how the user wrote each, for the error)."""
        with _reading(env, given_as or {}):
            return cls(**dict(given or {}))

    @classmethod
    def from_flags(cls, args: Any, flags: Mapping[str, str], env: Mapping[str, str] | None = None) -> Self:
        """``from_env`` under the command-line flags given: ``args`` is argparse's namespace (or a mapping by
        each flag's dest), ``flags`` maps a field to its flag (``{"data_dir": "--data-dir"}``). A flag left out
        (None) leaves its field to the environment; an error names the flag."""
        values = args if isinstance(args, Mapping) else vars(args)
        given = {field: values[flag.removeprefix("--").replace("-", "_")] for field, flag in flags.items()}
        given = {field: value for field, value in given.items() if value is not None}
        return cls.from_env(env, given=given, given_as={field: flags[field] for field in given})


class ControlPlaneAccess(EnvSettings):
    """How a command-line client of a control plane on this machine finds it (THROTTLESCOPE_URL) and its tokens:
    given in the environment (THROTTLESCOPE_ADMIN_TOKEN, THROTTLESCOPE_TOKEN), else in the files the control
    plane writes in its data directory (THROTTLESCOPE_DATA_DIR)."""

    url: ControlPlaneUrl = "http://127.0.0.1:8000"
    data_dir: Path = Path("./data")
    admin_token: BearerToken = Field(None, repr=False)
    token: BearerToken = Field(None, repr=False)
