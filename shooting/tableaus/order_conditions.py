"""Rooted trees and Runge-Kutta order conditions in exact arithmetic.

A Runge-Kutta method ``(A, b)`` has order ``p`` iff for every rooted tree
``t`` with ``|t| <= p`` nodes

    b^T Phi(t) = 1 / gamma(t)                      (Butcher 1963; HNW I, Thm. II.2.13)

where ``gamma(t)`` is the density of the tree and the *stage vector*
``Phi(t)`` (shape ``(s,)``) is defined recursively: for the single node
``Phi = 1``; for a tree whose root has the children ``t_1, ..., t_m``

    Phi(t)_i = prod_k (A Phi(t_k))_i .

Trees are represented canonically as the sorted tuple of their child trees:
``()`` is the single node, ``((),)`` the tree with two nodes, ``((), ())``
the "bushy" tree with three nodes and ``(((),),)`` the "tall" one.  The
number of trees per order is OEIS A000081 (1, 1, 2, 4, 9, 20, 48, 115, 286,
719, ...).

Exactness
---------
All conditions are evaluated without rounding.  The coefficients are brought
to a common denominator ``D`` (``A = A_int / D``, ``b = b_int / D``), so the
stage vectors are integer vectors scaled by ``D**(|t| - 1)`` and each
condition becomes the integer identity ``gamma * b_int . Phi_int = D**|t|``:
no gcd reductions, and memoisation per tree (a tree's stage vector is built
from its children's ``A Phi``) makes all 1205 trees up to order 10 cheap.

For tableaus that are only *nearly* exact (collocation methods whose nodes are
irrational and were computed to ~300 bits) a condition of order ``q`` is
accepted when its defect is at most

    tol_q = tolerance * max(1, ||b||_1) * max(1, ||A||_inf) ** (q - 1),

which bounds ``|b^T Phi(t)|`` itself (``||Phi(t)||_inf <= ||A||_inf**(|t|-1)``),
i.e. ``tolerance`` is a relative tolerance on the size of the terms.

Beyond trees
------------
Trees are checked up to :data:`MAX_TREE_ORDER` (10).  Butcher's simplifying
assumptions (HNW I, Sec. II.7, Thm. 7.4; Butcher 1964)

    B(p): b^T c^(k-1) = 1/k                       k = 1..p
    C(q): A c^(k-1)   = c^k / k                   k = 1..q
    D(r): (b * c^(k-1))^T A = b * (1 - c^k) / k   k = 1..r

imply order ``>= min(p, q + r + 1, 2q + 2)``, while the bushy trees give
order ``<= p`` (``B(p+1)`` is an order condition).  When both bounds agree the
order is known exactly without enumerating any tree; this certifies
Gauss-Legendre (order 2s) and Radau IIA (order 2s - 1) for every s.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from fractions import Fraction
from functools import lru_cache

from shooting import _validate

__all__ = [
    "MAX_TREE_ORDER",
    "Tree",
    "rooted_trees",
    "tree_order",
    "density",
    "symmetry",
    "ElementaryWeights",
    "elementary_weight",
    "order_from_trees",
    "simplifying_assumptions",
    "order_bounds",
]

#: Highest tree order enumerated by :func:`order_from_trees` by default.
MAX_TREE_ORDER = 10

Tree = tuple  # a rooted tree: the sorted tuple of its child trees

Matrix = Sequence[Sequence[Fraction]]
Vector = Sequence[Fraction]


# --------------------------------------------------------------------------
# Tree enumeration (canonical, by integer id)
# --------------------------------------------------------------------------
class _TreeTable:
    """All rooted trees up to some order, numbered in order of generation.

    A tree is stored as the non-increasing tuple of the ids of its children;
    children of a tree of order ``n`` all have ids of order ``< n``, so the
    multisets of ids with total order ``n - 1`` enumerate every tree once.
    """

    def __init__(self) -> None:
        self.children: list[tuple[int, ...]] = [()]
        self.size: list[int] = [1]
        self.by_order: list[list[int]] = [[], [0]]
        self.lock = threading.Lock()

    def extend_to(self, n: int) -> None:
        with self.lock:
            self._extend_to(n)

    def _extend_to(self, n: int) -> None:
        while len(self.by_order) <= n:
            order = len(self.by_order)
            top = len(self.children) - 1
            new: list[int] = []
            for multiset in self._multisets(order - 1, top):
                self.children.append(multiset)
                self.size.append(order)
                new.append(len(self.children) - 1)
            self.by_order.append(new)

    def _multisets(self, remaining: int, max_id: int) -> Iterator[tuple[int, ...]]:
        if remaining == 0:
            yield ()
            return
        for tid in range(max_id, -1, -1):
            if self.size[tid] <= remaining:
                for rest in self._multisets(remaining - self.size[tid], tid):
                    yield (tid, *rest)

    def ids(self, order: int) -> list[int]:
        self.extend_to(order)
        return self.by_order[order]


_TABLE = _TreeTable()


@lru_cache(maxsize=None)
def _as_tuple(tid: int) -> Tree:
    return tuple(sorted(_as_tuple(child) for child in _TABLE.children[tid]))


@lru_cache(maxsize=None)
def _density_of_id(tid: int) -> int:
    gamma = _TABLE.size[tid]
    for child in _TABLE.children[tid]:
        gamma *= _density_of_id(child)
    return gamma


def _check_order_arg(order: int, what: str = "order") -> None:
    _validate.integer(order, what, minimum=1)


def rooted_trees(order: int) -> tuple[Tree, ...]:
    """All rooted trees with exactly ``order`` nodes, in canonical form.

    Parameters
    ----------
    order : int
        Number of nodes, ``>= 1``.

    Returns
    -------
    tuple of Tree
        Each tree is the sorted tuple of its child trees; the count follows
        OEIS A000081 (1, 1, 2, 4, 9, 20, 48, 115, 286, 719, ...).
    """
    _check_order_arg(order)
    return tuple(_as_tuple(tid) for tid in _TABLE.ids(order))


def _check_tree(tree: Tree) -> None:
    if not isinstance(tree, tuple):
        raise ValueError(
            f"a rooted tree is a tuple of child trees (e.g. ((), ())), got {tree!r}"
        )
    for child in tree:
        _check_tree(child)


def _canonical(tree: Tree) -> Tree:
    return tuple(sorted(_canonical(child) for child in tree))


def tree_order(tree: Tree) -> int:
    """Number of nodes ``|t|`` of a rooted tree."""
    _check_tree(tree)
    return 1 + sum(tree_order(child) for child in tree)


def density(tree: Tree) -> int:
    """Density ``gamma(t) = |t| * prod gamma(children)`` (HNW I, Def. II.2.10)."""
    _check_tree(tree)
    gamma = tree_order(tree)
    for child in tree:
        gamma *= density(child)
    return gamma


def symmetry(tree: Tree) -> int:
    """Symmetry ``sigma(t) = prod_u sigma(u)**m_u * m_u!`` over distinct children ``u``.

    ``m_u`` is the multiplicity of the child ``u``; ``|t|! / sigma(t)`` is the
    number of labelled trees of that shape (Cayley: they sum to
    ``n**(n-1)`` over all trees of order ``n``).
    """
    _check_tree(tree)
    sigma = 1
    for child in set(tree):
        m = tree.count(child)
        sigma *= symmetry(child) ** m * math.factorial(m)
    return sigma


# --------------------------------------------------------------------------
# Elementary weights on an integer grid
# --------------------------------------------------------------------------
def _common_denominator(values: Iterable[Fraction]) -> int:
    denominator = 1
    for v in values:
        denominator = math.lcm(denominator, v.denominator)
    return denominator


class ElementaryWeights:
    """Memoised stage vectors ``Phi(t)`` of a coefficient matrix ``A``.

    Parameters
    ----------
    A : sequence of sequences of Fraction, shape (s, s)
        Exact coefficient matrix.
    tolerance : Fraction, optional
        Base tolerance (0 = exact checks); see the module docstring for how
        it is scaled with the order of the condition.

    Notes
    -----
    One instance is shared by ``b`` and ``b_hat`` of the same tableau; stage
    vectors are computed on demand, order by order, and kept.
    """

    def __init__(self, A: Matrix, tolerance: Fraction = Fraction(0)) -> None:
        self.s = len(A)
        self.A = [[Fraction(x) for x in row] for row in A]
        self.D = _common_denominator(x for row in self.A for x in row)
        self.A_int = [[int(x * self.D) for x in row] for row in self.A]
        self.tolerance = Fraction(tolerance)
        self.norm_A = max(sum(abs(x) for x in row) for row in self.A)
        self._lock = threading.Lock()
        self._phi: list[list[int]] = []
        self._aphi: list[list[int]] = []
        self._cols = [
            [(j, a) for j, a in enumerate(row) if a != 0] for row in self.A_int
        ]

    def _ensure(self, tid: int) -> None:
        if len(self._phi) > tid:
            return
        with self._lock:
            self._extend(tid)

    def _extend(self, tid: int) -> None:
        while len(self._phi) <= tid:
            k = len(self._phi)
            phi = [1] * self.s
            for child in _TABLE.children[k]:
                aphi = self._aphi[child]
                phi = [p * q for p, q in zip(phi, aphi, strict=True)]
            self._phi.append(phi)
            self._aphi.append(
                [sum(a * phi[j] for j, a in cols) for cols in self._cols]
            )

    def stage_vector(self, tree: Tree) -> list[Fraction]:
        """``Phi(t)`` as exact Fractions, shape ``(s,)``."""
        n = tree_order(tree)
        tid = _TABLE.ids(n)[rooted_trees(n).index(_canonical(tree))]
        self._ensure(tid)
        scale = self.D ** (n - 1)
        return [Fraction(p, scale) for p in self._phi[tid]]

    def _scaled_weight(self, b_int: Sequence[int], tid: int) -> int:
        self._ensure(tid)
        return sum(x * p for x, p in zip(b_int, self._phi[tid], strict=True) if x)

    def order(self, b: Vector, max_order: int = MAX_TREE_ORDER) -> int:
        """Highest ``p <= max_order`` such that all trees ``|t| <= p`` hold.

        Stops at the first order with a failing condition.
        """
        _check_order_arg(max_order, "max_order")
        b = [Fraction(x) for x in b]
        if len(b) != self.s:
            raise ValueError(f"b has {len(b)} entries, expected s = {self.s}")
        # Bring b to the same denominator as A (enlarging D if needed).
        Db = _common_denominator(b)
        scale_b = Db * self.D  # b = b_int / (Db * D) with the A-grid D
        b_int = [int(x * scale_b) for x in b]
        norm_b = max(Fraction(1), sum(abs(x) for x in b))
        norm_A = max(Fraction(1), self.norm_A)
        for q in range(1, max_order + 1):
            # b . Phi(t) = (b_int . Phi_int) / (Db * D**|t|)
            denominator = Db * self.D**q
            tol = self.tolerance * norm_b * norm_A ** (q - 1)
            for tid in _TABLE.ids(q):
                gamma = _density_of_id(tid)
                defect = gamma * self._scaled_weight(b_int, tid) - denominator
                if tol == 0:
                    if defect != 0:
                        return q - 1
                elif abs(defect) > tol * gamma * denominator:
                    return q - 1
        return max_order


def elementary_weight(A: Matrix, b: Vector, tree: Tree) -> Fraction:
    """``b^T Phi(t)``, exactly; equals ``1/gamma(t)`` iff the condition of ``t`` holds."""
    phi = ElementaryWeights(A).stage_vector(tree)
    return sum((Fraction(x) * p for x, p in zip(b, phi, strict=True)), Fraction(0))


def order_from_trees(
    A: Matrix,
    b: Vector,
    *,
    tolerance: Fraction | float = 0,
    max_order: int = MAX_TREE_ORDER,
) -> int:
    """Order of ``(A, b)`` from the rooted-tree conditions, up to ``max_order``.

    Parameters
    ----------
    A : sequence of sequences of Fraction, shape (s, s)
    b : sequence of Fraction, shape (s,)
    tolerance : Fraction or float, optional
        Base tolerance of the conditions (0: exact); scaled per order as
        described in the module docstring.
    max_order : int, optional
        Highest tree order checked.  A return value equal to ``max_order``
        means "at least ``max_order``".

    Returns
    -------
    int
    """
    return ElementaryWeights(A, Fraction(tolerance)).order(b, max_order)


# --------------------------------------------------------------------------
# Simplifying assumptions B(p), C(q), D(r)
# --------------------------------------------------------------------------
def simplifying_assumptions(
    A: Matrix,
    b: Vector,
    c: Vector,
    *,
    tolerance: Fraction | float = 0,
    limit: int | None = None,
) -> tuple[int, int, int]:
    """Largest ``(p, q, r)`` with ``B(p)``, ``C(q)`` and ``D(r)`` satisfied.

    Parameters
    ----------
    A : sequence of sequences of Fraction, shape (s, s)
    b, c : sequence of Fraction, shape (s,)
    tolerance : Fraction or float, optional
        Base tolerance (0: exact), scaled like the tree conditions.
    limit : int, optional
        Stop counting at this value (default ``2 s + 2``; ``B`` can never
        exceed ``2 s`` for distinct nodes).

    Returns
    -------
    tuple of int
        ``(p, q, r)``.
    """
    s = len(A)
    A = [[Fraction(x) for x in row] for row in A]
    b = [Fraction(x) for x in b]
    c = [Fraction(x) for x in c]
    limit = 2 * s + 2 if limit is None else limit
    tolerance = Fraction(tolerance)
    norm_A = max(Fraction(1), max(sum(abs(x) for x in row) for row in A))
    norm_b = max(Fraction(1), sum(abs(x) for x in b))

    def close(lhs: Fraction | int, rhs: Fraction, k: int) -> bool:
        return abs(lhs - rhs) <= tolerance * norm_b * norm_A ** (k - 1)

    # B(p): quadrature conditions sum_i b_i c_i^(k-1) = 1/k.
    p = 0
    powers = [Fraction(1)] * s  # c^(k-1)
    while p < limit and close(sum(x * y for x, y in zip(b, powers, strict=True)), Fraction(1, p + 1), p + 1):
        p += 1
        powers = [x * y for x, y in zip(powers, c, strict=True)]

    # C(q): sum_j a_ij c_j^(k-1) = c_i^k / k for every row i.
    q = 0
    powers = [Fraction(1)] * s
    while q < limit:
        k = q + 1
        nxt = [x * y for x, y in zip(powers, c, strict=True)]
        if not all(
            close(sum(a * y for a, y in zip(row, powers, strict=True)), nxt[i] / k, k)
            for i, row in enumerate(A)
        ):
            break
        q, powers = k, nxt

    # D(r): sum_i b_i c_i^(k-1) a_ij = b_j (1 - c_j^k) / k for every column j.
    r = 0
    powers = [Fraction(1)] * s
    while r < limit:
        k = r + 1
        weights = [x * y for x, y in zip(b, powers, strict=True)]
        c_k = [y * x for x, y in zip(powers, c, strict=True)]
        if not all(
            close(
                sum(weights[i] * A[i][j] for i in range(s)),
                b[j] * (1 - c_k[j]) / k,
                k,
            )
            for j in range(s)
        ):
            break
        r = k
        powers = c_k
    return p, q, r


def order_bounds(
    A: Matrix,
    b: Vector,
    c: Vector,
    *,
    tolerance: Fraction | float = 0,
    weights: ElementaryWeights | None = None,
    max_tree_order: int = MAX_TREE_ORDER,
) -> tuple[int, int]:
    """Lower and upper bound of the order of ``(A, b, c)``.

    The bounds are equal whenever the order is determined, which is always
    the case below ``max_tree_order`` and for collocation methods above it.

    Algorithm
    ---------
    1. ``(p, q, r) = simplifying_assumptions(...)``; upper bound ``p``
       (the bushy tree of order ``p + 1`` fails), lower bound
       ``min(p, q + r + 1, 2 q + 2)`` (Butcher 1964).  Equal -> done.
    2. Otherwise enumerate the trees order by order (stopping at the first
       failure).  A failure at order ``k <= max_tree_order`` gives exactly
       ``k - 1``; if all trees up to ``max_tree_order`` hold, the order lies
       in ``[max(max_tree_order, lower), p]``.

    Parameters
    ----------
    A : sequence of sequences of Fraction, shape (s, s)
    b, c : sequence of Fraction, shape (s,)
    tolerance : Fraction or float, optional
    weights : ElementaryWeights, optional
        Reuse a cache of stage vectors for the same ``A``.
    max_tree_order : int, optional

    Returns
    -------
    tuple of int
        ``(lower, upper)``.
    """
    p, q, r = simplifying_assumptions(A, b, c, tolerance=tolerance)
    lower = min(p, q + r + 1, 2 * q + 2)
    if lower == p:
        return p, p
    if weights is None:
        weights = ElementaryWeights(A, Fraction(tolerance))
    from_trees = weights.order(b, max_tree_order)
    if from_trees < max_tree_order:
        return from_trees, from_trees
    return max(max_tree_order, lower), max(p, max_tree_order)
