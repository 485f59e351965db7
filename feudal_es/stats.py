"""95% Student-t intervals: the one table that ``feudal-es eval`` and the studies share.

Fitness over episodes and final scores over seeds are reported as mean ± the half-width
of the two-sided 95% t-interval of the mean. The critical values are a table (no SciPy
dependency for one quantile); between tabulated degrees of freedom the next smaller df is
used, which widens the interval slightly (conservative); above 120, the normal 1.960.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["mean_ci", "t_critical"]

# t_{0.975, df}, exact to 3 decimals
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
         16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
         23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
         30: 2.042, 40: 2.021, 50: 2.009, 60: 2.000, 80: 1.990, 100: 1.984, 120: 1.980}


def t_critical(df: int) -> float:
    """Two-sided 95% Student-t critical value for ``df`` degrees of freedom (NaN below 1)."""
    if df < 1:
        return math.nan
    if df > 120:
        return 1.960
    return _T975[max(k for k in _T975 if k <= df)]


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """``(mean, half-width)`` of the 95% t-interval of the mean of ``values`` (half-width
    NaN for a single value, both NaN for none)."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    return float(x.mean()), float(t_critical(x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
