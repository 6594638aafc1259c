"""The discrete adjoint and the second-order sensitivities of a Runge-Kutta step.

One substep x+ = x + h sum_i b_i K_i, K_i = f(X_i), X_i = x + h sum_j a_ij K_j
(f the model's right-hand side, or for a DAE the reduced f~ of
`shooting.integrate.stage_calculus`; J_i = df~/d(x, u) at stage i, its first
nx columns J_i^x). Given lam, the adjoint of x+, the gradient of lam' x+ with
respect to (x, u) follows from the stage equations by the implicit-function
theorem (the discrete adjoint of a Runge-Kutta method: Hager, Numer. Math. 87
(2000); Sandu, "On the properties of Runge-Kutta discrete adjoints", ICCS
2006). With M = I - h blockdiag(J_i^x)(A kron I) the stage equations'
Jacobian (`shooting.integrate.stages.newton_matrix`),

    M' theta = h (b kron lam),           i.e.  theta_i = h b_i lam + h sum_j a_ji J_j^x' theta_j,
    d(lam' x+)/d(x, u) = [lam; 0] + sum_i J_i' theta_i.

For an explicit tableau M' is block upper triangular with identity blocks:
theta is a backward recursion over the stages, each J' theta one
reverse-mode product of the model. For an implicit one it is one linear
system with the transposed Newton matrix at the converged stages.

Second order (forward over adjoint). Differentiating the two lines above in
a direction with stage tangents dX_i (the forward sensitivities) and du, with
P_i = Hess(theta_i' f~)(X_i) [dX_i; du] and P_i^x its first nx rows,

    M' dtheta = h (A' kron I) [P_j^x]_j,
    d(grad) = sum_i (J_i' dtheta_i + P_i).

Substeps. x_N = Phi_N o ... o Phi_1 (x_0, u): the adjoints run backward,
lam_{n-1} = (dPhi_n/dx)' lam_n, the input's adjoint is the sum of every
substep's, and the Hessian of lam' x_N with respect to w = (x_0, u) is
sum_n T_n' H_n T_n, H_n the Hessian of lam_n' Phi_n in the substep's own
(x, u) and T_n = [S_{n-1}; 0 I] the derivative of its inputs with respect to
w (S the forward sensitivities): the chain rule of second derivatives, the
outer adjoints weighting the inner maps' curvature.

Few substeps are unrolled (the forward pass stored in the graph, then the
backward one). Many are composed by binary doubling as the forward step is
(`shooting.integrate.integrator`): a level over 2^k substeps runs its first
half forward to the midpoint, the second half's adjoint from lam, then the
first half's from the midpoint's adjoint. Nothing is stored beyond one state
per level; the forward half is recomputed, so the work grows as N log N
substeps (a checkpointing schedule) while the graph and the work memory stay
O(log N).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import casadi as ca

from shooting.integrate.dae import DAESubstepBuilder
from shooting.integrate.stage_calculus import StageCalculus, stage_calculus
from shooting.integrate.stages import combine, newton_matrix
from shooting.integrate.substep import SubstepBuilder

__all__ = ["ADJOINT_MODES", "AdjointStep", "SubstepRecord"]

#: The sensitivity modes built here.
ADJOINT_MODES = ("adjoint", "second-order")


@dataclass(frozen=True)
class SubstepRecord:
    """One substep's forward pass: its inputs, stages, stage Jacobians and results."""

    x: Any
    S: Any
    u: Any
    p: Any
    t: Any
    h: Any
    X: list[Any]
    Z: list[Any]
    J: list[Any] | None
    dX: list[Any] | None
    x_next: Any
    S_next: Any
    err: Any
    z_next: Any


