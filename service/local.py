"""What a local `serve` (and the bench) picks on this machine when a setting is left unset."""

from __future__ import annotations

import os

from service.settings import Settings

SMALL_MACHINE_CORES = 4


def local_threads(settings: Settings) -> int | None:
    """Intra-op threads of each model replica a local `serve` starts, unless set: Ray would
    give a CPU replica one (OMP_NUM_THREADS = its num_cpus), but locally the model is the
    machine's main work, so its replicas share every core between them (one replica: all)."""
    if settings.torch_threads is not None or settings.num_gpus > 0:
        return settings.torch_threads
    return max(1, (os.cpu_count() or 1) // settings.num_replicas)


def local_layout(settings: Settings) -> str:
    """The layout when none is set (`make serve`, `make bench`): co-located on a small
    CPU-only machine serving one replica of each tier, where it measured faster at every
    client count (docs/benchmarks.md "Layouts"); else the two tiers, which scale apart."""
    if "layout" in settings.model_fields_set:  # SENTIMENT_LAYOUT or --layout
        return settings.layout
    small = (os.cpu_count() or 1) <= SMALL_MACHINE_CORES and settings.num_gpus == 0
    single = settings.num_replicas == 1 and settings.ingress_replicas == 1
    return "colocated" if small and single else "two-tier"
