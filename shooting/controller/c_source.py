"""The real-time-iteration controller as C text: NAME_mpc.c, NAME_mpc.h, manifest.json, Makefile.

`controller_spec` reads what the C needs from a `MultipleShootingOCP` (and
refuses what it cannot do: path or terminal constraints, extra costs, a
singular input weight); `generate_controller` writes the files, pure text
like `shooting.codegen.c_files.generate_c`. The controller solves exactly the
QP of `RTIController` (`shooting.mpc.rti_stage` builds the same one in
Python): the OCP's quadratic cost, the dynamics linearised with the
integrator's exact A and B, hard input bounds, hard or soft state bounds, the
rate penalty on a state augmented with the previous input. The QP keeps its
stages and is solved by the interior-point Riccati method of `shooting.qp`
(C from `shooting.controller.ocp_qp`): time and memory linear in the horizon.
"""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._files import GENERATOR
from shooting._version import VERSION
from shooting.codegen.c_files import CExport
from shooting.codegen.emitter import CEmitter, literal
from shooting.codegen.templates import render, render_from
from shooting.controller.c_constants import convexify_constants, elastic_flags, inexact_text, sqp_values
from shooting.controller.ocp_qp import ocp_qp_source
from shooting.integrate.integrator import build_integrator
from shooting.model import Model
from shooting.mpc.costs import hessians
from shooting.mpc.curvature import curvature_functions
from shooting.mpc.divergence import prediction_limit
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.rti_stage import constraint_functions, cost_expansions, cost_values, curved_constraints
from shooting.mpc.sqp import (
    COLD_START_ITERATIONS,
    MAX_SQP_ITERATIONS,
    SOC,
    SQP_TOLERANCES,
)
from shooting.options import REALS, ControllerHessian, Hessian, Real
from shooting.qp import OCP_QP_TOLERANCES, OCPQPSizes

#: The package of this module's C templates (mpc.c.in, mpc.h.in).
TEMPLATES = "shooting.controller.templates"

__all__ = ["MAX_QP_BUDGET", "MAX_QP_ITERATIONS", "ControllerSpec", "GuessNotSolved", "budget_defaults",
           "controller_files", "controller_spec", "generate_controller"]

FloatArray = npt.NDArray[np.float64]


class GuessNotSolved(ValueError):
    """IPOPT failed on the OCP whose solution is the controller's guess: a failed solve, not bad input.

    `export_controller` reports it as a failed export (``ok`` False, exit 1
    in the CLI) instead of raising.
    """


def controller_files(name: str) -> list[str]:
    """The file names of the controller export called `name`."""
    return [f"{name}_mpc.c", f"{name}_mpc.h", "manifest.json", "Makefile"]


#: The interior point's iteration cap per sample. Mehrotra's method needs
#: 8-15 iterations from a cold start on every problem the tests run (the
#: swing-ups at N = 20..200, random QPs with general rows); the cap is
#: three times the worst seen, and hitting it is a reported failure.
MAX_QP_ITERATIONS = 50

#: The largest QP budget an export takes (iterations per QP): far beyond any QP's need, a bound on a sample.
MAX_QP_BUDGET = 1000

#: 1: a sample's QP starts from the previous one's slacks and multipliers
#: (shifted, pushed at least WARM_PUSH inside); 0: cold (from the primal guess).
#: Measured on the swing-ups (double check): cart-pole 9 -> 5 iterations
#: median, quadrotor 6 -> 4; the first sample and any after a failed QP start cold.
WARM_START = 1