@dataclass(frozen=True)
class AdjointStep:
    """Builds the adjoint (``second_order=False``) or second-order substeps and steps of a builder.

    Parameters
    ----------
    builder : SubstepBuilder or DAESubstepBuilder
        A builder of the plain step (its mode is not used).
    second_order : bool
    """

    builder: SubstepBuilder | DAESubstepBuilder
    second_order: bool

    @cached_property
    def calculus(self) -> StageCalculus:
        b = self.builder
        return stage_calculus(b.f, b.g if isinstance(b, DAESubstepBuilder) else None)

    @property
    def nx(self) -> int:
        return self.builder.nx

    @property
    def nu(self) -> int:
        return self.builder.nu

    @property
    def nz(self) -> int:
        return self.builder.nz if isinstance(self.builder, DAESubstepBuilder) else 0

    @property
    def embedded(self) -> bool:
        return self.builder.b_hat is not None

    # --------------------------------------------------------------- forward
    def forward(self, x: Any, S: Any, u: Any, p: Any, t: Any, h: Any, z: Any) -> SubstepRecord:
        """One substep forward: stages, and for the second order the stage Jacobians and tangents.

        Parameters
        ----------
        x : casadi.SX, shape (nx, 1)
        S : casadi.SX or DM, shape (nx, nx + nu), or None
            dx/dw (second order only).
        u, p : casadi.SX
        t, h : casadi.SX, scalars
        z : casadi.SX, shape (nz, 1), or None
            The algebraic guess at x (a DAE).
        """
        b, A = self.builder, self.builder.A
        K, Z = b.stage_values(x, u, p, t, h, z)
        s = len(K)
        X = [combine(x, h, A[i, :], K) for i in range(s)]
        Zs = Z if Z else [ca.SX(0, 1)] * s
        taus = [t + float(b.c[i]) * h for i in range(s)]
        J = dX = S_next = None
        if self.second_order:
            J = [self.calculus.jacobian(X[i], u, p, taus[i], Zs[i]) for i in range(s)]
            dX, dK = self._tangents(J, S, h)
            S_next = combine(S, h, b.b, dK)
        x_next = combine(x, h, b.b, K)
        err = combine(ca.SX.zeros(self.nx), h, b.b - b.b_hat, K) if b.b_hat is not None else None
        z_next = b.z_at_end(x_next, Z, u, p, t, h) if isinstance(b, DAESubstepBuilder) else None
        return SubstepRecord(x, S, u, p, t, h, X, Zs, J, dX, x_next, S_next, err, z_next)

    def _tangents(self, J: list[Any], S: Any, h: Any) -> tuple[list[Any], list[Any]]:
        """Stage tangents dX_i and slopes dK_i in the direction [S; 0 I] (the forward sensitivities)."""
        b, nx, nu = self.builder, self.nx, self.nu
        A, s = b.A, len(J)
        E = ca.horzcat(ca.SX(nu, nx), ca.SX.eye(nu))
        if b.explicit:
            dK: list[Any] = []
            dX: list[Any] = []
            for i in range(s):
                dX.append(combine(S, h, A[i, :i], dK))
                dK.append(ca.mtimes(J[i], ca.vertcat(dX[i], E)))
            return dX, dK
        rhs = ca.vertcat(*[ca.mtimes(J[i][:, :nx], S) + ca.mtimes(J[i][:, nx:], E) for i in range(s)])
        d = ca.solve(newton_matrix(A, h, [Ji[:, :nx] for Ji in J]), rhs)
        dK = [d[i * nx:(i + 1) * nx, :] for i in range(s)]
        return [combine(S, h, A[i, :], dK) for i in range(s)], dK

    # -------------------------------------------------------------- backward
    def backward(self, r: SubstepRecord, lam: Any) -> tuple[Any, Any, Any]:
        """One substep backward from lam (adjoint of its end state).

        Returns
        -------
        lam_x : casadi.SX, shape (nx, 1)
            (dx_next/dx)' lam.
        lam_u : casadi.SX, shape (nu, 1)
            (dx_next/du)' lam.
        H : casadi.SX, shape (nx + nu, nx + nu), or None
            T' H_n T (module docstring), the second order only.
        """
        b, nx, nu = self.builder, self.nx, self.nu
        A, bw, s = b.A, b.b, len(r.X)
        taus = [r.t + float(b.c[i]) * r.h for i in range(s)]
        calc = self.calculus
        # theta: M' theta = h (b kron lam)
        G: list[Any] = [None] * s   # J_i' theta_i, (nx + nu, 1)
        theta: list[Any] = [None] * s
        if b.explicit:
            for i in reversed(range(s)):
                t_i = combine(float(bw[i]) * r.h * lam if bw[i] != 0.0 else ca.SX.zeros(nx), r.h,
                              [A[j, i] for j in range(i + 1, s)], [G[j][:nx] for j in range(i + 1, s)])
                theta[i] = t_i
                G[i] = (ca.mtimes(r.J[i].T, t_i) if r.J is not None
                        else calc.transposed_product(r.X[i], r.u, r.p, taus[i], r.Z[i], t_i))
        else:
            J = r.J if r.J is not None else [calc.jacobian(r.X[i], r.u, r.p, taus[i], r.Z[i]) for i in range(s)]
            M = newton_matrix(A, r.h, [Ji[:, :nx] for Ji in J])
            th = ca.solve(M.T, ca.vertcat(*[float(bw[i]) * r.h * lam for i in range(s)]))
            theta = [th[i * nx:(i + 1) * nx] for i in range(s)]
            G = [ca.mtimes(J[i].T, theta[i]) for i in range(s)]
        grad = ca.vertcat(lam, ca.SX.zeros(nu)) + sum(G[1:], G[0])
        if not self.second_order:
            return grad[:nx], grad[nx:], None
        return grad[:nx], grad[nx:], self._second_order(r, theta, taus)

    def _second_order(self, r: SubstepRecord, theta: list[Any], taus: list[Any]) -> Any:
        """T' d(grad): the substep's contribution to the Hessian (module docstring)."""
        b, nx, nu = self.builder, self.nx, self.nu
        A, s = b.A, len(r.X)
        assert r.J is not None and r.dX is not None
        E = ca.horzcat(ca.SX(nu, nx), ca.SX.eye(nu))
        P = [ca.mtimes(self.calculus.hessian(r.X[i], r.u, r.p, taus[i], r.Z[i], theta[i]), ca.vertcat(r.dX[i], E))
             for i in range(s)]
        m = nx + nu
        if b.explicit:
            dtheta: list[Any] = [None] * s
            for i in reversed(range(s)):
                later = [j for j in range(i + 1, s) if A[j, i] != 0.0]
                dtheta[i] = combine(ca.SX.zeros(nx, m), r.h, [A[j, i] for j in later],
                                    [P[j][:nx, :] + ca.mtimes(r.J[j][:, :nx].T, dtheta[j]) for j in later])
        else:
            M = newton_matrix(A, r.h, [Ji[:, :nx] for Ji in r.J])
            rhs = ca.vertcat(*[combine(ca.SX.zeros(nx, m), r.h, A[:, i], [Pj[:nx, :] for Pj in P])
                               for i in range(s)])
            d = ca.solve(M.T, rhs)
            dtheta = [d[i * nx:(i + 1) * nx, :] for i in range(s)]
        dgrad = sum((ca.mtimes(r.J[i].T, dtheta[i]) + P[i] for i in range(1, s)),
                    ca.mtimes(r.J[0].T, dtheta[0]) + P[0])
        T = ca.vertcat(r.S, E)
        H = ca.mtimes(T.T, dgrad)
        # (symmetrised: exactly symmetric in exact arithmetic, its two triangles differ by rounding)
        return 0.5 * (H + H.T)

    # ----------------------------------------------------------------- steps
    def input_names(self) -> list[str]:
        return ["x", "u", "p", "t0", "dt", "lam"] + (["z0"] if self.nz else [])

    def output_names(self) -> list[str]:
        names = ["x_next"] + (["A", "B", "H"] if self.second_order else ["lam_x", "lam_u"])
        return names + (["err"] if self.embedded else []) + (["z"] if self.nz else [])

    def _outputs(self, x: Any, S: Any, lam_x: Any, lam_u: Any, H: Any, err: Any, z: Any) -> list[Any]:
        outs = [x] + ([S[:, :self.nx], S[:, self.nx:], H] if self.second_order else [lam_x, lam_u])
        outs += ([err] if self.embedded else []) + ([z] if self.nz else [])
        return [ca.densify(o) for o in outs]

    def _seed(self) -> ca.DM | None:
        return ca.horzcat(ca.DM.eye(self.nx), ca.DM(self.nx, self.nu)) if self.second_order else None

    def unrolled(self, steps: int, name: str) -> ca.Function:
        """All substeps in one flat SX Function: the forward pass, then the backward one."""
        x0, u, p, t0, dt, lam = (ca.SX.sym(n, k) for n, k in (("x", self.nx), ("u", self.nu), ("p", self.builder.npar),
                                                                 ("t0", 1), ("dt", 1), ("lam", self.nx)))
        z0 = ca.SX.sym("z0", self.nz)
        h = dt / steps
        records: list[SubstepRecord] = []
        x, S, z = x0, self._seed(), z0 if self.nz else None
        for n in range(steps):
            records.append(self.forward(x, S, u, p, t0 + n * h if n else t0, h, z))
            x, S, z = records[-1].x_next, records[-1].S_next, records[-1].z_next
        lam_u, H, err = ca.SX.zeros(self.nu), ca.SX.zeros(self.nx + self.nu, self.nx + self.nu), None
        lam_n = lam
        for r in reversed(records):
            lam_n, lu, Hn = self.backward(r, lam_n)
            lam_u = lam_u + lu
            if Hn is not None:
                H = H + Hn
            if r.err is not None:
                err = r.err if err is None else err + r.err
        ins = [x0, u, p, t0, dt, lam] + ([z0] if self.nz else [])
        return ca.Function(name, ins, self._outputs(x, S, lam_n, lam_u, H, err, z), self.input_names(),
                           self.output_names(), {"cse": True})

    def doubled(self, steps: int, name: str, block: int = 1) -> ca.Function:
        """All substeps by binary doubling (module docstring); levels up to `block` substeps are flat SX."""
        fwd, adj = [self._level_forward(name)], [self._level_adjoint(name)]
        while len(fwd) < steps.bit_length():
            k = len(fwd)
            kind: Any = ca.SX if 2 ** k <= block else ca.MX
            fwd.append(self._double_forward(fwd[-1], k, kind, name))
            adj.append(self._double_adjoint(fwd[-2], adj[-1], k, kind, name))
        ins = [ca.MX.sym(n, k) for n, k in (("x", self.nx), ("u", self.nu), ("p", self.builder.npar), ("t0", 1),
                                            ("dt", 1), ("lam", self.nx))]
        z0 = ca.MX.sym("z0", self.nz)
        x0, u, p, t0, dt, lam = ins
        h = dt / steps
        # forward through the binary digits of N, keeping each segment's start
        seed = self._seed()
        state = {"x": x0, "S": None if seed is None else ca.MX(seed), "z": z0 if self.nz else None}
        segments, offset = [], 0
        for k in reversed(range(steps.bit_length())):
            if not (steps >> k) & 1:
                continue
            segments.append((k, dict(state), t0 + float(offset) * h))
            if len(segments) < bin(steps).count("1"):  # (the last segment's end comes from its adjoint level)
                r = fwd[k].call(self._call_args(fwd[k], state, u, p, segments[-1][2], h, None))
                state = {"x": r["x_next"], "S": r.get("S_next"), "z": r.get("z_next")}
            offset += 2 ** k
        # backward through the segments
        lam_u = ca.MX.zeros(self.nu)
        H = ca.MX.zeros(self.nx + self.nu, self.nx + self.nu)
        err, lam_n, last = None, lam, None
        for k, start, t in reversed(segments):
            r = adj[k].call(self._call_args(adj[k], start, u, p, t, h, lam_n))
            last = last or r
            lam_n, lam_u = r["lam_x"], lam_u + r["lam_u"]
            if self.second_order:
                H = H + r["H"]
            if self.embedded:
                err = r["err"] if err is None else err + r["err"]
        assert last is not None
        outs = self._outputs(last["x_next"], last.get("S_next"), lam_n, lam_u, H, err, last.get("z_next"))
        return ca.Function(name, ins + ([z0] if self.nz else []), outs, self.input_names(), self.output_names(),
                           {"never_inline": True})

    @staticmethod
    def _call_args(F: ca.Function, state: dict[str, Any], u: Any, p: Any, t: Any, h: Any,
                   lam: Any) -> dict[str, Any]:
        args = {**state, "u": u, "p": p, "t": t, "h": h, "lam": lam}
        return {k: v for k, v in args.items() if k in F.name_in()}

    # ---------------------------------------------------------------- levels
    def _symbols(self, kind: Any, with_lam: bool) -> dict[str, Any]:
        """A level's inputs (empty ones left out, as `shooting.integrate.integrator` does)."""
        sizes = {"x": (self.nx, 1), "S": (self.nx, self.nx + self.nu) if self.second_order else (0, 0),
                 "u": (self.nu, 1), "p": (self.builder.npar, 1), "t": (1, 1), "h": (1, 1), "z": (self.nz, 1),
                 "lam": (self.nx, 1) if with_lam else (0, 0)}
        return {k: kind.sym(k, *v) for k, v in sizes.items() if v[0] * v[1] > 0}

    def _level_forward(self, name: str) -> ca.Function:
        a = self._symbols(ca.SX, False)
        r = self.forward(a["x"], a.get("S"), a.get("u", ca.SX(0, 1)), a.get("p", ca.SX(0, 1)), a["t"], a["h"],
                         a.get("z"))
        outs = {"x_next": r.x_next, "S_next": r.S_next, "err": r.err, "z_next": r.z_next}
        outs = {k: v for k, v in outs.items() if v is not None}
        return ca.Function(f"{name}_fwd", list(a.values()), list(outs.values()), list(a), list(outs), {"cse": True})

    def _level_adjoint(self, name: str) -> ca.Function:
        a = self._symbols(ca.SX, True)
        r = self.forward(a["x"], a.get("S"), a.get("u", ca.SX(0, 1)), a.get("p", ca.SX(0, 1)), a["t"], a["h"],
                         a.get("z"))
        lam_x, lam_u, H = self.backward(r, a["lam"])
        outs = {"x_next": r.x_next, "S_next": r.S_next, "lam_x": lam_x, "lam_u": lam_u, "H": H, "err": r.err,
                "z_next": r.z_next}
        outs = {k: v for k, v in outs.items() if v is not None}
        return ca.Function(f"{name}_adj", list(a.values()), list(outs.values()), list(a), list(outs), {"cse": True})

    @staticmethod
    def _double_forward(prev: ca.Function, k: int, kind: Any, name: str) -> ca.Function:
        names = prev.name_in()
        sym = [kind.sym(n, prev.sparsity_in(i)) for i, n in enumerate(names)]
        a = dict(zip(names, sym, strict=True))
        first = prev.call(a)
        second = prev.call(_carried(a, first, 2 ** (k - 1)))
        out = dict(second)
        if "err" in out:
            out["err"] = first["err"] + second["err"]
        return ca.Function(f"{name}_fwd{2 ** k}", sym, [out[o] for o in prev.name_out()], names, prev.name_out(),
                           {"cse": True} if kind is ca.SX else {})

    @staticmethod
    def _double_adjoint(fwd: ca.Function, prev: ca.Function, k: int, kind: Any, name: str) -> ca.Function:
        names = prev.name_in()
        sym = [kind.sym(n, prev.sparsity_in(i)) for i, n in enumerate(names)]
        a = dict(zip(names, sym, strict=True))
        mid = fwd.call({n: v for n, v in a.items() if n in fwd.name_in()})
        second = prev.call({**_carried(a, mid, 2 ** (k - 1))})
        first = prev.call({**a, "lam": second["lam_x"]})
        out = dict(second)
        out["lam_x"] = first["lam_x"]
        for key in ("lam_u", "H", "err"):
            if key in out:
                out[key] = first[key] + second[key]
        return ca.Function(f"{name}_adj{2 ** k}", sym, [out[o] for o in prev.name_out()], names, prev.name_out(),
                           {"cse": True} if kind is ca.SX else {})


def _carried(a: dict[str, Any], r: dict[str, Any], substeps: int) -> dict[str, Any]:
    """The second half's inputs: the first half's end state (x, S, z) and its start time."""
    carried = {"x": "x_next", "S": "S_next", "z": "z_next"}
    return {**a, **{i: r[o] for i, o in carried.items() if i in a}, "t": a["t"] + float(substeps) * a["h"]}
