"""`build_integrator`: a tableau and a model become one `casadi.Function`.

The Function maps ``(x, u, p, t0, dt)`` to ``(x_next, A, B[, err])`` where
``x_next`` is N substeps of length dt/N of the chosen Runge-Kutta method and
``A = dx_next/dx``, ``B = dx_next/du`` are the exact derivatives of that
discrete map (see `shooting.integrate.substep`).

Substep loop. Few substeps are unrolled into one flat SX function (fastest:
no call overhead, common subexpressions shared, identity seeds of the first
substep folded away). Many substeps would make that graph, and the generated
C, N times larger, so beyond `UNROLL_MAX_STEPS` the substeps are composed by
binary doubling of one seeded substep function: G_0 is one substep,
G_k = G_{k-1} o G_{k-1} covers 2^k substeps, and N is written in binary. The generated code then holds one substep plus
about log2(N) tiny wrappers, and its work memory holds one state per level.
(CasADi's `mapaccum`/`fold` keep the code small too, but store every
intermediate accumulator, so their work memory grows linearly with N: too
much for a microcontroller at N = 200.)

A doubled step is marked ``never_inline``: an SX graph that calls it (the
OCP's NLP, the RTI's QP data) holds one call node instead of N inlined
substeps, so building the NLP and its derivatives stays O(log N) in time and
memory whatever N is. On the host, where code size does not matter but call
overhead does, the lowest levels may be flat SX blocks of several substeps
(``unroll=<int>``; the OCP and the RTI use `HOST_UNROLL_STEPS`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np

from shooting import _validate
from shooting.integrate.adjoint import ADJOINT_MODES, AdjointStep
from shooting.integrate.dae import DAESubstepBuilder
from shooting.integrate.substep import SubstepBuilder
from shooting.model import Model
from shooting.options import NEWTON_METHODS, SENSITIVITIES, NewtonMethod, Sensitivities
from shooting.tableaus.catalogue import get_tableau
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["DAE_INPUT_NAMES", "DAE_SENSITIVITIES", "DEFAULT_NEWTON_ITERATIONS", "DEFAULT_SIMPLIFIED_NEWTON_ITERATIONS",
           "HOST_UNROLL_STEPS", "INPUT_NAMES", "MAX_NEWTON_ITERATIONS",
           "MAX_STEPS", "UNROLL_MAX_STEPS", "StepInfo", "build_integrator", "newton_iterations_for", "resolve_tableau",
           "step_info"]

#: Newton steps on the stage equations of implicit tableaus (see
#: tests/test_implicit.py: converged to rounding on every built-in model at its
#: nominal dt from the explicit-Euler predictor).
DEFAULT_NEWTON_ITERATIONS = 4

#: Newton steps when ``newton="simplified"`` (linear convergence needs more).
DEFAULT_SIMPLIFIED_NEWTON_ITERATIONS = 8

#: Largest number of substeps that is unrolled into one flat SX function when
#: `unroll` is not given (measured by scripts/bench_integrators.py).
UNROLL_MAX_STEPS = 4

#: Flat SX blocks of up to this many substeps under the doubling when a step
#: is built for the host (OCP, RTI): measured on the cart-pole at 1024
#: substeps, blocks of 16 make the NLP's Hessian 3x faster than single
#: substeps and build in 0.1 s (scripts/bench_integrators.py).
HOST_UNROLL_STEPS = 16

#: Most substeps per shooting interval: beyond it a step is neither useful (use a
#: smaller dt or an implicit method) nor exact in float (2**24 substep times).
MAX_STEPS = 2**20

#: Most Newton steps on the stage equations (full Newton converges in a few).
MAX_NEWTON_ITERATIONS = 100

#: Input names of every step Function, in order.
INPUT_NAMES = ["x", "u", "p", "t0", "dt"]

#: Input names of the step Function of a model with algebraic states: the
#: guess of z at x comes last.
DAE_INPUT_NAMES = [*INPUT_NAMES, "z0"]

#: Sensitivity modes available for models with algebraic states (all of them:
#: "variational" builds the same expressions as "forward" there, see
#: `shooting.integrate.dae`).
DAE_SENSITIVITIES = SENSITIVITIES

Builder = SubstepBuilder | DAESubstepBuilder


@dataclass(frozen=True)
class StepInfo:
    """How a step Function was built (what `build_integrator` was given, resolved).

    Parameters
    ----------
    model : Model
    tableau : ButcherTableau
    steps : int
        Substeps per shooting interval.
    sensitivities : {"forward", "ad", "variational", "none"}
    newton : {"full", "simplified"} or None
        None for explicit tableaus.
    newton_iterations : int or None
        None for explicit tableaus.
    unrolled : bool
        All substeps in one flat function (else binary doubling).
    """

    model: Model
    tableau: ButcherTableau
    steps: int
    sensitivities: Sensitivities
    newton: NewtonMethod | None
    newton_iterations: int | None
    unrolled: bool


# Step Functions built here, with how they were built (weak keys: an entry
# goes when its Function does). Lets the C export draw test vectors around
# the model's nominal point and record the model and tableau in the manifest.
_BUILT: weakref.WeakKeyDictionary[ca.Function, StepInfo] = weakref.WeakKeyDictionary()


def step_info(F: ca.Function) -> StepInfo | None:
    """How `F` was built, if `build_integrator` built it (in this process), else None.

    Parameters
    ----------
    F : casadi.Function

    Returns
    -------
    StepInfo or None
    """
    try:
        return _BUILT.get(F)
    except TypeError:  # not weak-referenceable: not ours
        return None


def newton_iterations_for(newton: NewtonMethod, newton_iterations: int | None = None) -> int:
    """The number of Newton steps `build_integrator` uses: `newton_iterations`, or the default for `newton`.

    Parameters
    ----------
    newton : {"full", "simplified"}
    newton_iterations : int, optional

    Returns
    -------
    int
    """
    newton = _validate.choice(newton, NEWTON_METHODS, "newton")
    if newton_iterations is None:
        return DEFAULT_SIMPLIFIED_NEWTON_ITERATIONS if newton == "simplified" else DEFAULT_NEWTON_ITERATIONS
    return _validate.integer(newton_iterations, "newton_iterations", minimum=1, maximum=MAX_NEWTON_ITERATIONS)


def resolve_tableau(method: str | ButcherTableau) -> ButcherTableau:
    """A catalogue name or a tableau, as a `ButcherTableau` (ValueError for anything else)."""
    if isinstance(method, ButcherTableau):
        return method
    if isinstance(method, str):
        return get_tableau(method)
    raise ValueError(
        f"method must be a tableau name (see shooting.tableau_names()) or a ButcherTableau, "
        f"got {type(method).__name__}"
    )


def build_integrator(
    model: Model,
    method: str | ButcherTableau = "rk4",
    steps: int = 1,
    sensitivities: Sensitivities = "forward",
    *,
    newton_iterations: int | None = None,
    newton: NewtonMethod = "full",
    unroll: bool | int | None = None,
    name: str | None = None,
) -> ca.Function:
    """Build a Runge-Kutta shooting step with exact sensitivities.

    Parameters
    ----------
    model : Model
        The continuous-time model x' = f(x, u, p, t).
    method : str or ButcherTableau, default "rk4"
        A catalogue name (`shooting.tableau_names()`) or a tableau.
    steps : int, default 1
        N substeps of length dt/N inside the shooting interval [t0, t0+dt],
        with u and p constant. Stage i of the substep starting at t_n is
        evaluated at t_n + c_i dt/N.
    sensitivities : {"forward", "ad", "variational", "none", "adjoint", "second-order"}, default "forward"
        How A and B are computed (all exact derivatives of the discrete map;
        they agree to rounding). "forward", the stage-wise propagation,
        has the fewest CasADi instructions on the built-in models.
        "none" omits the outputs A and B. "adjoint" and "second-order"
        (`shooting.integrate.adjoint`) take ``lam (nx)`` after ``dt`` and
        return ``x_next, lam_x = A' lam, lam_u = B' lam``, or
        ``x_next, A, B, H`` with ``H (nx+nu, nx+nu)`` the Hessian of
        ``lam' x_next`` with respect to ``(x, u)``; then ``err`` and ``z``.
    newton_iterations : int, optional
        Newton steps on the stage equations of implicit tableaus (default
        `DEFAULT_NEWTON_ITERATIONS`, or `DEFAULT_SIMPLIFIED_NEWTON_ITERATIONS`
        for simplified Newton); ignored for explicit tableaus.
    newton : {"full", "simplified"}, default "full"
        "full": the Newton matrix at every iterate (quadratic convergence; the
        tests check convergence to rounding on every built-in model).
        "simplified": one factorisation at the start of the substep reused by
        every step (30-40 % fewer instructions from about four states up, but
        linear convergence: check the residual for your model and step).
        Either way A and B follow the implicit-function theorem at the final
        stages.
    unroll : bool or int, optional
        Unroll all substeps into one flat SX function (True), or compose them
        by binary doubling of one substep, a graph of O(log steps) size
        (False). An integer n: unroll when ``steps <= n``, else double flat
        blocks of up to n substeps (the largest power of two <= n): faster
        on the host, bigger code. Default: unroll when
        ``steps <= UNROLL_MAX_STEPS``.
    name : str, optional
        Function name (default ``<model>_<method>``).

    Returns
    -------
    casadi.Function
        Inputs ``x (nx), u (nu), p (np), t0 (1), dt (1)``; outputs
        ``x_next (nx)``, ``A (nx, nx)``, ``B (nx, nu)`` (unless
        ``sensitivities="none"``) and, for embedded pairs, ``err (nx)``: the
        sum over substeps of the local error estimates
        ``h sum_i (b_i - b_hat_i) K_i``.
        For a model with algebraic states (`shooting.integrate.dae`): one
        more input ``z0 (nz)``, the guess of z at x, and one more output,
        last, ``z (nz)``: the algebraic state consistent with x_next.
        ``newton_iterations`` counts the Newton steps of every algebraic
        solve (``newton`` must be "full").

    Raises
    ------
    ValueError
        An unknown method or sensitivity mode, a non-positive or non-integer
        number of steps or Newton iterations, or a model that is not a `Model`.
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model (see shooting.load_model), got {type(model).__name__}")
    tab = resolve_tableau(method)
    steps = _validate.integer(steps, "steps", minimum=1, maximum=MAX_STEPS)
    sensitivities = _validate.choice(sensitivities, SENSITIVITIES, "sensitivities")
    newton_iterations = newton_iterations_for(newton, newton_iterations)
    block = 1
    if unroll is None:
        unroll = steps <= UNROLL_MAX_STEPS
    elif isinstance(unroll, (bool, np.bool_)):
        unroll = bool(unroll)
    else:
        block = _validate.integer(unroll, "unroll (True, False or a number of substeps)", minimum=1,
                                  maximum=MAX_STEPS)
        unroll = steps <= block
        block = 1 << (block.bit_length() - 1)  # the largest power of two <= unroll
    if name is None:
        name = _validate.sanitized_identifier(f"{model.name}_{tab.name or 'rk'}")
    else:
        name = _validate.identifier(name, "name")

    # (the adjoint modes are built on the plain step: its stages, without forward sensitivities)
    mode: Sensitivities = "none" if sensitivities in ADJOINT_MODES else sensitivities
    if model.is_dae:
        _check_dae_options(model, sensitivities, newton)
        assert model.g is not None
        builder: Builder = DAESubstepBuilder(
            f=model.f, g=model.g, A=np.asarray(tab.A, dtype=float), b=np.asarray(tab.b, dtype=float),
            c=np.asarray(tab.c, dtype=float), b_hat=None if tab.b_hat is None else np.asarray(tab.b_hat, dtype=float),
            explicit=bool(tab.explicit), mode=mode, newton_iterations=newton_iterations,
        )
    else:
        builder = _ode_builder(model, tab, mode, newton_iterations, newton)
    if sensitivities in ADJOINT_MODES:
        adjoint = AdjointStep(builder, second_order=sensitivities == "second-order")
        F = adjoint.unrolled(steps, name) if unroll else adjoint.doubled(steps, name, block)
    else:
        F = _unrolled(builder, steps, name) if unroll else _doubled(builder, steps, name, block)
    assert not F.has_free(), "integrator Function has free symbols"
    dae_newton = model.is_dae
    _BUILT[F] = StepInfo(model, tab, steps, sensitivities, None if tab.explicit and not dae_newton else newton,
                         None if tab.explicit and not dae_newton else newton_iterations, unroll)
    return F