@dataclass(frozen=True, eq=False)
class ControllerSpec:
    """Everything the generated controller fixes at generation time.

    Attributes
    ----------
    model : Model
    step : casadi.Function
        The integrator step with forward sensitivities (x, u, p, t0, dt) -> (x_next, A, B[, err]).
    horizon, dt : int, float
    method : str
        The tableau's name.
    steps : int
    Q, R, Q_terminal : ndarray
    R_delta : ndarray, shape (nu, nu)
        The input-rate weight (zero: no rate penalty).
    x_ref : ndarray, shape (N+1, nx)
    u_ref : ndarray, shape (N, nu)
    u_min, u_max : ndarray, shape (nu,)
    bounded : ndarray of int
        States with a finite bound: one QP row per stage 1..N each.
    x_min, x_max : ndarray, shape (nb,)
        Their bounds (+-inf for a missing side).
    soft : bool
    slack_l1, slack_l2 : float
    p0 : ndarray, shape (np,)
    x_guess : ndarray, shape (N+1, nx)
    u_guess : ndarray, shape (N, nu)
        The trajectory guess `init` starts from.
    guess_origin : str
        How the guess was obtained, for the header.
    path, terminal : casadi.Function or None
        The path constraints h(x, u, p) <= 0 and terminal constraints c(x, p) = 0 with their Jacobians
        (`shooting.mpc.rti_stage.constraint_functions`).
    soft_path : bool
        Soft path constraints (one slack per row and stage, the state bounds' weights).
    cost_model, cost_model_n : casadi.Function or None
        The ``stage_cost``/``terminal_cost`` QP models (`shooting.mpc.rti_stage.cost_expansions`).
    cost_value, cost_value_n : casadi.Function or None
        Their values, for the SQP's merit function.
    max_qp_iterations, max_sqp_iterations : int
        The budget's defaults (``NAME_mpc_set_budget``): interior-point iterations per QP, SQP iterations per
        sample.
    hessian : {"gauss-newton", "exact"}
        The real-time iterations' QP Hessian: the costs' (Gauss-Newton for the dynamics), or the Lagrangian's.
    sqp_hessian : {"gauss-newton", "exact"}
        The SQP's (solve, cold starts): see `shooting.mpc.costs.hessians`.
    curvature, curvature_n : casadi.Function or None
        With ``hessian="exact"``: the constraints' curvature per stage and at the end
        (`shooting.mpc.curvature.curvature_functions`).
    user_model : Model or None
        With scaled variables (`MultipleShootingOCP.scaled_twin`): the model in its own units; `model` and every
        array above are then the scaled twin's (x / x_scale, u / u_scale).
    x_scale, u_scale : ndarray or None, shapes (nx,) and (nu,)
        The scales (None: 1).
    """

    model: Model
    step: ca.Function
    horizon: int
    dt: float
    method: str
    steps: int
    Q: FloatArray
    R: FloatArray
    Q_terminal: FloatArray
    R_delta: FloatArray
    x_ref: FloatArray
    u_ref: FloatArray
    u_min: FloatArray
    u_max: FloatArray
    bounded: npt.NDArray[np.int64]
    x_min: FloatArray
    x_max: FloatArray
    soft: bool
    slack_l1: float
    slack_l2: float
    p0: FloatArray
    x_guess: FloatArray
    u_guess: FloatArray
    guess_origin: str
    extra: dict[str, Any] = field(default_factory=dict)
    path: ca.Function | None = None
    terminal: ca.Function | None = None
    soft_path: bool = False
    cost_model: ca.Function | None = None
    cost_model_n: ca.Function | None = None
    cost_value: ca.Function | None = None
    cost_value_n: ca.Function | None = None
    max_qp_iterations: int = 50
    max_sqp_iterations: int = COLD_START_ITERATIONS
    hessian: Hessian = "gauss-newton"
    sqp_hessian: Hessian = "gauss-newton"
    curvature: ca.Function | None = None
    curvature_n: ca.Function | None = None
    user_model: Model | None = None
    x_scale: FloatArray | None = None
    u_scale: FloatArray | None = None

    @property
    def plant_model(self) -> Model:
        """The model in its own units: the plant of the checks, what the interface speaks (`model` is the
        controller's, in the scaled variables)."""
        return self.model if self.user_model is None else self.user_model

    @property
    def scales(self) -> tuple[FloatArray, FloatArray]:
        """x_scale (nx,) and u_scale (nu,): the controller's variables are x / x_scale, u / u_scale."""
        nx, nu = self.model.nx, self.model.nu
        return (np.ones(nx) if self.x_scale is None else self.x_scale,
                np.ones(nu) if self.u_scale is None else self.u_scale)

    @property
    def hessian_option(self) -> ControllerHessian:
        """The `hessian` option that gives `RTIController` this spec's pair (``hessian``, ``sqp_hessian``)."""
        return "auto" if (self.hessian, self.sqp_hessian) == ("gauss-newton", "exact") else self.hessian

    @property
    def rate(self) -> bool:
        """The rate penalty is part of the cost (the QP's state is augmented with the previous input)."""
        return bool(self.R_delta.any())

    @property
    def sizes(self) -> OCPQPSizes:
        """The stage-wise QP's sizes (the state augmented under a rate penalty)."""
        nx, nu = self.model.nx, self.model.nu
        return OCPQPSizes(self.horizon, nx + (nu if self.rate else 0), nu, int(self.bounded.size), self.ng,
                          self.ngN)

    @property
    def ng(self) -> int:
        """Path constraint rows per stage k < N."""
        return 0 if self.path is None else int(self.path.size1_out(0))

    @property
    def ngN(self) -> int:
        """Terminal constraint rows."""
        return 0 if self.terminal is None else int(self.terminal.size1_out(0))

    @property
    def nv(self) -> int:
        """QP variables: N (nx~ + nu) + nx~ (x_0 is fixed by the measured state)."""
        z = self.sizes
        return z.N * (z.nx + z.nu)


