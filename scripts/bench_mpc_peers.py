#!/usr/bin/env python3
"""Peers for `bench_mpc.py`: the same cart-pole OCP in plain CasADi Opti, do-mpc and rockit.

Every peer solves exactly the NLP of `shooting.MultipleShootingOCP` with
RK4 (one substep per interval):

    min  sum_{k<N} x_k' Q x_k + u_k' R u_k  +  x_N' Q_terminal x_N
    s.t. x_0 = x0,  x_{k+1} = RK4(x_k, u_k, dt),  |u_k| <= u_max,  x_min <= x_{1..N} <= x_max

with IPOPT's options taken from `shooting.mpc.solvers` (`DEFAULT_IPOPT_OPTIONS` for a
cold solve, plus `WARM_START_OPTIONS` for warm re-solves, each on its own
solver instance as shooting does), so the comparison measures formulation and
tooling, not tolerances. Each peer exposes ``build()``, ``cold(x0)`` (from
the same cold guess as shooting: every state at x0, every input 0, no
multipliers) and ``warm(x)`` (from its own previous solution, shifted one
stage where the tool lets us).

Run on its own it only reports which peers are importable and how to install
them (`--quick` does the same; it exists for the test suite):

    python scripts/bench_mpc_peers.py
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import time
import warnings
from dataclasses import dataclass, field

import casadi as ca
import numpy as np

import shooting
from shooting import MultipleShootingOCP
from shooting.mpc.solvers import DEFAULT_IPOPT_OPTIONS, WARM_START_OPTIONS

#: IPOPT's own wall time (`t_wall_total` in `stats()`) is only recorded with this.
TIMING_OPTIONS = {"record_time": True}

#: pip requirement for each optional peer (benchmark-only, not a project dependency).
PEER_PACKAGES = {"do_mpc": "do-mpc", "rockit": "rockit-meco"}
INSTALL_HINT = "pip install " + " ".join(PEER_PACKAGES.values())


# --------------------------------------------------------------------- problem
@dataclass
class Problem:
    """The benchmark OCP (acados' cart-pole swing-up) and everything a peer needs to state it."""

    model: shooting.Model
    N: int
    dt: float
    Q: np.ndarray
    R: np.ndarray
    Qf: np.ndarray
    x0: np.ndarray
    cold_options: dict = field(default_factory=lambda: {**DEFAULT_IPOPT_OPTIONS, **TIMING_OPTIONS})

    @property
    def warm_options(self) -> dict:
        return {**self.cold_options, **WARM_START_OPTIONS}

    @property
    def nx(self) -> int:
        return self.model.nx

    @property
    def nu(self) -> int:
        return self.model.nu

    @property
    def x_min(self) -> np.ndarray:
        return self.model.x_min

    @property
    def x_max(self) -> np.ndarray:
        return self.model.x_max

    @property
    def u_min(self) -> np.ndarray:
        return self.model.u_min

    @property
    def u_max(self) -> np.ndarray:
        return self.model.u_max

    def ode(self) -> ca.Function:
        """f(x, u) -> xdot in SX (the model's parameters fixed at p0, t = 0)."""
        x, u = ca.SX.sym("x", self.nx), ca.SX.sym("u", self.nu)
        return ca.Function("ode", [x, u], [self.model.f(x, u, self.model.p0, 0)], ["x", "u"], ["xdot"])

    def rk4(self, f: ca.Function, x, u):
        """One classical RK4 step of length dt written inline (works on SX, MX)."""
        h = self.dt
        k1 = f(x, u)
        k2 = f(x + h / 2 * k1, u)
        k3 = f(x + h / 2 * k2, u)
        k4 = f(x + h * k3, u)
        return x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def cost(self, X: np.ndarray, U: np.ndarray) -> float:
        """The objective of a trajectory X (N+1, nx), U (N, nu) under the benchmark weights."""
        X, U = np.asarray(X, float), np.asarray(U, float)
        stage = np.einsum("ki,ij,kj->", X[:-1], self.Q, X[:-1]) + np.einsum("ki,ij,kj->", U, self.R, U)
        return float(stage + X[-1] @ self.Qf @ X[-1])

    def cold_guess(self) -> tuple[np.ndarray, np.ndarray]:
        """shooting's cold start: every state at x0, every input at 0 (u_ref clipped to the bounds)."""
        X = np.tile(self.x0, (self.N + 1, 1))
        U = np.tile(np.clip(np.zeros(self.nu), self.u_min, self.u_max), (self.N, 1))
        return X, U


@dataclass
class Result:
    """One solve of one peer. Times in seconds; `step` = warm-start setup + solve + reading the solution."""

    u0: np.ndarray
    X: np.ndarray
    U: np.ndarray
    cost: float  # the peer's own objective value
    iterations: int
    success: bool
    status: str
    solve: float  # perf_counter around the solver call only
    step: float  # the whole MPC step (includes `solve`)
    ipopt: float  # IPOPT's t_wall_total (nan where not available)


def _stat(stats: dict, key: str, default=float("nan")):
    v = stats.get(key, default)
    return default if v is None else v


def _shift(A: np.ndarray) -> np.ndarray:
    return np.vstack([A[1:], A[-1:]])


# --------------------------------------------------------------------- shooting
class ShootingPeer:
    """`shooting.MultipleShootingOCP` (the subject of the benchmark)."""

    name = "shooting"
    note = "SX NLP, bounds as lbx/ubx, interleaved w, shifted primal+dual warm start"

    def __init__(self, prob: Problem, label: str | None = None, **ocp_kwargs) -> None:
        self.prob, self.kwargs = prob, ocp_kwargs
        if label:
            self.name = label
        self.ocp: MultipleShootingOCP | None = None
        self.sol = None

    def build(self) -> None:
        p = self.prob
        kw = dict(self.kwargs)
        opts = {**TIMING_OPTIONS, **kw.pop("solver_options", {})}
        self.ocp = MultipleShootingOCP(p.model, horizon=p.N, dt=p.dt, method="rk4", steps=1, Q=p.Q, R=p.R,
                                       Q_terminal=p.Qf, solver_options=opts, **kw)

    def _result(self, sol, solver, t_solve: float, t_step: float) -> Result:
        self.sol = sol
        return Result(sol.u[0].copy(), sol.x, sol.u, sol.cost, sol.iterations, sol.success, sol.status,
                      t_solve, t_step, _stat(solver.stats(), "t_wall_total"))

    def cold(self, x0) -> Result:
        t = time.perf_counter()
        sol = self.ocp.solve(x0)
        dt = time.perf_counter() - t
        return self._result(sol, self.ocp.nlp_solver, dt, dt)

    def warm(self, x) -> Result:
        t0 = time.perf_counter()
        ws = self.sol.shifted()
        t1 = time.perf_counter()
        sol = self.ocp.solve(x, warm_start=ws)
        t2 = time.perf_counter()
        return self._result(sol, self.ocp.warm_nlp_solver, t2 - t1, t2 - t0)


# --------------------------------------------------------------------- Opti helpers
class _OptiShift:
    """Shift maps for an Opti problem's decision vector and constraint multipliers.

    A constraint row's "stage" is the first stage whose x_k or u_k it touches
    and its signature the (kind, component, k - stage) set it touches plus
    whether it is an equality; the shifted multiplier of a row at stage s is
    the multiplier of the row with the same signature at stage s + 1 (or its
    own where there is none: the last stage is repeated, as in shooting, and
    the initial-state rows keep theirs). This works without knowing in which
    order a tool (rockit) adds its constraints.
    """

    def __init__(self, opti: ca.Opti, X: list, U: list) -> None:
        where: dict[int, tuple[str, int, int]] = {}
        for kind, cols in (("x", X), ("u", U)):
            for k, e in enumerate(cols):
                r, c = ca.jacobian(ca.vec(e), opti.x).sparsity().get_triplet()
                for i, j in zip(r, c, strict=True):
                    where[j] = (kind, i, k)
        g = opti.g
        jr, jc = ca.jacobian(g, opti.x).sparsity().get_triplet()
        deps: dict[int, list] = {i: [] for i in range(g.numel())}
        for i, j in zip(jr, jc, strict=True):
            if j in where:
                deps[i].append(where[j])
        init = opti.initial() + opti.value_parameters()
        lbg = np.array(opti.debug.value(opti.lbg, init), dtype=float).ravel()
        ubg = np.array(opti.debug.value(opti.ubg, init), dtype=float).ravel()
        key_of: dict[tuple, int] = {}
        rows = []
        for i in range(g.numel()):
            if not deps[i]:
                rows.append(None)
                continue
            s = min(k for _, _, k in deps[i])
            sig = (tuple(sorted((kind, c, k - s) for kind, c, k in set(deps[i]))), bool(lbg[i] == ubg[i]))
            rows.append((s, sig))
            key_of[(s, sig)] = i
        self.g_map = np.arange(g.numel())
        for i, r in enumerate(rows):
            if r is not None and (r[0] + 1, r[1]) in key_of:
                self.g_map[i] = key_of[(r[0] + 1, r[1])]


# --------------------------------------------------------------------- Opti
class OptiPeer:
    """The same OCP written the usual `casadi.Opti` way (MX, constraints in g)."""

    def __init__(self, prob: Problem, expand: bool = False) -> None:
        self.prob, self.expand = prob, expand
        self.name = "Opti" + (" expand" if expand else "")
        self.note = ("casadi.Opti, inline RK4, bounds as g rows via opti.bounded"
                     + (", nlpsol expand=True (SX)" if expand else ", MX graph (default)"))

    def _make(self, opts: dict):
        p = self.prob
        f = p.ode()
        opti = ca.Opti()
        X = opti.variable(p.nx, p.N + 1)
        U = opti.variable(p.nu, p.N)
        X0 = opti.parameter(p.nx)
        Q, R, Qf = ca.DM(p.Q), ca.DM(p.R), ca.DM(p.Qf)
        J = 0
        opti.subject_to(X[:, 0] == X0)
        for k in range(p.N):
            J += ca.bilin(Q, X[:, k], X[:, k]) + ca.bilin(R, U[:, k], U[:, k])
            opti.subject_to(X[:, k + 1] == p.rk4(f, X[:, k], U[:, k]))
            opti.subject_to(opti.bounded(p.u_min, U[:, k], p.u_max))
            for i in np.nonzero(np.isfinite(p.x_min) | np.isfinite(p.x_max))[0]:
                opti.subject_to(opti.bounded(p.x_min[i], X[int(i), k + 1], p.x_max[i]))
        J += ca.bilin(Qf, X[:, p.N], X[:, p.N])
        opti.minimize(J)
        opti.solver("ipopt", {**opts, **({"expand": True} if self.expand else {})})
        opti.set_value(X0, p.x0)
        return opti, X, U, X0

    def build(self) -> None:
        p = self.prob
        self.c = self._make(p.cold_options)
        self.w = self._make(p.warm_options)
        opti, X, U, _ = self.w
        self.shift = _OptiShift(opti, [X[:, k] for k in range(p.N + 1)], [U[:, k] for k in range(p.N)])
        # Opti creates its nlpsol lazily on the first solve: do that here (it is
        # part of building), on the warm instance from the cold guess.
        self._cold_on(self.w, p.x0)

    def _cold_on(self, inst, x0) -> Result:
        opti, X, U, X0 = inst
        t0 = time.perf_counter()
        Xg, Ug = self.prob.cold_guess()
        Xg[:] = x0
        opti.set_value(X0, x0)
        opti.set_initial(X, Xg.T)
        opti.set_initial(U, Ug.T)
        opti.set_initial(opti.lam_g, np.zeros(opti.ng))
        return self._solve(inst, t0)

    def _solve(self, inst, t0: float) -> Result:
        opti, X, U, _ = inst
        t1 = time.perf_counter()
        try:
            sol = opti.solve()
            val = sol.value
        except RuntimeError:  # IPOPT did not converge: Opti raises; read the last iterate
            val = opti.debug.value
        t2 = time.perf_counter()
        Xv = np.array(val(X)).reshape(self.prob.nx, -1).T
        Uv = np.array(val(U)).reshape(self.prob.nu, -1).T
        lam = np.array(val(opti.lam_g)).ravel()
        t3 = time.perf_counter()
        self.last = (Xv, Uv, lam)
        st = opti.stats()
        return Result(Uv[0].copy(), Xv, Uv, float(val(opti.f)), int(_stat(st, "iter_count", -1)),
                      bool(st.get("success", False)), str(st.get("return_status", "?")), t2 - t1, t3 - t0,
                      _stat(st, "t_wall_total"))

    def cold(self, x0) -> Result:
        return self._cold_on(self.c, x0)

    def warm(self, x) -> Result:
        opti, X, U, X0 = self.w
        t0 = time.perf_counter()
        Xv, Uv, lam = self.last
        opti.set_value(X0, x)
        opti.set_initial(X, _shift(Xv).T)
        opti.set_initial(U, _shift(Uv).T)
        opti.set_initial(opti.lam_g, lam[self.shift.g_map])
        return self._solve(self.w, t0)


# --------------------------------------------------------------------- do-mpc
def _import(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # do-mpc warns at import that torch (approximate MPC) is missing
        return importlib.import_module(name)


class DoMpcPeer:
    """do-mpc's `MPC.make_step` on a discrete-time model (the RK4 step) or on its default collocation."""

    def __init__(self, prob: Problem, collocation: bool = False) -> None:
        self.prob, self.collocation = prob, collocation
        self.name = "do-mpc colloc" if collocation else "do-mpc"
        self.note = ("do-mpc default orthogonal collocation (Radau, degree 2): a different discretisation, "
                     "for reference only" if collocation else
                     "do-mpc model_type='discrete' with the same inline RK4 step; its native warm start: "
                     "previous solution NOT shifted, one solver (no IPOPT warm-start options)")

    def build(self) -> None:
        do_mpc = _import("do_mpc")
        p = self.prob
        model = do_mpc.model.Model("continuous" if self.collocation else "discrete", "SX")
        x = model.set_variable("_x", "x", shape=(p.nx, 1))
        u = model.set_variable("_u", "u", shape=(p.nu, 1))
        f = p.ode()
        model.set_rhs("x", f(x, u) if self.collocation else p.rk4(f, x, u))
        model.setup()
        mpc = do_mpc.controller.MPC(model)
        s = mpc.settings
        s.n_horizon, s.t_step = p.N, p.dt
        s.store_full_solution = False
        s.store_lagr_multiplier = False
        s.use_terminal_bounds = True  # do-mpc's default leaves x_N unbounded
        s.nlpsol_opts = dict(p.cold_options)
        Q, R, Qf = ca.DM(p.Q), ca.DM(p.R), ca.DM(p.Qf)
        mpc.set_objective(lterm=ca.bilin(Q, x, x) + ca.bilin(R, u, u), mterm=ca.bilin(Qf, x, x))
        mpc.bounds["lower", "_u", "u"] = p.u_min
        mpc.bounds["upper", "_u", "u"] = p.u_max
        mpc.bounds["lower", "_x", "x"] = p.x_min
        mpc.bounds["upper", "_x", "x"] = p.x_max
        mpc.setup()
        self.mpc = mpc
        self.f_fun = ca.Function("f", [mpc.nlp["x"], mpc.nlp["p"]], [mpc.nlp["f"]])

    def _reset(self, x0) -> None:
        m = self.mpc
        m.reset_history()
        m.x0 = np.asarray(x0, float).reshape(-1, 1)
        m.u0 = np.zeros((self.prob.nu, 1))
        m.set_initial_guess()
        m.flags["initial_run"] = False  # no multipliers on a cold solve

    def _step(self, x) -> Result:
        m, p = self.mpc, self.prob
        t0 = time.perf_counter()
        u0 = m.make_step(np.asarray(x, float).reshape(-1, 1))
        t1 = time.perf_counter()
        xs = m.opt_x_num_unscaled
        Xv = np.hstack([np.array(xs["_x", k, 0, -1]) for k in range(p.N + 1)]).T
        Uv = np.hstack([np.array(xs["_u", k, 0]) for k in range(p.N)]).T
        st = m.solver_stats
        return Result(np.asarray(u0, float).ravel(), Xv, Uv, float(self.f_fun(m.opt_x_num, m.opt_p_num)),
                      int(_stat(st, "iter_count", -1)), bool(st.get("success", False)),
                      str(st.get("return_status", "?")), t1 - t0, t1 - t0, _stat(st, "t_wall_total"))

    def cold(self, x0) -> Result:
        self._reset(x0)
        return self._step(x0)

    def warm(self, x) -> Result:
        return self._step(x)


# --------------------------------------------------------------------- rockit
class RockitPeer:
    """rockit's `Ocp` with `MultipleShooting(N, M=1, intg='rk')` (RK4), re-solved via set_value/set_initial."""

    def __init__(self, prob: Problem, expand: bool = False) -> None:
        self.prob, self.expand = prob, expand
        self.name = "rockit" + (" expand" if expand else "")
        self.note = ("rockit MultipleShooting(M=1, intg='rk'), x0 as ocp.parameter, bounds as g rows; "
                     "warm: ocp.set_initial (shifted) + lam_g through its Opti"
                     + ("; solver option expand=True" if expand else "; MX (rockit's default)"))

    def _make(self, opts: dict):
        rockit = _import("rockit")
        p = self.prob
        f = p.ode()
        ocp = rockit.Ocp(T=p.N * p.dt)
        x = ocp.state(p.nx)
        u = ocp.control(p.nu)
        x0 = ocp.parameter(p.nx)
        ocp.set_der(x, f(x, u))
        ocp.subject_to(ocp.at_t0(x) == x0)
        ocp.subject_to(p.u_min <= (u <= p.u_max))
        for i in np.nonzero(np.isfinite(p.x_min) | np.isfinite(p.x_max))[0]:
            ocp.subject_to(p.x_min[i] <= (x[int(i)] <= p.x_max[i]), include_first=False)
        Q, R, Qf = ca.DM(p.Q), ca.DM(p.R), ca.DM(p.Qf)
        ocp.add_objective(ocp.sum(ca.bilin(Q, x, x) + ca.bilin(R, u, u)))  # k = 0..N-1
        ocp.add_objective(ocp.at_tf(ca.bilin(Qf, x, x)))
        ocp.method(rockit.MultipleShooting(N=p.N, M=1, intg="rk"))
        ocp.solver("ipopt", {**opts, **({"expand": True} if self.expand else {})})
        ocp.set_value(x0, p.x0)
        Xg, Ug = p.cold_guess()
        ocp.set_initial(x, Xg.T)
        ocp.set_initial(u, Ug.T)
        return ocp, x, u, x0

    def build(self) -> None:
        p = self.prob
        self.c = self._make(p.cold_options)
        self.w = self._make(p.warm_options)
        # rockit transcribes on the first solve and Opti creates its nlpsol then:
        # one solve of each instance belongs to building.
        self._cold_on(self.c, p.x0)
        self._cold_on(self.w, p.x0)
        opti = self.w[0]._method.opti
        meth = self.w[0]._method
        self.shift = _OptiShift(opti, list(meth.X), list(meth.U))

    def _cold_on(self, inst, x0) -> Result:
        ocp, x, u, x0p = inst
        t0 = time.perf_counter()
        Xg, Ug = self.prob.cold_guess()
        Xg[:] = x0
        ocp.set_value(x0p, x0)
        ocp.set_initial(x, Xg.T)
        ocp.set_initial(u, Ug.T)
        if ocp.is_transcribed:
            opti = ocp._method.opti
            ca.Opti.set_initial(opti, opti.lam_g, np.zeros(opti.ng))
        return self._solve(inst, t0)

    def _solve(self, inst, t0: float) -> Result:
        ocp, x, u, _ = inst
        t1 = time.perf_counter()
        try:
            sol = ocp.solve()
            val, stats = sol.sol.sol.value, sol.stats
        except RuntimeError:
            sol = ocp.non_converged_solution
            val, stats = sol.sol.sol.value, ocp._method.opti.stats()
        t2 = time.perf_counter()
        opti = ocp._method.opti
        Xv = np.asarray(sol.sample(x, grid="control")[1]).reshape(self.prob.N + 1, self.prob.nx)
        Uv = np.asarray(sol.sample(u, grid="control")[1]).reshape(self.prob.N + 1, self.prob.nu)[:-1]
        lam = np.array(val(opti.lam_g)).ravel()
        t3 = time.perf_counter()
        self.last = (Xv, Uv, lam)
        st = stats if isinstance(stats, dict) else stats()
        return Result(Uv[0].copy(), Xv, Uv, float(val(opti.f)), int(_stat(st, "iter_count", -1)),
                      bool(st.get("success", False)), str(st.get("return_status", "?")), t2 - t1, t3 - t0,
                      _stat(st, "t_wall_total"))

    def cold(self, x0) -> Result:
        return self._cold_on(self.c, x0)

    def warm(self, xk) -> Result:
        ocp, x, u, x0p = self.w
        t0 = time.perf_counter()
        Xv, Uv, lam = self.last
        ocp.set_value(x0p, xk)
        ocp.set_initial(x, _shift(Xv).T)
        ocp.set_initial(u, _shift(Uv).T)
        opti = ocp._method.opti
        ca.Opti.set_initial(opti, opti.lam_g, lam[self.shift.g_map])
        return self._solve(self.w, t0)


# --------------------------------------------------------------------- registry
def peer_status() -> dict[str, str | None]:
    """{module: version or None} for the optional peers."""
    out: dict[str, str | None] = {}
    for mod, dist in PEER_PACKAGES.items():
        try:
            _import(mod)
            out[mod] = importlib.metadata.version(dist)
        except Exception:  # noqa: BLE001 - any import failure means "skip this peer"
            out[mod] = None
    return out


#: The label of shooting with ``compile_nlp=True``.
COMPILED = "shooting (C)"


def make_peers(prob: Problem, *, variants: bool) -> tuple[list, list[str]]:
    """The peers to run (shooting first, then shooting compiled) and a line per skipped peer.

    ``variants`` adds Opti/rockit with ``expand=True`` and do-mpc's collocation.
    """
    if prob.model.nz:  # the peers here state x' = f(x, u) (`Problem.ode`): no algebraic states
        return [ShootingPeer(prob)], [f"Opti, do-mpc, rockit: model {prob.model.name} has algebraic states, which "
                                      f"this benchmark's peer formulations (an ODE stepped by RK4) do not state"]
    status = peer_status()
    # shooting as built by default (SX functions), and with compile_nlp=True
    # (the NLP compiled once into the cache: this process's first build
    # compiles, a later process loads it).
    compiled = ShootingPeer(prob, label=COMPILED, compile_nlp=True)
    compiled.note = ("the same NLP with compile_nlp=True: its functions compiled by gcc into the cache (this process "
                     "builds the entry, a later one loads it)")
    peers: list = [ShootingPeer(prob, compile_nlp=False), compiled, OptiPeer(prob)]
    if variants:
        peers.append(OptiPeer(prob, expand=True))
    skipped = []
    if status["do_mpc"]:
        peers.append(DoMpcPeer(prob))
        if variants:
            peers.append(DoMpcPeer(prob, collocation=True))
    else:
        skipped.append(f"do-mpc: not importable, skipped (pip install {PEER_PACKAGES['do_mpc']})")
    if status["rockit"]:
        peers.append(RockitPeer(prob))
        if variants:
            peers.append(RockitPeer(prob, expand=True))
    else:
        skipped.append(f"rockit: not importable, skipped (pip install {PEER_PACKAGES['rockit']})")
    return peers, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="same output (kept for the test suite)")
    ap.parse_args(argv)
    print(f"casadi {ca.__version__} (IPOPT via nlpsol)")
    for mod, ver in peer_status().items():
        print(f"{PEER_PACKAGES[mod]:<12} {ver or 'not installed'}")
    print(f"install the optional peers with: {INSTALL_HINT}")
    print("run the benchmark with: python scripts/bench_mpc.py [--quick] [--models all]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
