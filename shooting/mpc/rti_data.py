"""The RTI QP's data as one CasADi Function over all stages: what a sample's preparation evaluates.

``qp_data(xb (nx, N+1), ub (nu, N), p (np, N), t0, x_ref (nx, N+1), u_ref (nu, N))`` gives every array of the
sample's `StageQP` that depends on the guess and the data (`shooting.mpc.rti_stage` states the QP), each
laid out as the QP's C reads it: a matrix field is the horizontal concatenation of its stage blocks, so its
column-major nonzeros are the blocks one after the other, column-major (``A`` is (nx, N nx)). One mapped
stage Function (``rti_stage_data``) and the terminal stage's give them, in one call: the numpy RTI evaluates
it in CasADi's virtual machine, the compiled RTI (`shooting.mpc.rti_library`) in C, its outputs written
straight into the compiled QP's buffers.

Per stage k < N, at the guess (xb_k, ub_k) and t_k = t0 + k dt::

    A, B, x_next = the step and its sensitivities,   b = x_next - A xb - B ub
    Q = 2 Q_w + hxx,  S = hux,  R = 2 R_w + huu,     q = -2 Q_w xr - hxx xb - hux' ub + gx,
                                                      r = -2 R_w ur - hux xb - huu ub + gu
    C = dh/dx,  D = dh/du,  ug = C xb + D ub - h      (path rows, h <= 0)

with (hxx, hux, huu, gx, gu) the extra stage cost's QP model (`shooting.mpc.costs.expansion`; zero
without one), and at N: Q_N = 2 Qf + hN, q_N = -2 Qf xr_N - hN xb_N + gN, CN = dc/dx and
lgN = ugN = CN xb_N - c (terminal rows). With an extra cost the outputs ``M`` (n, N n), n = nx + nu, and
``M_N`` (nx, nx) are each stage's whole Hessian block [Q S'; S R] before the rate penalty: the block
`shooting.mpc.costs.convexify` tests (`convexify_stages` adds its shift where one is needed). With a rate
penalty every field is already the augmented state's x~ = [x; u_prev] (`shooting.mpc.rti_stage`).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.mpc.costs import CONVEXIFY_TAU, convexify, expansion
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.qp import StageQP

__all__ = ["INPUTS", "MATRICES", "DataEvaluator", "QPData", "as_blocks", "constraint_functions", "convexify_stages",
           "cost_expansions", "cost_values", "curved_constraints", "qp_data_function"]

FloatArray = npt.NDArray[np.float64]

#: The Function's inputs, in order.
INPUTS = ("xb", "ub", "p", "t0", "x_ref", "u_ref")


@dataclass(frozen=True)
class QPData:
    """The sample's data Function and how its outputs map onto a `StageQP`.

    Attributes
    ----------
    function : casadi.Function
        ``qp_data`` of the module docstring (inputs `INPUTS`, outputs `outputs`).
    outputs : tuple of str
        Its outputs: `StageQP` field names, then ``M``, ``M_N`` with an extra cost.
    shapes : dict of str to tuple
        Each output's shape as the `StageQP` field (or the convexity block) holds it: (stages, rows, cols),
        (stages, n) or (rows, cols).
    nx : int
        The QP's state size (nx + nu under a rate penalty).
    instructions : int
        SX instructions of one stage's and the terminal stage's Functions (what compiling them costs; 0 when
        the stage is MX around the step's calls).
    """

    function: ca.Function
    outputs: tuple[str, ...]
    shapes: dict[str, tuple[int, ...]]
    nx: int
    instructions: int = 0

    def arrays(self, values: list[npt.ArrayLike]) -> dict[str, FloatArray]:
        """The outputs' values (CasADi's dense matrices) as arrays of their `shapes`."""
        return {name: as_blocks(v, self.shapes[name], name in MATRICES)
                for name, v in zip(self.outputs, values, strict=True)}


#: The outputs that are matrices: each stage's block (or the one block) stored column-major.
MATRICES = frozenset({"A", "B", "Q", "S", "R", "Q_N", "C", "D", "CN", "M", "M_N"})


def as_blocks(values: npt.ArrayLike, shape: tuple[int, ...], matrix: bool) -> FloatArray:
    """A dense output (or its column-major nonzeros) as an array of `shape`.

    A matrix field, (stages, rows, cols) or (rows, cols), is stored column-major block after block; a vector
    field, (stages, n) or (n,), stage after stage.
    """
    a = np.asarray(values, dtype=float)
    flat = a.reshape(-1, order="F") if a.ndim == 2 else a.ravel()
    if not matrix:
        return flat.reshape(shape)
    stored = (*shape[:-2], shape[-1], shape[-2])
    return np.swapaxes(flat.reshape(stored), -1, -2)


class DataEvaluator:
    """Evaluates a `QPData` Function from its own input buffers into given output arrays, with no copies.

    In CasADi's virtual machine (``Function.buffer``), or, given `compiled`, by the Function's C in a loaded
    library (CasADi's calling convention through ctypes). Either way the outputs land in `outputs`.

    Parameters
    ----------
    data : QPData
    outputs : dict of str to ndarray
        One C-contiguous float64 array per output of ``data.function``, of its number of nonzeros (the
        column-major storage `as_blocks` reads).
    compiled : ctypes.CDLL, optional
        A library holding the Function's C under its name (and ``<name>_work``).

    Attributes
    ----------
    inputs : dict of str to ndarray
        The input buffers (`INPUTS`): xb (N+1, nx), ub (N, nu), p (N, np), t0 (1,), x_ref (N+1, nx),
        u_ref (N, nu), each in C order: the transposed input's column-major storage.
    """

    def __init__(self, data: QPData, outputs: dict[str, FloatArray], compiled: ctypes.CDLL | None = None) -> None:
        fn = data.function
        self.inputs = {name: np.zeros((fn.size2_in(i), fn.size1_in(i))) for i, name in enumerate(INPUTS)}
        self.outputs = outputs
        for i, name in enumerate(data.outputs):
            array = outputs[name]
            assert array.dtype == np.float64 and array.flags.c_contiguous and array.size >= fn.nnz_out(i), name
        if compiled is None:
            buffer: Any
            buffer, self._evaluate = fn.buffer()
            for i, name in enumerate(INPUTS):
                buffer.set_arg(i, self.inputs[name].data)
            for i, name in enumerate(data.outputs):
                buffer.set_res(i, outputs[name].data)
            self._buffer = buffer
            return
        sizes = [ctypes.c_longlong(0) for _ in range(4)]
        compiled[f"{fn.name()}_work"](*(ctypes.byref(v) for v in sizes))
        n_arg, n_res, n_iw, n_w = (max(int(v.value), 1) for v in sizes)
        ptr = ctypes.c_void_p
        self._arg = (ptr * n_arg)(*(self.inputs[name].ctypes.data for name in INPUTS))
        self._res = (ptr * n_res)(*(outputs[name].ctypes.data for name in data.outputs))
        self._iw, self._w = np.zeros(n_iw, dtype=np.int64), np.zeros(n_w)
        call = compiled[fn.name()]
        call.restype = ctypes.c_int
        args = (self._arg, self._res, ptr(self._iw.ctypes.data), ptr(self._w.ctypes.data), 0)
        self._evaluate = lambda: call(*args)

    def __call__(self, xb: FloatArray, ub: FloatArray, p: FloatArray, t0: float, x_ref: FloatArray,
                 u_ref: FloatArray) -> None:
        """Evaluate at the guess (xb (N+1, nx), ub (N, nu)) for the sample's data, into `outputs`."""
        i = self.inputs
        i["xb"][...], i["ub"][...], i["p"][...], i["t0"][...] = xb, ub, p, t0
        i["x_ref"][...], i["u_ref"][...] = x_ref, u_ref
        self._evaluate()

    def evaluate(self) -> None:
        """Evaluate at what the input buffers hold, into `outputs`."""
        self._evaluate()


def constraint_functions(ocp: MultipleShootingOCP) -> tuple[ca.Function | None, ca.Function | None]:
    """The OCP's path and terminal constraints with their exact Jacobians (SX, for the RTI and the C).

    Returns
    -------
    path : casadi.Function or None
        ``(x (nx), u (nu), p (np)) -> (h (nh), Hx (nh, nx), Hu (nh, nu))``.
    terminal : casadi.Function or None
        ``(x (nx), p (np)) -> (c (nc), Cx (nc, nx))``.
    """
    con = ocp.problem.constraints
    nx, nu, npar = ocp.nx, ocp.nu, ocp.np
    x, u, p = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("p", npar)
    path = terminal = None
    if con.path_constraints is not None:
        h = ca.SX(con.path_constraints(x, u, p))
        path = ca.Function(f"{ocp.model.name}_path", [x, u, p],
                           [ca.densify(h), ca.densify(ca.jacobian(h, x)), ca.densify(ca.jacobian(h, u))],
                           ["x", "u", "p"], ["h", "Hx", "Hu"])
    if con.terminal_constraints is not None:
        c = ca.SX(con.terminal_constraints(x, p))
        terminal = ca.Function(f"{ocp.model.name}_terminal", [x, p], [ca.densify(c), ca.densify(ca.jacobian(c, x))],
                               ["x", "p"],
                               ["c", "Cx"])
    return path, terminal


def curved_constraints(ocp: MultipleShootingOCP,
                       functions: tuple[ca.Function | None, ca.Function | None] | None = None) -> bool:
    """Whether the OCP's path or terminal constraints are not linear in x and u (their Jacobians depend on them):
    then the Lagrangian's Hessian holds their curvature (`shooting.mpc.costs.hessians`). `functions`: the OCP's
    `constraint_functions` where the caller has them already."""
    path, terminal = constraint_functions(ocp) if functions is None else functions
    for f in (path, terminal):
        if f is not None:
            ins = [ca.SX.sym(f.name_in(i), f.size1_in(i)) for i in range(f.n_in())]
            jac = ca.vertcat(*[ca.vec(J) for J in f(*ins)[1:]])
            if any(ca.depends_on(jac, v) for v in ins[:-1] if v.numel()):
                return True
    return False


def cost_expansions(ocp: MultipleShootingOCP) -> tuple[ca.Function | None, ca.Function | None]:
    """The QP models of the OCP's ``stage_cost`` and ``terminal_cost`` (`shooting.mpc.costs.expansion`).

    Returns
    -------
    stage : casadi.Function or None
        ``(x, u, p) -> (Hxx (nx, nx), Hux (nu, nx), Huu (nu, nu), gx (nx), gu (nu))``.
    terminal : casadi.Function or None
        ``(x, p) -> (Hxx (nx, nx), gx (nx))``.
    """
    cost = ocp.problem.cost
    nx, nu, npar = ocp.nx, ocp.nu, ocp.np
    x, u, p = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("p", npar)
    stage = terminal = None
    if cost.stage_cost is not None:
        H, g = expansion(cost.stage_cost, ca.vertcat(x, u), x, u, p)
        stage = ca.Function(f"{ocp.model.name}_stage_cost_model", [x, u, p],
                            [ca.densify(v) for v in (H[:nx, :nx], H[nx:, :nx], H[nx:, nx:], g[:nx], g[nx:])],
                            ["x", "u", "p"], ["Hxx", "Hux", "Huu", "gx", "gu"])
    if cost.terminal_cost is not None:
        H, g = expansion(cost.terminal_cost, x, x, p)
        terminal = ca.Function(f"{ocp.model.name}_terminal_cost_model", [x, p], [ca.densify(H), ca.densify(g)],
                               ["x", "p"], ["Hxx", "gx"])
    return stage, terminal


def cost_values(ocp: MultipleShootingOCP) -> tuple[ca.Function | None, ca.Function | None]:
    """The OCP's ``stage_cost`` ``(x, u, p) -> c`` and ``terminal_cost`` ``(x, p) -> c`` as Functions, or None."""
    cost = ocp.problem.cost
    x, u, p = ca.SX.sym("x", ocp.nx), ca.SX.sym("u", ocp.nu), ca.SX.sym("p", ocp.np)
    stage = None if cost.stage_cost is None else ca.Function(
        f"{ocp.model.name}_stage_cost", [x, u, p], [ca.densify(ca.SX(cost.stage_cost(x, u, p)))], ["x", "u", "p"],
        ["c"])
    terminal = None if cost.terminal_cost is None else ca.Function(
        f"{ocp.model.name}_terminal_cost", [x, p], [ca.densify(ca.SX(cost.terminal_cost(x, p)))], ["x", "p"], ["c"])
    return stage, terminal


def qp_data_function(ocp: MultipleShootingOCP, step: ca.Function) -> QPData:
    """The sample's data Function of `ocp` (module docstring) around its integrator `step`.

    Parameters
    ----------
    ocp : MultipleShootingOCP
    step : casadi.Function
        `shooting.build_integrator`'s step with forward sensitivities.

    Returns
    -------
    QPData
    """
    N, nx, nu, npar = ocp.horizon, ocp.nx, ocp.nu, ocp.np
    rate = bool(ocp.R_delta.any())
    na = nx + nu if rate else nx
    stage, stage_names = _stage_function(ocp, step, rate)
    terminal, terminal_names = _terminal_function(ocp, rate)
    Xb, Ub, Pm, t0 = ca.MX.sym("xb", nx, N + 1), ca.MX.sym("ub", nu, N), ca.MX.sym("p", npar, N), ca.MX.sym("t0")
    Xr, Ur = ca.MX.sym("x_ref", nx, N + 1), ca.MX.sym("u_ref", nu, N)
    times = t0 + ca.DM(np.arange(N) * ocp.dt).T
    per_stage = dict(zip(stage_names, stage.map(N).call([Xb[:, :N], Ub, Pm, times, Xr[:, :N], Ur]), strict=True))
    last = dict(zip(terminal_names, terminal.call([Xb[:, N], Pm[:, N - 1], Xr[:, N]]), strict=True))
    out = dict(per_stage)
    out["q"] = ca.horzcat(per_stage["q"], last.pop("q_N"))
    out.update(last)
    order = [name for name in ("A", "B", "b", "Q", "S", "R", "Q_N", "q", "r", "C", "D", "ug", "CN", "lgN", "ugN",
                               "M", "M_N") if name in out]
    ng = out["C"].size1() if "C" in out else 0
    ngN = out["CN"].size1() if "CN" in out else 0
    n = nx + nu
    shapes = {"A": (N, na, na), "B": (N, na, nu), "b": (N, na), "Q": (N, na, na), "S": (N, nu, na),
              "R": (N, nu, nu), "Q_N": (na, na), "q": (N + 1, na), "r": (N, nu), "C": (N, ng, na), "D": (N, ng, nu),
              "ug": (N, ng), "CN": (ngN, na), "lgN": (ngN,), "ugN": (ngN,), "M": (N, n, n), "M_N": (nx, nx)}
    fn = ca.Function("rti_qp_data", [Xb, Ub, Pm, t0, Xr, Ur], [ca.densify(out[name]) for name in order],
                     list(INPUTS), order)
    size = sum(f.n_instructions() for f in (stage, terminal) if f.is_a("SXFunction"))
    return QPData(fn, tuple(order), {name: shapes[name] for name in order}, na, size)


def _stage_function(ocp: MultipleShootingOCP, step: ca.Function, rate: bool) -> tuple[ca.Function, list[str]]:
    """One stage's data ``(x, u, p, t, x_ref, u_ref) -> (A, B, b, Q, S, R, q, r[, C, D, ug][, M])``.

    Expanded to SX when the step is SX (its instructions inline), else MX around the step's calls (a step
    composed by binary doubling stays O(log steps) in size).
    """
    nx, nu, npar = ocp.nx, ocp.nu, ocp.np
    x, u, p, t = ca.MX.sym("x", nx), ca.MX.sym("u", nu), ca.MX.sym("p", npar), ca.MX.sym("t")
    xr, ur = ca.MX.sym("x_ref", nx), ca.MX.sym("u_ref", nu)
    z_guess = [ca.MX(ca.DM(ocp.model.z0))] if ocp.model.nz else []  # (Newton on g from the model's z0, as the OCP)
    Fn, A, B = step.call([x, u, p, t, ca.MX(ocp.dt), *z_guess])[:3]
    b = Fn - ca.mtimes(A, x) - ca.mtimes(B, u)
    Qw, Rw = ca.MX(ca.DM(2 * ocp.Q)), ca.MX(ca.DM(2 * ocp.R))
    Q, S, R = Qw, ca.MX(nu, nx), Rw
    q, r = -ca.mtimes(Qw, xr), -ca.mtimes(Rw, ur)
    out: dict[str, ca.MX] = {}
    stage_model, _ = cost_expansions(ocp)
    if stage_model is not None:
        # the cost's second-order model at the guess: its Hessian added, its gradient kept exact at zb
        hxx, hux, huu, gx, gu = stage_model.call([x, u, p])
        Q, S, R = Q + hxx, S + hux, R + huu
        q = q + gx - ca.mtimes(hxx, x) - ca.mtimes(hux.T, u)
        r = r + gu - ca.mtimes(hux, x) - ca.mtimes(huu, u)
        out["M"] = ca.blockcat([[Q, S.T], [S, R]])
    path, _ = constraint_functions(ocp)
    rows: dict[str, ca.MX] = {}
    if path is not None:
        h, Hx, Hu = path.call([x, u, p])
        rows = {"C": Hx, "D": Hu, "ug": ca.mtimes(Hx, x) + ca.mtimes(Hu, u) - h}
    if rate:
        # x~ = [x; u_prev]: x~_{k+1} = [A x + B u + b; u], Q += blkdiag(0, 2 Rd), S = [S, -2 Rd], R += 2 Rd
        Rd = ca.MX(ca.DM(2 * ocp.R_delta))
        A = ca.vertcat(ca.horzcat(A, ca.MX(nx, nu)), ca.MX(nu, nx + nu))
        B, b = ca.vertcat(B, ca.MX(ca.DM.eye(nu))), ca.vertcat(b, ca.MX(nu, 1))
        Q = ca.blockcat([[Q, ca.MX(nx, nu)], [ca.MX(nu, nx), Rd]])
        S, R, q = ca.horzcat(S, -Rd), R + Rd, ca.vertcat(q, ca.MX(nu, 1))
        if rows:
            rows["C"] = ca.horzcat(rows["C"], ca.MX(rows["C"].size1(), nu))
    outputs = {"A": A, "B": B, "b": b, "Q": Q, "S": S, "R": R, "q": q, "r": r, **rows, **out}
    names = list(outputs)
    fn = ca.Function("rti_stage_data", [x, u, p, t, xr, ur], [ca.densify(v) for v in outputs.values()],
                     ["x", "u", "p", "t", "x_ref", "u_ref"], names)
    return (fn.expand() if step.is_a("SXFunction") else fn), names


def _terminal_function(ocp: MultipleShootingOCP, rate: bool) -> tuple[ca.Function, list[str]]:
    """The terminal stage's data ``(x, p, x_ref) -> (Q_N, q_N[, CN, lgN, ugN][, M_N])`` (SX)."""
    nx, nu = ocp.nx, ocp.nu
    x, p, xr = ca.SX.sym("x", nx), ca.SX.sym("p", ocp.np), ca.SX.sym("x_ref", nx)
    QN = ca.SX(ca.DM(2 * ocp.Q_terminal))
    qN = -ca.mtimes(QN, xr)
    out: dict[str, ca.SX] = {}
    _, terminal_model = cost_expansions(ocp)
    if terminal_model is not None:
        hN, gN = terminal_model.call([x, p])
        QN = QN + hN
        qN = qN + gN - ca.mtimes(hN, x)
        out["M_N"] = QN
    _, terminal = constraint_functions(ocp)
    rows: dict[str, ca.SX] = {}
    if terminal is not None:
        c, Cx = terminal.call([x, p])
        rhs = ca.mtimes(Cx, x) - c
        rows = {"CN": Cx, "lgN": rhs, "ugN": rhs}
    if rate:
        QN = ca.vertcat(ca.horzcat(QN, ca.SX.zeros(nx, nu)), ca.SX.zeros(nu, nx + nu))
        qN = ca.vertcat(qN, ca.SX.zeros(nu))
        if rows:
            rows["CN"] = ca.horzcat(rows["CN"], ca.SX.zeros(rows["CN"].size1(), nu))
    outputs = {"Q_N": QN, "q_N": qN, **rows, **out}
    fn = ca.Function("rti_terminal_data", [x, p, xr], [ca.densify(v) for v in outputs.values()],
                     ["x", "p", "x_ref"], list(outputs))
    return fn, list(outputs)


def convexify_stages(qp: StageQP, M: FloatArray | None, M_N: FloatArray | None, xb: FloatArray, ub: FloatArray,
                     nx: int) -> None:
    """Make each stage's Hessian block positive definite in place (`shooting.mpc.costs.convexify`'s rule).

    Parameters
    ----------
    qp : StageQP
        Its ``Q``, ``S``, ``R``, ``Q_N``, ``q``, ``r`` gain D = M~ - M and -D zb where a block is projected (the
        model's gradient at the guess stays the cost's).
    M : ndarray, shape (N, nx + nu, nx + nu), or None
        Each stage's block [Q S'; S R] (without the rate penalty); None without an extra stage cost.
    M_N : ndarray, shape (nx, nx), or None
        The terminal block; None without an extra terminal cost.
    xb : ndarray, shape (N+1, nx)
    ub : ndarray, shape (N, nu)
    nx : int
        The model's states (the QP's may be augmented).
    """
    # every block at once first (the common case: all positive definite, nothing to do), then stage by stage
    Q, S, R, q, r = qp.Q, qp.S, qp.R, qp.q, qp.r
    assert Q is not None and S is not None and R is not None and q is not None and r is not None
    if M is not None:
        n = M.shape[1]
        tau = CONVEXIFY_TAU["double"] * (1.0 + np.abs(M).max(axis=(1, 2), initial=0.0))
        if not _cholesky_all(M + tau[:, None, None] * np.eye(n)):
            for k in range(M.shape[0]):
                projected, changed = convexify(M[k])
                if changed:
                    D = projected - M[k]  # (M~ - M: the QP's blocks and gradients take it)
                    Q[k][:nx, :nx] += D[:nx, :nx]
                    S[k][:, :nx] += D[nx:, :nx]
                    R[k] += D[nx:, nx:]
                    shift = D @ np.concatenate([xb[k], ub[k]])
                    q[k][:nx] -= shift[:nx]
                    r[k] -= shift[nx:]
    if M_N is not None:
        projected, changed = convexify(M_N)
        if changed:
            D = projected - M_N
            assert qp.Q_N is not None
            qp.Q_N[:nx, :nx] += D
            q[-1][:nx] -= D @ xb[-1]


def _cholesky_all(M: FloatArray) -> bool:
    """Whether every block of M (k, n, n) is finite and has a Cholesky factor."""
    if not np.isfinite(M).all():
        return False
    try:
        np.linalg.cholesky(M)
    except np.linalg.LinAlgError:
        return False
    return True