def controller_spec(ocp: MultipleShootingOCP, *, x0: object = None, guess: tuple[object, object] | None = None,
                    max_qp_iterations: int | None = None, max_sqp_iterations: int | None = None,
                    hessian: ControllerHessian = "auto", real: Real = "double") -> ControllerSpec:
    """What the C controller of `ocp` needs, with its initial trajectory guess.

    Parameters
    ----------
    ocp : MultipleShootingOCP
        Quadratic cost, input bounds, hard or soft state bounds, references
        per stage, model parameters (its nominal ``p0``).
    x0 : array_like, shape (nx,), optional
        Where the guess is computed: IPOPT solves the OCP from `x0` (default
        the model's nominal ``x0``) at generation time.
    guess : (x, u), optional
        A trajectory guess, shapes (N+1, nx) and (N, nu), instead of the solve.
    max_qp_iterations, max_sqp_iterations : int, optional
        The budget's defaults (default `MAX_QP_ITERATIONS` and `COLD_START_ITERATIONS`).
    hessian : {"auto", "gauss-newton", "exact"}
        ``"auto"``: `shooting.mpc.costs.hessians` (the spec holds the choice). ``"exact"``: each stage's
        Hessian block adds the constraints' curvature at the last QP's multipliers
        (the Lagrangian's Hessian, projected to positive definite per stage), as ``RTIController(hessian=)``.
    real : {"double", "float"}
        The export's precision ("auto" resolves by it: `shooting.mpc.costs.hessians`).

    Returns
    -------
    ControllerSpec

    Raises
    ------
    ValueError
        Bounds on algebraic states, an input weight R + R_delta that is not
        positive definite, soft bounds with ``slack_l2 = 0``, an unknown
        `hessian`, or an OCP that IPOPT cannot solve from `x0`
        (`GuessNotSolved`, a ValueError).
    """
    if not isinstance(ocp, MultipleShootingOCP):
        raise ValueError(f"ocp must be a shooting.MultipleShootingOCP, got {type(ocp).__name__}")
    twin, dx, du = ocp.scaled_twin()
    if twin is not ocp:  # the controller in the scaled variables, its interface in the model's units
        m = ocp.model
        start = m.x0 if x0 is None else _validate.vector(x0, m.nx, "x0", broadcast=False)
        given = None if guess is None else (_validate.stage_rows(guess[0], ocp.horizon + 1, m.nx, "guess x") / dx,
                                            _validate.stage_rows(guess[1], ocp.horizon, m.nu, "guess u") / du)
        spec = controller_spec(twin, x0=start / dx, guess=given, max_qp_iterations=max_qp_iterations,
                               max_sqp_iterations=max_sqp_iterations, hessian=hessian, real=real)
        origin = spec.guess_origin if guess is not None else \
            "IPOPT's solution of the OCP from x0 = [" + ", ".join(f"{v:.6g}" for v in start) + "] (scaled)"
        return dataclasses.replace(spec, user_model=m, x_scale=dx, u_scale=du, guess_origin=origin)
    budget = budget_defaults(max_qp_iterations, max_sqp_iterations)
    path, terminal = constraint_functions(ocp)
    hessian_choice, sqp_choice = hessians(hessian, ocp.problem.cost.stage_cost, ocp.problem.cost.terminal_cost,
                                          _validate.choice(real, REALS, "real"),
                                          curved_constraints(ocp, (path, terminal)))
    m = ocp.model
    if m.nz and (np.isfinite(m.z_min).any() or np.isfinite(m.z_max).any()):
        raise ValueError(f"the C controller does not impose the bounds on the algebraic states of model {m.name} "
                         f"(z_min/z_max): build the model without them, or use MPCController (IPOPT)")
    Ru = ocp.R + ocp.R_delta
    if np.linalg.eigvalsh(Ru).min() <= 1e-12 * max(1.0, float(np.abs(Ru).max())):
        raise ValueError("R + R_delta must be positive definite for the C controller (each stage's QP must be "
                         f"strictly convex in its inputs); got eigenvalues {np.linalg.eigvalsh(Ru)}: give every "
                         f"input a weight > 0 in R or R_delta")
    soft_rows = [what for what, soft in (("soft state bounds", ocp.soft_x_bounds),
                                         ("soft path constraints", ocp.soft_path_constraints and
                                          ocp.problem.constraints.path_constraints is not None)) if soft]
    if soft_rows and ocp.slack_l2 <= 0:
        raise ValueError(f"{' and '.join(soft_rows)} in the C controller need slack_l2 > 0 (the QP must be "
                         f"strictly convex in the slacks): give slack_l2 > 0")
    model = ocp.model
    if guess is None:
        start = model.x0 if x0 is None else _validate.vector(x0, model.nx, "x0", broadcast=False)
        sol = ocp.solve(start)
        if not sol.success:
            raise GuessNotSolved(f"IPOPT did not solve the OCP from x0 = {_validate.vector_text(start)} "
                                 f"({sol.status}): the controller needs a trajectory guess; pass x0= where the "
                                 f"OCP is solvable")
        x_guess, u_guess = sol.x, sol.u
        origin = "IPOPT's solution of the OCP from x0 = [" + ", ".join(f"{v:.6g}" for v in start) + "]"
    else:
        x_guess = _validate.stage_rows(guess[0], ocp.horizon + 1, model.nx, "guess x")
        u_guess = _validate.stage_rows(guess[1], ocp.horizon, model.nu, "guess u")
        origin = "a trajectory given to export_controller"
    bounded = np.flatnonzero(np.isfinite(ocp.x_min) | np.isfinite(ocp.x_max))
    step = build_integrator(model, ocp.method, ocp.steps, "forward", name=f"{model.name}_mpc_step")
    cost_model, cost_model_n = cost_expansions(ocp)
    cost_value, cost_value_n = cost_values(ocp)
    curvature, curvature_n = curvature_functions(ocp, unroll=None) if "exact" in (hessian_choice, sqp_choice) else \
        (None, None)
    return ControllerSpec(
        model=model, step=step, horizon=ocp.horizon, dt=float(ocp.dt),
        method=ocp.problem.tableau.name or "custom tableau", steps=int(ocp.steps),
        Q=ocp.Q, R=ocp.R, Q_terminal=ocp.Q_terminal, R_delta=ocp.R_delta.copy(), x_ref=ocp.x_ref.copy(),
        u_ref=ocp.u_ref.copy(),
        u_min=ocp.u_min.copy(), u_max=ocp.u_max.copy(), bounded=bounded,
        x_min=ocp.x_min[bounded].copy(), x_max=ocp.x_max[bounded].copy(), soft=bool(ocp.soft_x_bounds),
        slack_l1=float(ocp.slack_l1), slack_l2=float(ocp.slack_l2), p0=model.p0.copy(),
        x_guess=np.asarray(x_guess, dtype=float), u_guess=np.asarray(u_guess, dtype=float), guess_origin=origin,
        path=path, terminal=terminal, soft_path=bool(ocp.soft_path_constraints) and path is not None,
        cost_model=cost_model, cost_model_n=cost_model_n, cost_value=cost_value, cost_value_n=cost_value_n,
        max_qp_iterations=budget[0], max_sqp_iterations=budget[1], hessian=hessian_choice, sqp_hessian=sqp_choice,
        curvature=curvature,
        curvature_n=curvature_n,
    )


