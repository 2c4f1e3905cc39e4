"""Nearest-rank quantiles, shared by the Locust timeline, the benchmarks and the chaos figures.

Kept free of imports from service/ and third-party packages: the Locust Jobs mount it from a
ConfigMap (k8s/loadtest-configmap.yaml) with the locustfile's other imports.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# q * n lands a hair above a whole number for some q (0.07 * 100 = 7.000000000000001); without
# the slack ceil would then skip to the next rank.
_SLACK = 1e-9


def nearest_rank(q: float, n: int) -> int:
    """The 1-based rank of quantile `q` (0..1) among `n` ordered samples: ceil(q * n), 1..n."""
    return min(n, max(1, math.ceil(q * n - _SLACK)))


def nearest_rank_value(values: Sequence[float], q: float) -> float | None:
    """Quantile `q` of `values` by nearest rank; None with no values."""
    if not values:
        return None
    return sorted(values)[nearest_rank(q, len(values)) - 1]
