"""Network helpers shared by tests that start servers on loopback."""

from __future__ import annotations

from loadtest.ports import free_port

__all__ = ["free_port"]