def budget_defaults(max_qp_iterations: int | None, max_sqp_iterations: int | None) -> tuple[int, int]:
    """The budget's defaults of an export: each validated (None: `MAX_QP_ITERATIONS`, `COLD_START_ITERATIONS`)."""
    qp = MAX_QP_ITERATIONS if max_qp_iterations is None else \
        _validate.integer(max_qp_iterations, "max_qp_iterations", minimum=1, maximum=MAX_QP_BUDGET)
    sqp = COLD_START_ITERATIONS if max_sqp_iterations is None else \
        _validate.integer(max_sqp_iterations, "max_sqp_iterations", minimum=1, maximum=MAX_SQP_ITERATIONS)
    return qp, sqp


def _values(values: object, real: Real) -> str:
    flat = np.asarray(values, dtype=float).reshape(-1)
    return ", ".join(literal(v, real) for v in flat) or literal(0.0, real)


def _json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _qp_weights(spec: ControllerSpec) -> dict[str, FloatArray]:
    """The QP's stage Hessian blocks (`shooting.mpc.rti_stage`'s, for the C): Hq, Hs, Hr, HN on the QP's state."""
    nx, nu = spec.model.nx, spec.model.nu
    n = spec.sizes.nx
    Hq, HN = np.zeros((n, n)), np.zeros((n, n))
    Hq[:nx, :nx], HN[:nx, :nx] = 2 * spec.Q, 2 * spec.Q_terminal
    Hs = np.zeros((nu, n))
    Hr = 2 * spec.R
    if spec.rate:
        Hq[nx:, nx:] = 2 * spec.R_delta
        Hs[:, nx:] = -2 * spec.R_delta
        Hr = Hr + 2 * spec.R_delta
    return {"Hq": Hq, "Hs": Hs, "Hr": Hr, "HN": HN}


