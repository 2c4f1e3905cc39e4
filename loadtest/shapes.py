"""Traffic shapes as pure functions of time: how many users, and how fast to get there.

steady  `base` users for the whole run.
step    `base` more users every `step_s` seconds; the capacity report reads each step.
spike   a flash sale: `base` users, a sharp jump to `factor` x `base` held for `hold_s`, then
        back to `base` to show the service recovers.
soak    `base` users for a long run (default 30 min), to show nothing drifts or leaks.
"""

from __future__ import annotations

from dataclasses import dataclass

SHAPES = ("steady", "step", "spike", "soak")


@dataclass(frozen=True)
class ShapeConfig:
    """Knobs of every shape; each is a flag and an environment variable of the locustfile."""

    shape: str = "steady"
    base_users: int = 8
    duration_s: float = 60.0
    spawn_rate: float = 10.0  # users/s on ordinary ramps
    spike_factor: float = 5.0
    spike_at_s: float | None = None  # default: a third of the way in
    spike_hold_s: float | None = None  # default: a third of the run
    step_s: float = 20.0
    steps: int = 5
    soak_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {self.shape!r}")
        if self.base_users < 1 or self.steps < 1 or self.spike_factor < 1:
            raise ValueError("base users, steps and spike factor must be at least 1")

    @property
    def length_s(self) -> float:
        """Total length of the shape in seconds."""
        if self.shape == "step":
            return self.step_s * self.steps
        if self.shape == "soak":
            return self.soak_s
        return self.duration_s


@dataclass(frozen=True)
class Step:
    """One plateau of the step shape: its user count and time window."""

    users: int
    start_s: float
    end_s: float


def steps(config: ShapeConfig) -> list[Step]:
    """The plateaus of a step run (one per step)."""
    return [
        Step(config.base_users * (i + 1), i * config.step_s, (i + 1) * config.step_s)
        for i in range(config.steps)
    ]


def tick(config: ShapeConfig, t: float) -> tuple[int, float] | None:
    """(users, spawn rate) at `t` seconds into the run, or None when the run is over."""
    if t >= config.length_s:
        return None
    base = config.base_users
    if config.shape == "step":
        index = min(int(t // config.step_s), config.steps - 1)
        return base * (index + 1), config.spawn_rate
    if config.shape == "spike":
        start = config.duration_s / 3 if config.spike_at_s is None else config.spike_at_s
        hold = config.duration_s / 3 if config.spike_hold_s is None else config.spike_hold_s
        if start <= t < start + hold:
            peak = round(base * config.spike_factor)
            # Sharp: every extra user arrives within about a second.
            return peak, float(max(config.spawn_rate, peak - base))
        return base, float(max(config.spawn_rate, base * config.spike_factor))
    return base, config.spawn_rate
