"""The argument parser of `shooting-codegen`: its verbs, options and argparse types (one-line usage errors).

Light at import (argparse and the option lists only): the limits the types
check are imported when an option is parsed.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, NoReturn

from shooting._cli_text import UsageError
from shooting._version import VERSION
from shooting.options import (
    CONTROLLER_HESSIANS,
    CONTROLLER_QPS,
    HESSIANS,
    NEWTON_METHODS,
    REALS,
    SENSITIVITIES,
    TARGETS,
)

__all__ = ["DESCRIPTION", "build_parser"]

#: The first line of the command's help.
DESCRIPTION = ("shooting-codegen: list models and tableaus, inspect a tableau, export integrators and "
               "controllers as C, run MPC.")


#: Help of --real (integrator and controller).
REAL_HELP = "the C's floating-point type: double, or float (single precision throughout, its own sin/cos)"


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)  # (an abbreviation accepted today breaks with tomorrow's option)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:  # one line, status 2 (argparse prints usage + message)
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _number(convert: Callable[[str], float], ok: Callable[[float], bool], what: str) -> Callable[[str], float]:
    """An argparse type: `convert` the text and require `ok`, else "expected <what>"."""

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what.replace(" ", "_")
    return parse


def _count(maximum: int) -> Callable[[str], float]:
    """An argparse type: an integer in 1..maximum."""
    return _number(int, lambda v: 1 <= v <= maximum, f"an integer in 1..{maximum}")


def _steps(text: str) -> float:
    from shooting.integrate.integrator import MAX_STEPS
    return _count(MAX_STEPS)(text)


def _vectors(text: str) -> float:
    from shooting.codegen.pipeline import MAX_VECTORS
    return _count(MAX_VECTORS)(text)


def _horizon(text: str) -> float:
    from shooting.mpc.problem import MAX_HORIZON
    return _count(MAX_HORIZON)(text)


def _sim_steps(text: str) -> float:
    from shooting.mpc.scenarios import MAX_SIM_STEPS
    return _count(MAX_SIM_STEPS)(text)


def _qp_budget(text: str) -> float:
    from shooting.controller.c_source import MAX_QP_BUDGET
    return _count(MAX_QP_BUDGET)(text)


def _sqp_budget(text: str) -> float:
    from shooting.mpc.sqp import MAX_SQP_ITERATIONS
    return _count(MAX_SQP_ITERATIONS)(text)


def _newton_iterations(text: str) -> float:
    from shooting.integrate.integrator import MAX_NEWTON_ITERATIONS
    return _count(MAX_NEWTON_ITERATIONS)(text)


_nonnegative_int = _number(int, lambda v: v >= 0, "a non-negative integer")
_positive_float = _number(float, lambda v: math.isfinite(v) and v > 0, "a positive number")
_nonnegative_float = _number(float, lambda v: math.isfinite(v) and v >= 0, "a non-negative number")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``shooting-codegen`` (one-line errors, exit status 2)."""
    parser = _Parser(prog="shooting-codegen", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    lst = sub.add_parser("list", help="list the built-in models and tableaus, or describe one model",
                         description="List the built-in models and tableaus; with --model, describe that model "
                                     "(a built-in name or a .py file): its states, inputs, parameters with their "
                                     "units, bounds and nominal values, and its scenarios.")
    lst.add_argument("--model", help="a built-in name, a .py file or 'package.module:function' to describe")
    lst.add_argument("--model-arg", action="append", metavar="NAME=VALUE",
                     help="a parameter of the model's factory, e.g. --model-arg n=5 (repeatable)")

    tab = sub.add_parser("tableau", help="print a tableau, its verified order and stability",
                         description="Print a Butcher tableau with its verified order and stability flags.")
    tab.add_argument("name", help="catalogue name (see 'list') or a JSON file")
    tab.add_argument("--plot", metavar="FILE", help="write the stability region as a PNG")

    _add_integrator(sub)
    _add_mpc(sub)
    _add_controller(sub)
    _add_estimator(sub)
    _add_sweep(sub)
    return parser


def _add_estimator(sub: "argparse._SubParsersAction[_Parser]") -> None:
    est = sub.add_parser(
        "estimator", help="export a state estimator (an EKF or a real-time MHE) as C",
        description="Export the extended Kalman filter (--kind ekf) or the real-time moving-horizon estimator "
                    "(--kind mhe) of a model (its step by --method and --steps, its sensors: the model file's "
                    "measurement(x, u, p)) as C: NAME.c, NAME.h, manifest.json, Makefile. --check runs the C on "
                    "the updates of a simulated run against Python (and on an emulated Cortex-M4 with --target "
                    "cortex-m4, each update's cycles counted).")
    est.add_argument("--model", required=True,
                     help="built-in name, file.py, file.py:function or package.module:function")
    est.add_argument("--model-arg", action="append", metavar="NAME=VALUE",
                     help="a parameter of the model's factory, e.g. --model-arg n=5 (repeatable)")
    est.add_argument("--kind", choices=("ekf", "mhe"), default="ekf",
                     help="ekf (default), or mhe: the real-time moving-horizon estimator (one Gauss-Newton QP "
                          "step per sample, the state bounds kept)")
    est.add_argument("--horizon", type=_horizon, help="the MHE's window in samples (with --kind mhe; default 10)")
    est.add_argument("--method", default="rk4", help="the step's tableau (default rk4; see 'list')")
    est.add_argument("--steps", type=_steps, default=1, help="substeps per sampling interval (default 1)")
    est.add_argument("--dt", type=_positive_float, help="sampling time (default the model's dt)")
    est.add_argument("--Q", metavar="V1,V2,...",
                     help="the process noise's variances per state, the diagonal of Q (default 1e-4 each)")
    est.add_argument("--R", metavar="V1,V2,...",
                     help="the measurement noise's variances per sensor, the diagonal of R (default 1e-4 each)")
    est.add_argument("--real", choices=REALS, default="double", help=REAL_HELP)
    est.add_argument("--target", choices=TARGETS, default="host",
                     help="cortex-m4: cross-compile, report flash/RAM; with --check run on an emulated Cortex-M4")
    est.add_argument("--check", action="store_true",
                     help="run the C on a simulated run's updates against Python (exit 1 on mismatch, nothing "
                          "written)")
    est.add_argument("--name", help="C prefix and file stem (default <model>_ekf or <model>_mhe)")
    _add_output_arguments(est, lint="do not warn when the step is outside its stability region at x0",
                          quiet="no progress lines")


def _add_integrator(sub: "argparse._SubParsersAction[_Parser]") -> None:
    integ = sub.add_parser(
        "integrator", help="export an integrator with sensitivities as C",
        description="Build an integrator step with exact sensitivities and export it as C "
                    "(NAME.c, NAME.h, manifest.json, Makefile).")
    integ.add_argument("--model", required=True,
                       help="built-in name, file.py, file.py:function or package.module:function")
    integ.add_argument("--model-arg", action="append", metavar="NAME=VALUE",
                       help="a parameter of the model's factory, e.g. --model-arg n=5 (repeatable)")
    integ.add_argument("--method", help="catalogue tableau (default rk4)")
    integ.add_argument("--tableau-file", metavar="FILE", help="a JSON tableau instead of --method")
    integ.add_argument("--steps", type=_steps, default=1, help="substeps per interval (default 1)")
    integ.add_argument("--dt", type=_positive_float,
                       help="interval length for the checks and the manifest (default: the model's nominal dt; "
                            "dt stays an input of the C function)")
    integ.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    integ.add_argument("--name", help="C prefix and file stem (default <model>_<method>)")
    integ.add_argument("--real", choices=REALS, default="double", help=REAL_HELP)
    integ.add_argument("--sensitivities", choices=SENSITIVITIES, default="forward",
                       help="what the step returns beside x_next: forward (A, B), adjoint (A' lam, B' lam), "
                            "second-order (A, B and the Hessian of lam' x_next), or none")
    integ.add_argument("--newton-iterations", type=_newton_iterations, help="Newton steps for implicit tableaus")
    integ.add_argument("--newton", choices=NEWTON_METHODS,
                       help="implicit tableaus: full Newton (default) or one reused factorisation (smaller code)")
    integ.add_argument("--check", action="store_true",
                       help="compile, run on test vectors and compare with Python (exit 1 on mismatch)")
    integ.add_argument("--target", choices=TARGETS, default="host",
                       help="cortex-m4: cross-compile, report flash/RAM; with --check run on an emulated Cortex-M4")
    integ.add_argument("--vectors", type=_vectors,
                       help="test vectors for --check (and for the float-vs-double record of --real float; default 8)")
    integ.add_argument("--force", action="store_true", help="write into a non-empty directory of other files")
    integ.add_argument("--no-lint", action="store_true",
                       help="do not warn when the step is outside its stability region at the nominal point")
    integ.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _add_output_arguments(parser: argparse.ArgumentParser, *, lint: str, quiet: str, force: bool = True) -> None:
    """The arguments every writing verb ends with: --out, --force, --no-lint (its help: `lint`), -q."""
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    if force:
        parser.add_argument("--force", action="store_true", help="write into a non-empty directory of other files")
    parser.add_argument("--no-lint", action="store_true", help=lint)
    parser.add_argument("-q", "--quiet", action="store_true", help=quiet)


def _add_ocp_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose a model and change its default scenario's discretisation."""
    parser.add_argument("--model", required=True,
                        help="built-in name, file.py, file.py:function or package.module:function")
    parser.add_argument("--model-arg", action="append", metavar="NAME=VALUE",
                        help="a parameter of the model's factory, e.g. --model-arg n=5 (repeatable)")
    parser.add_argument("--horizon", type=_horizon, help="shooting intervals N")
    parser.add_argument("--dt", type=_positive_float, help="interval length and sampling time [s]")
    parser.add_argument("--method", help="integrator tableau of the OCP (see 'list')")
    parser.add_argument("--steps", type=_steps, help="integrator substeps per interval")
    parser.add_argument("--R-delta", metavar="W1,W2,...",
                        help="input-rate penalty: the diagonal of R_delta on u_k - u_{k-1}, nu non-negative numbers "
                             "(or one for every input)")


def _add_mpc(sub: "argparse._SubParsersAction[_Parser]") -> None:
    mpc = sub.add_parser(
        "mpc", help="solve the model's default OCP and simulate its MPC closed loop",
        description="Build the model's default scenario (cartpole: swing-up from hanging), solve the OCP once, "
                    "run the closed loop against an accurately integrated plant and write trajectory.json, "
                    "trajectory.csv, summary.json and PNG plots. Options override the scenario.")
    _add_ocp_arguments(mpc)
    mpc.add_argument("--scenario", default="default",
                     help="the model's scenario: 'default', or a named one (see 'shooting-codegen list')")
    mpc.add_argument("--hessian", choices=HESSIANS, help="Hessian of the OCP's Lagrangian")
    mpc.add_argument("--x-ref", metavar="V1,V2,...",
                     help="state reference, nx comma-separated numbers (beyond a bound the controller stops at "
                          "the bound; a warning where its weight is nonzero)")
    mpc.add_argument("--x0", metavar="V1,V2,...",
                     help="initial state, nx comma-separated numbers ('pi' allowed; "
                          "write --x0=-1,0 when the first is negative)")
    mpc.add_argument("--sim-steps", type=_sim_steps, help="closed-loop steps K")
    mpc.add_argument("--rti", action="store_true", help="real-time iteration controller instead of full solves")
    mpc.add_argument("--compile-nlp", action=argparse.BooleanOptionalAction, default=None,
                     help="compile the OCP's NLP functions once per problem into the per-user cache and reuse them "
                          "in later runs (default: off, unless SHOOTING_COMPILE_NLP=1: the first run of a problem "
                          "pays 5-45 s of gcc, a later one saves 0.1-0.8 s)")
    mpc.add_argument("--noise-std", "--noise", dest="noise", type=_nonnegative_float, metavar="STD",
                     help="standard deviation of additive process noise on every state (--noise: the old name)")
    mpc.add_argument("--seed", type=_nonnegative_int, help="seed of --noise-std (default 0)")
    _add_output_arguments(mpc, lint="do not warn when the OCP's step is outside its stability region at x0",
                          quiet="no progress lines or bar")


def _add_controller(sub: "argparse._SubParsersAction[_Parser]") -> None:
    ctl = sub.add_parser(
        "controller", help="export the real-time-iteration MPC controller as C",
        description="Export the model's default scenario's MPC (options override it) as a C controller: "
                    "NAME_mpc.c, NAME_mpc.h, manifest.json, Makefile (linearise with the integrator's A and B, "
                    "the stage-wise QP by an interior point with a Riccati recursion, static memory). --check "
                    "runs it in closed loop against the Python RTIController (and on an emulated Cortex-M4 with "
                    "--target cortex-m4).")
    _add_ocp_arguments(ctl)
    ctl.add_argument("--x0", metavar="V1,V2,...",
                     help="initial state of the guess and of the check (default the scenario's start)")
    ctl.add_argument("--hard-x-bounds", action="store_true",
                     help="hard state bounds (default: soft, with an L1 + L2 penalty on slacks)")
    ctl.add_argument("--hard-path-constraints", action="store_true",
                     help="hard path constraints of the scenario (default: soft, as the state bounds: a "
                          "linearisation that cannot be met is then never an infeasible QP)")
    ctl.add_argument("--slack-l1", type=_nonnegative_float, help="L1 weight of the slacks (default 1e3)")
    ctl.add_argument("--slack-l2", type=_positive_float, help="L2 weight of the slacks (default 1e2)")
    ctl.add_argument("--real", choices=REALS, default="double", help=REAL_HELP + "; the check's allowance follows")
    ctl.add_argument("--scenario", default="default",
                     help="the model's scenario: 'default', or a named one (see 'shooting-codegen list')")
    ctl.add_argument("--qp", choices=CONTROLLER_QPS, default=CONTROLLER_QPS[0],
                     help="QP solver of the C (the stage-wise QP by an interior point with a Riccati recursion)")
    ctl.add_argument("--hessian", choices=CONTROLLER_HESSIANS, default="auto",
                     help="the QP's Hessian: auto (default: exact where a stage or terminal cost is not a least-"
                          "squares one, else gauss-newton; the manifest's qp.hessian records it), gauss-newton "
                          "(the costs') or exact (the Lagrangian's: the "
                          "dynamics' and constraints' curvature at the last QP's multipliers, each stage's block "
                          "projected to positive definite)")
    ctl.add_argument("--target", choices=TARGETS, default="host",
                     help="cortex-m4: cross-compile, report flash/RAM; with --check run on an emulated Cortex-M4")
    ctl.add_argument("--check", action="store_true",
                     help="closed loop vs the Python RTIController (exit 1 on mismatch, nothing written)")
    ctl.add_argument("--check-steps", type=_sim_steps, help="closed-loop samples of --check (default 40)")
    ctl.add_argument("--check-x0", metavar="V1,V2,...",
                     help="initial state of --check's closed loops (default: the scenario's start, or --x0); they "
                          "follow the scenario's reference, a time-varying one sample by sample")
    ctl.add_argument("--keep-failed", action="store_true",
                     help="when --check fails, write the rejected export anyway, beside CHECK_FAILED.txt saying why "
                          "(exit status 1 still)")
    ctl.add_argument("--check-noise", type=_nonnegative_float, metavar="S",
                     help="process noise of --check's closed loops: standard deviation S per state and sample "
                          "(fixed seed; the same draws on the host, the board and the reference)")
    ctl.add_argument("--max-qp-iterations", type=_qp_budget, metavar="K",
                     help="the budget's default: at most K iterations per QP (each Riccati factorisation counts "
                          "one; default 50); NAME_mpc_set_budget changes it at run time")
    ctl.add_argument("--max-sqp-iterations", type=_sqp_budget, metavar="J",
                     help="the budget's default: at most J SQP iterations per sample, a cold start's included (one "
                          "that needs more goes on at the next samples; default 100)")
    ctl.add_argument("--firmware", choices=("stm32f405",),
                     help="also write OUT/firmware/: startup code, linker script, clock (168 MHz) and USART set-up "
                          "and a main.c running the check's closed loop on the board; make -C OUT/firmware builds "
                          "firmware.elf (QEMU's netduinoplus2 runs it)")
    ctl.add_argument("--estimator", choices=("ekf",),
                     help="with --firmware: output feedback on the board, the controller sees an EKF's estimate "
                          "from the model's default sensors (its C beside the controller's)")
    ctl.add_argument("--measurement-noise", type=_nonnegative_float, metavar="S",
                     help="standard deviation of the board's sensors' noise (with --estimator; default 0)")
    ctl.add_argument("--name", help="C prefix (default the model's name): NAME_mpc.c, NAME_mpc.h")
    _add_output_arguments(ctl, lint="do not warn when the step is outside its stability region at x0",
                          quiet="no progress lines")


def _add_sweep(sub: "argparse._SubParsersAction[_Parser]") -> None:
    from shooting.sweeps.cases import MAX_CASES

    swp = sub.add_parser(
        "sweep", help="run the closed loop over many cases (start states, parameters, noise) on Dask",
        description="Run the scenario's closed loop for many cases drawn from --seed, in this process (--workers 1), "
                    "on a local Dask cluster (default: one worker per core) or on a Dask scheduler (--scheduler), "
                    "and write cases.csv, summary.json and sweep.png. Exit 0 when every case ran.")
    _add_ocp_arguments(swp)
    swp.add_argument("--scenario", default="default", help="the model's scenario (see 'shooting-codegen list')")
    swp.add_argument("--x0", metavar="V1,V2,...", help="the nominal start state (the centre of --x0-spread)")
    swp.add_argument("--sim-steps", type=_sim_steps, help="closed-loop samples K of every case")
    swp.add_argument("--controller", default="rti", metavar="rti|ipopt|c|DIR",
                     help="rti (Python real-time iterations, default), ipopt (full solves), c (the controller "
                          "exported to C, compiled on each worker) or a 'shooting-codegen controller' directory")
    swp.add_argument("--cases", type=_count(MAX_CASES), default=100, help="number of cases (default 100)")
    for option, what in (("--x0-spread", "x0 within +-S times each state's bound range (absolute if unbounded)"),
                         ("--p-spread", "plant parameters within +-S relative to p0 (the controller keeps p0)"),
                         ("--noise-std", "standard deviation of process noise on every state")):
        swp.add_argument(option, type=_nonnegative_float, default=0.0, metavar="S", help=f"{what} (default 0)")
    swp.add_argument("--estimator", choices=("ekf",),
                     help="output feedback: the controller sees an EKF's estimate from the model's default sensors")
    swp.add_argument("--measurement-noise", type=_nonnegative_float, metavar="S",
                     help="standard deviation of the sensors' noise (with --estimator; default 0)")
    swp.add_argument("--seed", type=_nonnegative_int, help="seed of the cases (default 0)")
    swp.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler, e.g. tcp://10.0.0.5:8786")
    swp.add_argument("--workers", type=_count(4096), help="local worker processes (1: this process)")
    swp.add_argument("--resume", action="store_true", help="complete the interrupted sweep in --out")
    _add_output_arguments(swp, lint="do not warn when the step is outside its stability region",
                          quiet="no progress", force=False)
