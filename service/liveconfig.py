"""The settings a replica serves with: its args and environment, then the latest `user_config`
that holds up.

A bad `user_config` is refused here, never raised. Ray stops a replica whose `reconfigure`
raises, and the replacements it starts get the same config and fail the same way, so one typo
in a Serve config took every replica down: 503 to every request until a good config was
deployed (docs/serving.md, "Run-time configuration"). Refused, the replica keeps serving with
what it had, says so in /readyz and the log, and sets a gauge an alert watches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from service.envcheck import user_config_errors
from service.settings import RUN_TIME_LIMITS, Settings, apply_user_config

logger = logging.getLogger("ray.serve")


class LiveConfig:
    """`current`: the settings in force; `refused`: why the latest `user_config` was not
    applied (None once one is)."""

    def __init__(self, base: Settings) -> None:
        self.base = base  # each user_config applies to these, so a key left out reverts
        self.current = base
        self.refused: str | None = None

    def apply(
        self, user_config: dict[str, Any], check: Callable[[Settings], str | None] | None = None
    ) -> bool:
        """Take `user_config` if it validates against the base settings and `check` (what
        this replica can serve) finds nothing against it; else keep the current settings,
        record why and log it. Whether it was taken."""
        try:
            taken = apply_user_config(self.base, user_config)
        except ValidationError as exc:
            return self._refuse("; ".join(user_config_errors(exc)))
        if check is not None and (why := check(taken)) is not None:
            return self._refuse(why)
        self.current, self.refused = taken, None
        return True

    def _refuse(self, why: str) -> bool:
        self.refused = why
        logger.error("user_config refused, serving with the previous one: %s", why)
        return False

    def limits(self) -> dict[str, Any]:
        """The request limits in force (args or environment, then `user_config`)."""
        return {key: getattr(self.current, key) for key in RUN_TIME_LIMITS}