def _column_major(M: FloatArray, real: Real) -> str:
    return _values(np.asarray(M, dtype=float).T, real)


def generate_controller(spec: ControllerSpec, name: str, *, real: Real = "double",
                        sizes: Mapping[str, object] | None = None,
                        metadata: Mapping[str, object] | None = None) -> CExport:
    """The controller's files for `spec`.

    Parameters
    ----------
    spec : ControllerSpec
    name : str
        C prefix: the files are ``NAME_mpc.c`` and ``NAME_mpc.h``.
    real : {"double", "float"}
    sizes : mapping, optional
        Measured ``flash``, ``ram``, ``mem_bytes``, ``qp_iterations_max`` and
        ``input_tolerance``, written into the header (a second generation after measuring).
    metadata : mapping, optional
        Extra manifest entries.

    Returns
    -------
    CExport
        ``name`` is ``NAME_mpc`` (the C file stem).
    """
    name = _validate.identifier(name, "name")
    real = _validate.choice(real, REALS, "real")
    model = spec.model
    stem = f"{name}_mpc"
    emitter = CEmitter(stem, real)
    body = emitter.add(spec.step)
    # The step without sensitivities, for the SQP's line search (x_next only: a fraction of the cost).
    plain = build_integrator(model, spec.method, spec.steps, "none", name=f"{model.name}_mpc_value")
    value = emitter.add(plain)
    z = spec.sizes
    qp = ocp_qp_source(f"{stem}_qp", real, z)
    measured = dict(sizes or {})
    tol = OCP_QP_TOLERANCES[real]
    nb = z.nbx
    weights = _qp_weights(spec)
    ru2_inverse = _ru2_inverse(spec.R)
    N, ng, ngN = spec.horizon, z.ng, z.ngN
    values = dict(
        name=name, NAME=name.upper(), version=VERSION, NX=model.nx, NU=model.nu, NP=model.np,
        NP_1=max(model.np, 1), N=N, nv=spec.nv, max_iter=spec.max_qp_iterations, NXQ=z.nx, NBX=nb,
        NXQ_RATE=(N + 1) * z.nx if spec.rate else 1, CG_LEN=max(N * ng * z.nx, 1), DG_LEN=max(N * ng * z.nu, 1),
        G_LEN=max(N * ng, 1), CN_LEN=max(ngN * z.nx, 1), GN_LEN=max(ngN, 1),
        UREF_LEN=1 if ru2_inverse is not None else N * model.nu,
    )
    fn = _stage_functions(spec, emitter, real)
    values.update(_cost_lengths(spec, name, fn))
    source = render_from(
        TEMPLATES, "mpc.c.in",
        **{k: values[k] for k in ("name", "NAME", "version", "NX", "NU", "NP", "NP_1", "N", "NXQ", "NBX", "G_LEN")},
        NZ=model.nz, NZ_1=max(model.nz, 1), z0=_values(model.z0 if model.nz else [0.0], real),
        NG=ng, NGN=ngN, NG_1=max(ng, 1), NGN_1=max(ngN, 1), **fn,
        **convexify_constants(real), fs="f" if real == "float" else "",
        soft_g=", ".join(["1" if spec.soft_path else "0"] * max(ng, 1)), soft_g_flag=1 if spec.soft_path else 0,
        soft_bx_flag=1 if spec.soft else 0,
        NBX_1=max(nb, 1), rate=1 if spec.rate else 0, n_out=spec.step.n_out(), warm_start=WARM_START,
        **{key: _column_major(M, real) for key, M in weights.items()},
        Qx2=_column_major(2 * spec.Q, real), QN2=_column_major(2 * spec.Q_terminal, real),
        Ru2=_column_major(2 * spec.R, real), uref_stored=int(ru2_inverse is None),
        Ru2inv=_column_major(np.zeros_like(spec.R) if ru2_inverse is None else ru2_inverse, real),
        lbu=_values(spec.u_min, real), ubu=_values(spec.u_max, real),
        idxbx=", ".join(map(str, spec.bounded.tolist())) or "0",
        lbx=_values(spec.x_min if nb else [-np.inf], real), ubx=_values(spec.x_max if nb else [np.inf], real),
        soft_bx=", ".join(["1" if spec.soft else "0"] * max(nb, 1)), **elastic_flags(spec),
        x_ref0=_values(spec.x_ref, real), u_ref0=_values(spec.u_ref, real),
        p0=_values(spec.p0 if model.np else [0.0], real), x_guess=_values(spec.x_guess, real),
        u_guess=_values(spec.u_guess, real), dt=literal(spec.dt, real), l1=literal(spec.slack_l1, real),
        l2=literal(spec.slack_l2 if spec.soft or spec.soft_path else 1.0, real),
        prediction_limit=literal(prediction_limit(spec.x_guess, spec.u_guess, spec.x_ref, spec.u_ref, spec.x_min,
                                                  spec.x_max, spec.u_min, spec.u_max), real),
        tol_stat=literal(tol["tol_stat"], real), tol_eq=literal(tol["tol_eq"], real),
        tol_mu=literal(tol["tol_mu"], real),
        functions=emitter.source() + "\n" + qp.functions, body=body, value=value, n_value_out=plain.n_out(),
        **sqp_values(real), scaled=int(spec.x_scale is not None or spec.u_scale is not None),
        x_scale=_values(spec.scales[0], real), u_scale=_values(spec.scales[1], real),
    )
    header = _header(spec, values, real, emitter, qp.work, measured)
    plant = spec.plant_model
    manifest = {
        "generator": GENERATOR, "generator_version": VERSION, "casadi_version": ca.__version__,  # type: ignore
        "files": controller_files(name), "name": name, "kind": "controller", "real": real,
        "model": {"name": plant.name, "nx": plant.nx, "nu": plant.nu, "np": plant.np,
                  "state_names": list(plant.state_names), "input_names": list(plant.input_names),
                  "expression_sha256": plant.expression_hash},
        "scaling": {"x_scale": [float(v) for v in spec.scales[0]], "u_scale": [float(v) for v in spec.scales[1]]},
        "horizon": spec.horizon, "dt": spec.dt, "method": spec.method, "steps": spec.steps,
        "qp": {"variables": spec.nv, "stages": spec.horizon, "stage_states": z.nx, "stage_inputs": z.nu,
               "bounded_states": nb, "max_iterations": spec.max_qp_iterations, "soft_x_bounds": spec.soft,
               "slack_l1": spec.slack_l1, "slack_l2": spec.slack_l2, "tolerances": tol,
               "warm_start": bool(WARM_START), "method": "interior point (Mehrotra), square-root Riccati per stage",
               "hessian": spec.hessian, "sqp_hessian": spec.sqp_hessian},
        "budget": {"max_qp_iterations": spec.max_qp_iterations, "max_sqp_iterations": spec.max_sqp_iterations},
        "guess": spec.guess_origin, "reentrant": emitter.reentrant, "heap": False,
        "reference": {"x_terminal": [float(v) for v in spec.x_ref[-1] * spec.scales[0]],
                      "u_first": [float(v) for v in spec.u_ref[0] * spec.scales[1]]},
        **measured, **dict(metadata or {}),
    }
    files = {f"{stem}.c": source, f"{stem}.h": header, "manifest.json": _json(manifest),
             "Makefile": render("Makefile.in", name=stem, version=VERSION)}
    return CExport(stem, files, manifest, {})


