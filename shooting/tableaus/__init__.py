"""Butcher tableaus as exact, verified data; no CasADi here.

`ButcherTableau` (exact coefficients, validated, orders verified by the
rooted-tree conditions), the named catalogue, the RK2/RK3 and collocation
families, linear stability (R(z), A- and L-stability decided exactly) and the
stability-region plot.
"""

from shooting.tableaus.catalogue import get_tableau, rk2, rk3, tableau_names
from shooting.tableaus.collocation import gauss_legendre, radau_iia
from shooting.tableaus.plot import plot_stability_region
from shooting.tableaus.tableau import ButcherTableau, load_tableau

__all__ = [
    "ButcherTableau",
    "gauss_legendre",
    "get_tableau",
    "load_tableau",
    "plot_stability_region",
    "radau_iia",
    "rk2",
    "rk3",
    "tableau_names",
]
