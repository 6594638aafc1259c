"""The NLP solver pair of an OCP: one for cold starts, one for warm starts, sharing derivatives.

IPOPT is pushed back into the interior at every start; with a primal-dual
warm start (a shifted previous solution) that throws the warm start away,
so warm solves use a second instance with IPOPT's warm-start options. It
differs only in options and reuses the first instance's derivative Functions
(gradient, Jacobian, Hessian of the Lagrangian), which are the expensive part
of the build.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.mpc.nlp_cache import NLPCache, NLPCacheReport, compile_nlp_default
from shooting.mpc.problem import SolverSettings

__all__ = ["DEFAULT_FATROP_OPTIONS", "DEFAULT_IPOPT_OPTIONS", "WARM_START_OPTIONS", "NLPSolvers"]

#: Quiet IPOPT defaults; anything passed as ``solver_options`` overrides them.
DEFAULT_IPOPT_OPTIONS: dict[str, object] = {
    "ipopt.print_level": 0,
    "ipopt.sb": "yes",
    "print_time": False,
    "ipopt.tol": 1e-8,
    "ipopt.max_iter": 500,
    "record_time": True,
}

#: Defaults for CasADi's fatrop (a structure-exploiting interior-point solver
#: for optimal control); the interleaved variables and stage-wise constraints
#: are the structure it detects.
DEFAULT_FATROP_OPTIONS: dict[str, object] = {
    "print_time": False,
    "record_time": True,
    "structure_detection": "auto",
    "fatrop": {"print_level": 0, "tol": 1e-8, "max_iter": 500},
}

#: Used on re-solves with a warm start (primal and dual): start close to the
#: central path instead of being pushed back into the interior.
WARM_START_OPTIONS: dict[str, object] = {
    "ipopt.warm_start_init_point": "yes",
    "ipopt.mu_init": 1e-6,
    "ipopt.warm_start_bound_push": 1e-9,
    "ipopt.warm_start_bound_frac": 1e-9,
    "ipopt.warm_start_slack_bound_push": 1e-9,
    "ipopt.warm_start_slack_bound_frac": 1e-9,
    "ipopt.warm_start_mult_bound_push": 1e-9,
}


class NLPSolvers:
    """The cold and warm ``casadi.nlpsol`` instances of one NLP.

    With ``settings.compile_nlp`` (or ``$SHOOTING_COMPILE_NLP`` when it is
    None) both are built on the NLP's functions compiled once per problem and
    kept in the per-user cache (`shooting.mpc.nlp_cache`); when that is not
    possible, on the SX functions as without it.

    Parameters
    ----------
    nlp : dict
        ``{"x", "p", "f", "g"}`` SX expressions.
    settings : SolverSettings
    equality : ndarray of bool, shape (n_g,)
        Which constraint rows are equalities (fatrop needs them).
    gauss_newton : callable ``() -> casadi.Function``, optional
        Builds the Hessian of the Lagrangian to use instead of the exact one.

    Attributes
    ----------
    cold, warm : casadi.Function
        The same object when the solver has no warm-start options (fatrop).
    cache : NLPCacheReport or None
        How the compiled functions were obtained; None when not compiling.
    """

    def __init__(self, nlp: Mapping[str, ca.SX], settings: SolverSettings, equality: npt.NDArray[np.bool_],
                 gauss_newton: Callable[[], ca.Function] | None = None) -> None:
        user = dict(settings.solver_options or {})
        compiled = settings.compile_nlp if settings.compile_nlp is not None else (
            not settings.jit and compile_nlp_default(False))
        if settings.solver == "ipopt":
            # Compiled, IPOPT's multipliers of the parameters (lam_p, which
            # shooting never reads) are not computed: their function, the
            # gradient of the Lagrangian in x and p, would add a fifth to the
            # C to compile. A user's calc_* option restores it.
            lean = {"calc_lam_p": False, "no_nlp_grad": True} if compiled and not any(
                k.startswith("calc_") or k == "no_nlp_grad" for k in user) else {}
            opts: dict[str, Any] = {**DEFAULT_IPOPT_OPTIONS, **lean, **user}
            warm: dict[str, Any] | None = {**opts, **WARM_START_OPTIONS, **user}
        else:
            opts = {**DEFAULT_FATROP_OPTIONS, "equality": [bool(e) for e in equality], **user}
            warm = None
        self._gauss_newton = gauss_newton
        self.cold: ca.Function
        self.warm: ca.Function
        self.cache: NLPCacheReport | None = None
        if not compiled:
            self._sx(nlp, settings, opts, warm)
            return
        oracle = ca.Function("nlp", [nlp["x"], nlp["p"]], [nlp["f"], nlp["g"]], ["x", "p"], ["f", "g"])
        cache = NLPCache(oracle, solver=settings.solver, hessian=settings.hessian, options=opts)
        library = cache.load()
        if library is None:
            self._sx(nlp, settings, opts, warm)
            if cache.report is None:  # a miss, not a fallback: compile what the SX solver evaluates
                library = cache.build({name: self.cold.get_function(name) for name in self.cold.get_function()})
        if library is not None:
            try:
                self.cold = ca.nlpsol("ocp", settings.solver, library, opts)
                self.warm = self.cold if warm is None else ca.nlpsol("ocp_warm", settings.solver, library, warm)
            except RuntimeError as err:  # CasADi refusing the library: the SX solver instead
                cache.fallback(f"the solver does not accept the compiled NLP: {str(err).strip().splitlines()[-1]}")
                self._sx(nlp, settings, opts, warm)
        self.cache = cache.report

    def _sx(self, nlp: Mapping[str, ca.SX], settings: SolverSettings, opts: dict[str, Any],
            warm: dict[str, Any] | None) -> None:
        """The solvers on CasADi's SX functions (optionally jit-compiled by CasADi in this process)."""
        extra: dict[str, Any] = {}
        if self._gauss_newton is not None:
            extra["hess_lag"] = self._gauss_newton()
        if settings.jit:
            extra.update({"jit": True, "compiler": "shell", "jit_options": {"flags": ["-O1"], "verbose": False}})
        self.cold = ca.nlpsol("ocp", settings.solver, dict(nlp), {**opts, **extra})
        if warm is None:
            self.warm = self.cold
        else:
            shared = {"grad_f": self.cold.get_function("nlp_grad_f"),
                      "jac_g": self.cold.get_function("nlp_jac_g"),
                      "hess_lag": self.cold.get_function("nlp_hess_l")}
            self.warm = ca.nlpsol("ocp_warm", settings.solver, dict(nlp), {**warm, **extra, **shared})

    @staticmethod
    def status(stats: Mapping[str, object]) -> str:
        """The solver's own status string (fatrop reports a number: 0 is success)."""
        status = stats.get("return_status", stats.get("unified_return_status", "unknown"))
        if not isinstance(status, str):
            status = "Solve_Succeeded" if status == 0 else f"fatrop_return_code_{status}"
        return status