def _stage_functions(spec: ControllerSpec, emitter: CEmitter, real: Real) -> dict[str, str | int]:
    """The optional stage functions' C names (``no_KEY`` for a missing one) and the template's flags for them (the
    exact Hessian's Riccati pass in double; float keeps the per-stage rule, see mpc.c.in)."""
    fn: dict[str, str | int] = {key: emitter.add(f) if f is not None else f"no_{key}" for key, f in (
        ("path", spec.path), ("terminal", spec.terminal), ("cost_model", spec.cost_model),
        ("cost_model_n", spec.cost_model_n), ("cost_value", spec.cost_value), ("cost_value_n", spec.cost_value_n),
        ("curvature", spec.curvature), ("curvature_n", spec.curvature_n))}
    exact, exact_n = spec.curvature is not None, spec.curvature_n is not None
    # (the exact Hessian's per-stage blocks take the extra costs' path, with or without a cost function)
    fn.update(has_cost=int(spec.cost_model is not None or exact), has_cost_n=int(spec.cost_model_n is not None or
                                                                                 exact_n),
              has_cost_f=int(spec.cost_model is not None), has_cost_nf=int(spec.cost_model_n is not None),
              exact=int(exact), exact_n=int(exact_n), riccati_pass=int(exact and real == "double"))
    return fn


