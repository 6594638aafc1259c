"""When a controller's prediction has diverged: the one threshold the C controller and `RTIController` share.

An interior point can end "optimal" on a QP whose data were linearised far
from any sensible trajectory (after a disturbance the plant's model cannot
recover from, or a guess that drifted sample after sample); taking that
prediction as the next linearisation point makes the next one worse, until
the arithmetic overflows. A prediction with an entry beyond

    limit = PREDICTION_FACTOR * problem_scale(ocp) * (1 + max |x0|)

(x0 the measured state) is therefore a failed sample: its input is not
applied, and the next sample starts afresh from its measured state. The
problem's scale is its own: the largest magnitude of the guess, the references
and the finite bounds, at least 1. A factor of 1e4 leaves any trajectory a
controller could mean untouched (a prediction ten thousand times the problem's
own magnitudes is not one) and still catches a divergence many orders of
magnitude before single precision overflows (3.4e38).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["PREDICTION_FACTOR", "prediction_limit", "problem_scale"]

#: How many times the problem's own scale a prediction may reach (see the module docstring).
PREDICTION_FACTOR = 1e4


def problem_scale(*arrays: npt.ArrayLike) -> float:
    """The largest finite magnitude among `arrays` (guess, references, bounds), at least 1."""
    m = 1.0
    for a in arrays:
        v = np.abs(np.asarray(a, dtype=float).reshape(-1))
        v = v[np.isfinite(v)]
        if v.size:
            m = max(m, float(v.max()))
    return m


def prediction_limit(*arrays: npt.ArrayLike) -> float:
    """`PREDICTION_FACTOR` times `problem_scale` of `arrays`: the C's ``PREDICTION_LIMIT`` (times 1 + max|x0|)."""
    return PREDICTION_FACTOR * problem_scale(*arrays)