def _check_dae_options(model: Model, sensitivities: str, newton: str) -> None:
    if sensitivities not in DAE_SENSITIVITIES:
        raise ValueError(f"sensitivities={sensitivities!r} is not available for model {model.name}, which has "
                         f"algebraic states: use one of {', '.join(DAE_SENSITIVITIES)} (the same exact A and B)")
    if newton != "full":
        raise ValueError(f"newton={newton!r} is not available for model {model.name}, which has algebraic states: "
                         f"use newton='full'")


def _ode_builder(model: Model, tab: ButcherTableau, sensitivities: Sensitivities, newton_iterations: int,
                 newton: NewtonMethod) -> SubstepBuilder:
    return SubstepBuilder(
        f=model.f,
        A=np.asarray(tab.A, dtype=float),
        b=np.asarray(tab.b, dtype=float),
        c=np.asarray(tab.c, dtype=float),
        b_hat=None if tab.b_hat is None else np.asarray(tab.b_hat, dtype=float),
        explicit=bool(tab.explicit),
        mode=sensitivities,
        newton_iterations=newton_iterations,
        simplified_newton=newton == "simplified",
    )


def _nz(builder: Builder) -> int:
    return builder.nz if isinstance(builder, DAESubstepBuilder) else 0


def _substep(builder: Builder, x: Any, S: Any, u: Any, p: Any, t: Any, h: Any, z: Any) -> tuple[Any, Any, Any, Any]:
    """One substep of either builder: ``(x_next, S_next, err, z_next)``; z is None for an ODE."""
    if isinstance(builder, DAESubstepBuilder):
        return builder.step(x, S, u, p, t, h, z)
    return (*builder.step(x, S, u, p, t, h), None)