def _ru2_inverse(R: FloatArray) -> FloatArray | None:
    """(2 R)^-1 when R is well enough conditioned to give the input references back from their gradients
    r = -2 R u_ref (cond(R) <= 1e4: float then keeps 3 digits of u_ref, reset's guess only), else None: the C
    then keeps u_ref itself (N nu reals more)."""
    eig = np.linalg.eigvalsh(R)
    if not (eig.min(initial=np.inf) > 0 and eig.max(initial=0.0) <= 1e4 * eig.min(initial=np.inf)):
        return None
    return np.asarray(np.linalg.inv(2 * R), dtype=np.float64)


#: The exact SQP's second-order correction keeps the QP's step while it tries the correction (nothing else needs a
#: third trajectory: a Gauss-Newton SQP's memory goes without).
_SOC_MEMBERS = """\
  {name}_real xc[({N} + 1) * {NX}];      /* SQP, exact Hessian: the QP's step kept while its second-order correction
                                         * is tried */
  {name}_real uc[{N} * {NU}];
"""


def _cost_lengths(spec: ControllerSpec, name: str, fn: Mapping[str, Any]) -> dict[str, object]:
    """The memory struct's arrays that only some problems use (one entry where unused): the stages' cost blocks
    and gradients (a stage_cost or terminal_cost), the exact Hessian's curvature and shift (its Riccati pass), and
    the second-order correction's copy of the QP's step (an exact SQP's)."""
    z, N, model = spec.sizes, spec.horizon, spec.model
    cost, cost_n, riccati = bool(fn["has_cost"]), bool(fn["has_cost_n"]), bool(fn["riccati_pass"])
    return dict(HK_LEN=N * z.nx * z.nx if cost else 1, SK_LEN=N * z.nu * z.nx if cost else 1,
                RK_LEN=N * z.nu * z.nu if cost else 1, HNK_LEN=z.nx * z.nx if cost_n else 1,
                QK_LEN=(N + 1) * z.nx if cost or cost_n else 1, RKG_LEN=N * z.nu if cost or cost_n else 1,
                WC_LEN=N * (model.nx + model.nu) ** 2 if riccati else 1, PHI_LEN=N * z.nx * z.nx if riccati else 1,
                soc_members=_SOC_MEMBERS.format(name=name, N=N, NX=model.nx, NU=model.nu)
                if SOC and spec.sqp_hessian == "exact" else "")


