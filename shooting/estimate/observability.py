"""Whether the sensors can see every state: the observability matrix of the linearised step.

At a point (x, u, p) the step x+ = F(x, u) has A = dF/dx and the sensors
y = h(x, u, p) have H = dh/dx. The linearisation is observable when the
observability matrix (Kalman's rank condition; e.g. Simon, "Optimal State
Estimation", sec. 1.7)

    O = [H; H A; H A^2; ...; H A^(nx-1)]

has rank nx. Its null space holds the directions no sequence of
measurements distinguishes; the states with large components there are the
ones the sensors cannot see. Each block H A^k is divided by max(1, |A|)^k
(a fixed factor, so rounding is not amplified) before the rank is taken,
so an unstable or stiff step does not hide the first blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["RANK_TOLERANCE", "Observability", "observability"]

FloatArray = npt.NDArray[np.float64]

#: A singular value of the scaled observability matrix below this fraction of its largest counts as zero.
RANK_TOLERANCE = 1e-9

#: A state whose component in the unobservable subspace (the norm of its row of an orthonormal basis) exceeds
#: this is named as unseen.
UNSEEN_COMPONENT = 0.1


@dataclass(frozen=True)
class Observability:
    """The rank test of one linearisation.

    Parameters
    ----------
    rank : int
        Rank of the observability matrix.
    nx : int
    unseen : tuple of int
        States with a large component in the unobservable subspace, largest first.
    null_space : ndarray, shape (nx, nx - rank)
        An orthonormal basis of the unobservable directions.
    """

    rank: int
    nx: int
    unseen: tuple[int, ...]
    null_space: FloatArray

    @property
    def observable(self) -> bool:
        """Whether the rank is full."""
        return self.rank == self.nx

    def message(self, who: str, names: Sequence[str], point: str) -> str:
        """One line naming the states the sensors cannot see and a sensor to add."""
        unseen = ", ".join(names[i] for i in self.unseen)
        first = self.unseen[0]
        return (f"{who}: the sensors cannot see {unseen}: the observability matrix of the linearisation at {point} "
                f"has rank {self.rank} < {self.nx}; add a sensor of {names[first]} (e.g. x[{first}] in "
                f"measurement(x, u, p)), or pass check_observability=False if it is seen elsewhere")


def observability(A: npt.ArrayLike, H: npt.ArrayLike) -> Observability:
    """The rank of ``[H; H A; ...; H A^(nx-1)]`` and the states in its null space.

    Parameters
    ----------
    A : array_like, shape (nx, nx)
        The step's dx+/dx.
    H : array_like, shape (ny, nx)
        The sensors' dy/dx.

    Returns
    -------
    Observability
    """
    A, H = np.asarray(A, dtype=float), np.asarray(H, dtype=float)
    nx = A.shape[0]
    growth = max(1.0, float(np.linalg.norm(A, 2)))
    blocks, block = [], H
    for _ in range(nx):
        blocks.append(block)
        block = block @ A / growth
    _, s, Vt = np.linalg.svd(np.vstack(blocks))
    largest = float(s[0]) if s.size else 0.0
    rank = int(np.sum(s > RANK_TOLERANCE * largest)) if largest > 0 else 0
    null = Vt[rank:].T
    weight = np.linalg.norm(null, axis=1) if null.size else np.zeros(nx)
    order = [int(i) for i in np.argsort(-weight, kind="stable") if weight[i] > UNSEEN_COMPONENT]
    return Observability(rank, nx, tuple(order), null)