def _output_names(builder: Builder) -> list[str]:
    names = ["x_next"]
    if builder.mode != "none":
        names += ["A", "B"]
    if builder.b_hat is not None:
        names.append("err")
    if _nz(builder):
        names.append("z")
    return names


def _input_names(builder: Builder) -> list[str]:
    return DAE_INPUT_NAMES if _nz(builder) else INPUT_NAMES


def _symbols(builder: Builder, kind: Any = ca.SX) -> list[Any]:
    """Input symbols in the order of `_input_names`: x, u, p, t0, dt[, z0]."""
    syms = [kind.sym("x", builder.nx), kind.sym("u", builder.nu), kind.sym("p", builder.npar), kind.sym("t0"),
            kind.sym("dt")]
    if _nz(builder):
        syms.append(kind.sym("z0", _nz(builder)))
    return syms


def _identity_seed(builder: Builder) -> ca.DM:
    return ca.horzcat(ca.DM.eye(builder.nx), ca.DM(builder.nx, builder.nu))


def _outputs(builder: Builder, x: Any, S: Any, err: Any, z: Any) -> list[Any]:
    """Output list, dense: A and B are dense column-major (as documented), even where
    entries are structurally zero (e.g. a state that no derivative depends on)."""
    outs = [x]
    if builder.mode != "none":
        outs += [S[:, :builder.nx], S[:, builder.nx:]]
    if builder.b_hat is not None:
        outs.append(err)
    if _nz(builder):
        outs.append(z)
    return [ca.densify(o) for o in outs]