def _header(spec: ControllerSpec, values: dict[str, Any], real: Real, emitter: CEmitter, qp_work: str,
            measured: Mapping[str, Any]) -> str:
    model = spec.model
    nb = int(spec.bounded.size)
    names = [model.state_names[i] for i in spec.bounded]
    if nb == 0:
        state_bounds = "no state bounds."
    elif spec.soft:
        state_bounds = (f"soft bounds on {', '.join(names)} at stages 1..N:\n *             x_min - s <= x <= "
                        f"x_max + s, s >= 0.")
    else:
        state_bounds = f"hard bounds on {', '.join(names)} at stages 1..N."
    slack_cost = f"\n *           + {spec.slack_l1:g} sum(s) + {spec.slack_l2:g} sum(s^2)" \
        if (spec.soft and nb) or (spec.soft_path and spec.ng) else ""
    if spec.cost_model is not None or spec.cost_model_n is not None:
        slack_cost += "\n *           + " + " + ".join(
            term for term, f in (("sum_{k<N} l(x_k, u_k, p)", spec.cost_model), ("l_N(x_N, p)", spec.cost_model_n))
            if f is not None) + " (the OCP's stage_cost, terminal_cost)"
    if spec.ng:
        state_bounds += (f"\n *             h(x_k, u_k, p) <= 0 at stages 0..N-1 ({spec.ng} row(s), the OCP's "
                         f"path_constraints),\n *             " + ("soft: h <= s, s >= 0, the slacks priced as above."
                                                                 if spec.soft_path else "hard."))
    if spec.ngN:
        state_bounds += f"\n *             c(x_N, p) = 0 ({spec.ngN} row(s), the OCP's terminal_constraints)."
    if spec.x_scale is not None or spec.u_scale is not None:
        dx, du = spec.scales
        state_bounds += ("\n * Scaled variables (shooting.mpc.scaling): the controller works in x / x_scale,"
                         " u / u_scale,"
                         f"\n *   x_scale = {np.array2string(dx, separator=', ')},"
                         f"\n *   u_scale = {np.array2string(du, separator=', ')};"
                         "\n *   its interface (x0, u0, x_ref, u_ref, u_prev) is in the model's units, mem->x and"
                         "\n *   mem->u (and the weights and bounds here) in the scaled ones.")
    if spec.rate:
        slack_cost += "\n *           + sum_{k<N} |u_k - u_{k-1}|_Rd^2 (u_{-1}: the input applied last)"
    ram = measured.get("ram")
    flash = measured.get("flash")
    iters = measured.get("qp_iterations_max")
    tolerance = measured.get("input_tolerance")
    tol = OCP_QP_TOLERANCES[real]
    reentrancy = ("Reentrant: everything lives in the memory struct; several controllers may run at once, each "
                  "with its own struct." if emitter.reentrant else
                  f"NOT reentrant: the integrator step keeps {emitter.static_reals} static {real}s of work memory; "
                  "run one controller at a time.")
    reentrancy = "\n * ".join(textwrap.wrap(reentrancy, 96))
    accuracy = (f"the export's check allowed {tolerance:.1e} of each input's range between this build and the "
                f"double Python RTI" if tolerance is not None else "not checked at export")
    return render_from(
        TEMPLATES, "mpc.h.in", **values, model=model.name, dt=f"{spec.dt:g}", time_unit=model.time_unit,
        method=spec.method,
        steps=spec.steps, real=real, slack_cost=slack_cost, state_bounds=state_bounds, guess_origin=spec.guess_origin,
        p0_text=np.array2string(spec.p0, precision=6, separator=", ") if model.np else "(none)",
        warm_text=" from the last one's, shifted" if WARM_START else " cold too, from the shifted prediction",
        ram_text=f"{ram} bytes on a Cortex-M4 (data + bss + worst stack, the default instance included)"
        if ram is not None else "not measured (export with target cortex-m4)",
        mem_bytes=measured.get("mem_bytes", "?"),
        static_text=f", plus {emitter.static_reals * (4 if real == 'float' else 8)} bytes of static integrator work"
        if not emitter.reentrant else "",
        flash_text=f"{flash} bytes on a Cortex-M4" if flash is not None else "not measured",
        iter_text=f"{iters} measured in the export's closed-loop check" if iters is not None else "not measured",
        tol_stat_text=f"{tol['tol_stat']:g}", tol_eq_text=f"{tol['tol_eq']:g}", tol_mu_text=f"{tol['tol_mu']:g}",
        accuracy_text=accuracy, reentrancy=reentrancy, guard=f"{values['NAME']}_MPC_H",
        reentrant=1 if emitter.reentrant else 0, qp_work=qp_work,
        sqp_tol_step=literal(SQP_TOLERANCES[real]["step"], real),
        sqp_tol_defect=literal(SQP_TOLERANCES[real]["defect"], real),
        sqp_tol_stat=literal(SQP_TOLERANCES[real]["stationarity"], real),
        cold_iterations=spec.max_sqp_iterations, max_sqp_iter=MAX_SQP_ITERATIONS,
        inexact_text=inexact_text(),
    )
