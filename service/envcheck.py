"""Settings problems told in the words the user set them with: the SENTIMENT_* variable, the
command-line flag or the `user_config` key, not pydantic's field path."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from service.batchconfig import BatchConfig
from service.settings import RUN_TIME_LIMITS, Settings

PREFIX = "SENTIMENT_"
NESTED = "__"


def known_variables() -> list[str]:
    """Every SENTIMENT_* variable the settings read, nested groups included."""
    names = []
    for field, info in Settings.model_fields.items():
        names.append(PREFIX + field.upper())
        names += _fields([field]) if hasattr(info.annotation, "model_fields") else []
    return names


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """A warning for each SENTIMENT_* variable set here that no setting reads, with the
    closest known name: a typo is otherwise silently ignored (the settings ignore unknown
    variables, so other tools may share the prefix)."""
    known = known_variables()
    groups = tuple(name + NESTED for name in known)
    # Compared without the prefix, which every name shares and which would make any two
    # look alike.
    tails = [known_name.removeprefix(PREFIX) for known_name in known]
    warnings = []
    for name in sorted(environ):
        if not name.startswith(PREFIX) or name in known or name.startswith(groups):
            continue  # a setting, or one in a nested group, which validation names
        close = _closest(name.removeprefix(PREFIX), tails)
        hint = f" (did you mean {PREFIX}{close}?)" if close else ""
        warnings.append(f"{name} is not a setting and is ignored{hint}")
    return warnings


def unknown_args(args: Mapping[str, Any]) -> list[str]:
    """A line for each key of a Serve config's application `args` that is not a setting, with
    the closest one: Settings ignores unknown names (it also reads the environment), so a
    misspelt key would otherwise leave its setting at the default."""
    known = list(Settings.model_fields)
    lines = []
    for key in sorted(set(args) - set(known)):
        close = _closest(key, known)
        hint = f" (did you mean {close!r}?)" if close else ""
        lines.append(f"args key {key!r} is not a service setting{hint}")
    return lines


def settings_errors(exc: ValidationError, flags: Mapping[str, Any]) -> list[str]:
    """One line per bad setting, named as the user set it: the command-line flag when one
    was given (`flags`: field to value), else the SENTIMENT_* variable, with the value."""

    def name(loc: list[str]) -> str:
        return (
            "--" + loc[0].replace("_", "-")
            if loc[0] in flags
            else PREFIX + NESTED.join(loc).upper()
        )

    def unknown(loc: list[str]) -> str:
        return "no such setting; known: " + ", ".join(_fields(loc[:-1]))

    return problems(exc, name, unknown)


def unparsable_variable(exc: Exception) -> str:
    """What pydantic-settings' SettingsError means: a nested setting's variable is not JSON."""
    found = re.search(r'field "(\w+)"', str(exc))
    if found is None:
        return str(exc)
    field = found.group(1)
    try:
        knob = f", or one of its settings at a time, e.g. {_fields([field])[0]}=..."
    except (AttributeError, KeyError):  # not a nested group of settings
        knob = ""
    return f"{PREFIX}{field.upper()} is not valid JSON: it takes a JSON object{knob}"


def user_config_errors(exc: ValidationError) -> list[str]:
    """One line per bad key of a Ray `user_config` (service.settings.apply_user_config), named
    as the config spells it: its batch knobs and request limits are one flat dict."""
    keys = [*BatchConfig.model_fields, *RUN_TIME_LIMITS]

    def name(loc: list[str]) -> str:
        return ".".join(part for part in loc if part != "batch") or "user_config"

    def unknown(loc: list[str]) -> str:
        close = _closest(loc[-1], keys)
        return (
            f"no such key; did you mean {close!r}?"
            if close
            else "no such key; known: " + ", ".join(keys)
        )

    return problems(exc, name, unknown)


def problems(
    exc: ValidationError, name: Callable[[list[str]], str], unknown: Callable[[list[str]], str]
) -> list[str]:
    """One line per validation error, `name=value: reason`: `name` turns a field's location
    into the user's own words, `unknown` says what an unknown name's line reads instead of
    pydantic's "Extra inputs are not permitted". A rule across fields keeps its message."""
    lines = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        msg = error["msg"].removeprefix("Value error, ")
        if not loc:  # a rule across fields: its message names them
            lines.append(msg)
            continue
        if error["type"] == "extra_forbidden":
            msg = unknown(loc)
        lines.append(f"{name(loc)}={error['input']!r}: {msg}")
    return lines


def _closest(name: str, known: list[str]) -> str | None:
    """The known name most like a misspelt one, if any is close enough to suggest."""
    close = difflib.get_close_matches(name, known, n=1)
    return close[0] if close else None


def _fields(group: list[str]) -> list[str]:
    """The SENTIMENT_* names of the settings in a nested group (`group`: its path)."""
    model: Any = Settings
    for part in group:
        model = model.model_fields[part].annotation
    prefix = PREFIX + "".join(part.upper() + NESTED for part in group)
    return [prefix + name.upper() for name in model.model_fields]