def _unrolled(builder: Builder, steps: int, name: str) -> ca.Function:
    """All substeps in one flat SX function."""
    ins = _symbols(builder)
    x0, u, p, t0, dt = ins[:5]
    z = ins[5] if _nz(builder) else None
    h = dt / steps
    ad_whole_map = builder.mode == "ad" and builder.explicit
    S: ca.SX | ca.DM | None = None if builder.mode == "none" or ad_whole_map else _identity_seed(builder)
    x, err = x0, None
    for n in range(steps):
        x, S, e, z = _substep(builder, x, S, u, p, t0 + n * h if n else t0, h, z)
        if e is not None:
            err = e if err is None else err + e
    if ad_whole_map:
        # "ad": CasADi's jacobian of the whole unrolled map.
        S = ca.horzcat(ca.jacobian(x, x0), ca.jacobian(x, u))
    return ca.Function(
        name, ins, _outputs(builder, x, S, err, z), _input_names(builder), _output_names(builder),
        {"cse": True},
    )


def _level_zero(builder: Builder, name: str) -> ca.Function:
    """G_0: one substep with a symbolic seed S (and algebraic guess z), as flat SX.

    Empty inputs (p of a model without parameters, u of one without inputs)
    are left out: CasADi's call of an MX Function with an empty argument
    walks the whole call tree, which made building O(N) instead of O(log N).
    """
    nx, m, nz = builder.nx, builder.nx + builder.nu, _nz(builder)
    sens = builder.mode != "none"
    xs, us, ps, ts, hs = ca.SX.sym("x", nx), ca.SX.sym("u", builder.nu), ca.SX.sym("p", builder.npar), \
        ca.SX.sym("t"), ca.SX.sym("h")
    Ss, zs = ca.SX.sym("S", nx, m), ca.SX.sym("z", nz)
    x1, S1, e1, z1 = _substep(builder, xs, Ss if sens else None, us, ps, ts, hs, zs if nz else None)
    named = {"x": xs, "S": Ss if sens else None, "u": us, "p": ps, "t": ts, "h": hs, "z": zs if nz else None}
    ins = {k: v for k, v in named.items() if v is not None and v.numel() > 0}
    outs = {"x_next": x1, "S_next": S1 if sens else None, "err": e1, "z_next": z1}
    outs = {k: v for k, v in outs.items() if v is not None}
    return ca.Function(f"{name}_sub", list(ins.values()), list(outs.values()), list(ins), list(outs),
                       {"cse": True})


