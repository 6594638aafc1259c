"""acados' race car (examples/acados_python/race_cars: a 1:43 car on a spatial bicycle model, Kloeser et al.),
re-typed from the published equations with our own track: its curvature kappa(s) = 4 sin(pi s / 1.5) (a smooth
slalom, where acados interpolates a measured track by splines). States s (progress), n (lateral offset), alpha
(heading error), v, D (throttle), delta (steering); inputs their rates. acados' costs (its LINEAR_LS weights,
halved: acados' cost carries a factor 1/2), bounds and progress reference (3 m over the 1 s horizon); the
longitudinal and lateral accelerations within +-4 m/s^2 as soft path constraints (acados softens a_long and n,
keeps a_lat hard)."""

from __future__ import annotations

from collections.abc import Callable

import casadi as ca
import numpy as np

import shooting

MASS, C1, C2, CM1, CM2, CR0, CR2 = 0.043, 0.5, 15.5, 0.28, 0.05, 0.011, 0.006
N, TF = 50, 1.0


#: Tracks by their curvature kappa(s) [1/m]: our slalom, and two circuit-like ones (curvature between -0.2 and 0.8,
#: mostly turning one way, as a closed circuit's; the second with a short chicane).
TRACKS: dict[str, Callable[[ca.SX], ca.SX]] = {
    "slalom": lambda s: 4.0 * ca.sin(np.pi * s / 1.5),
    "circuit": lambda s: 0.3 + 0.5 * ca.sin(2 * np.pi * s / 6.0),
    "circuit with a chicane": lambda s: 0.3 + 0.35 * ca.sin(2 * np.pi * s / 4.0) + 0.15 * ca.sin(2 * np.pi * s / 1.3),
}


def kappa(s: ca.SX) -> ca.SX:
    return TRACKS["slalom"](s)


def _drive(v: ca.SX, D: ca.SX) -> ca.SX:
    return (CM1 - CM2 * v) * D - CR2 * v * v - CR0 * ca.tanh(5 * v)


def make_model(track: str = "slalom") -> shooting.Model:
    curvature = TRACKS[track]
    x = ca.SX.sym("x", 6)
    u = ca.SX.sym("u", 2)
    s, n, alpha, v, D, delta = (x[i] for i in range(6))
    sdot = v * ca.cos(alpha + C1 * delta) / (1 - curvature(s) * n)
    xdot = ca.vertcat(sdot, v * ca.sin(alpha + C1 * delta), v * C2 * delta - curvature(s) * sdot,
                      _drive(v, D) / MASS * ca.cos(C1 * delta), u[0], u[1])
    return shooting.Model("race_car", x, u, xdot, state_names=["s", "n", "alpha", "v", "D", "delta"],
                          input_names=["dD", "ddelta"], x0=[-2.0, 0, 0, 0, 0, 0], u0=[0.0, 0.0],
                          u_min=[-10.0, -2.0], u_max=[10.0, 2.0], dt=TF / N,
                          state_units=["m", "m", "rad", "m/s", "1", "rad"], input_units=["1/s", "rad/s"])


def accelerations(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """|a_long| <= 4 and |a_lat| <= 4 [m/s^2] as h <= 0."""
    v, D, delta = x[3], x[4], x[5]
    a_long = _drive(v, D) / MASS
    a_lat = C2 * v * v * delta + _drive(v, D) * ca.sin(C1 * delta) / MASS
    return ca.vertcat(a_long - 4, -a_long - 4, a_lat - 4, -a_lat - 4)


def make_ocp(model: shooting.Model, s0: float = -2.0,
             solver_options: dict | None = None) -> shooting.MultipleShootingOCP:
    unscale = N / TF
    x_ref = np.zeros((N + 1, 6))
    x_ref[:, 0] = s0 + 3.0 * np.arange(N + 1) / N
    return shooting.MultipleShootingOCP(
        model, N, dt=TF / N, method="rk4", steps=3,
        Q=0.5 * unscale * np.diag([1e-1, 1e-8, 1e-8, 1e-8, 1e-3, 5e-3]), R=0.5 * unscale * np.diag([1e-3, 5e-3]),
        Q_terminal=0.5 / unscale * np.diag([5e0, 1e1, 1e-8, 1e-8, 5e-3, 2e-3]), x_ref=x_ref,
        x_min=[-np.inf, -0.12, -np.inf, -np.inf, -1.0, -0.4], x_max=[np.inf, 0.12, np.inf, np.inf, 1.0, 0.4],
        u_min=[-10.0, -2.0], u_max=[10.0, 2.0], path_constraints=accelerations, soft_path_constraints=True,
        slack_l1=100.0, slack_l2=1.0, solver_options=solver_options)