def _doubled(builder: Builder, steps: int, name: str, block: int = 1) -> ca.Function:
    """All substeps by binary doubling of one seeded substep function.

    Levels up to `block` substeps (a power of two) are flat SX functions; the
    levels above call the one below twice (MX), so the graph stays O(log N).
    """
    sens = builder.mode != "none"
    emb = builder.b_hat is not None
    levels = [_level_zero(builder, name)]
    in_names, out_names = levels[0].name_in(), levels[0].name_out()
    carried = {"x": "x_next", "S": "S_next", "z": "z_next"}  # outputs that feed the next substep

    # G_k = G_{k-1} o G_{k-1}, as many levels as N has binary digits.
    while len(levels) < steps.bit_length():
        prev, k = levels[-1], len(levels)
        kind: Any = ca.SX if 2 ** k <= block else ca.MX
        sym_in: list[Any] = [kind.sym(n, prev.sparsity_in(i)) for i, n in enumerate(in_names)]
        a = dict(zip(in_names, sym_in, strict=True))
        first = prev.call(a)
        second = prev.call({**a, **{i: first[o] for i, o in carried.items() if i in a},
                            "t": a["t"] + float(2 ** (k - 1)) * a["h"]})
        out = dict(second)
        if emb:
            out["err"] = first["err"] + second["err"]
        opts = {"cse": True} if kind is ca.SX else {}
        levels.append(ca.Function(f"{name}_sub{2 ** k}", sym_in, [out[o] for o in out_names], in_names, out_names,
                                  opts))

    # Top level: the binary digits of N, starting from the identity seed
    # (one substep body in the generated code, whatever N is).
    ins = _symbols(builder, ca.MX)
    x0, u, p, t0, dt = ins[:5]
    h = dt / steps
    state = {"x": x0, "S": ca.MX(_identity_seed(builder)) if sens else None, "z": ins[5] if _nz(builder) else None}
    err = None
    offset = 0
    for k in reversed(range(steps.bit_length())):
        if not (steps >> k) & 1:
            continue
        args = {**state, "u": u, "p": p, "t": t0 + float(offset) * h, "h": h}
        r = levels[k].call({key: value for key, value in args.items() if key in in_names})
        state = {i: r[o] if o in r else None for i, o in carried.items()}
        if emb:
            err = r["err"] if err is None else err + r["err"]
        offset += 2 ** k
    return ca.Function(name, ins, _outputs(builder, state["x"], state["S"], err, state["z"]),
                       _input_names(builder), _output_names(builder), {"never_inline": True})
