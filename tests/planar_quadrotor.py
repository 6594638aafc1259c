"""A planar quadrotor (x, z, theta, vx, vz, omega; thrusts T1, T2; its mass a parameter) flying past a round obstacle
(a soft path constraint r^2 - |p - c|^2 <= 0): our own model for the float checks of a nonlinear constraint."""

from __future__ import annotations

import casadi as ca

import shooting

ARM, INERTIA, G = 0.15, 0.02, 9.81
CENTER, RADIUS = (1.0, 0.0), 0.4


def make_model() -> shooting.Model:
    x = ca.SX.sym("x", 6)
    u = ca.SX.sym("u", 2)
    p = ca.SX.sym("p", 1)
    m = p[0]
    th = x[2]
    xdot = ca.vertcat(x[3], x[4], x[5], -(u[0] + u[1]) * ca.sin(th) / m, (u[0] + u[1]) * ca.cos(th) / m - G,
                      ARM * (u[1] - u[0]) / INERTIA)
    return shooting.Model("planar_quad", x, u, xdot, p, state_names=["x", "z", "theta", "vx", "vz", "omega"],
                          input_names=["T1", "T2"], param_names=["m"], p0=[0.5], x0=[0.0, 0.0, 0, 0, 0, 0],
                          u0=[0.5 * 0.5 * G, 0.5 * 0.5 * G], u_min=[0.0, 0.0], u_max=[6.0, 6.0], dt=0.05,
                          state_units=["m", "m", "rad", "m/s", "m/s", "rad/s"], input_units=["N", "N"])


def obstacle(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    return RADIUS**2 - ((x[0] - CENTER[0]) ** 2 + (x[1] - CENTER[1]) ** 2)


def scenario(model: shooting.Model) -> shooting.Scenario:
    hover = 0.5 * 0.5 * G
    problem = shooting.OCPProblem(
        horizon=30, dt=0.05, method="rk4", steps=1,
        cost=shooting.QuadraticCost(Q=[10, 10, 1, 0.5, 0.5, 0.1], R=[0.05, 0.05], Q_terminal=[100, 100, 10, 5, 5, 1],
                                    x_ref=[2.0, 0.0, 0, 0, 0, 0], u_ref=[hover, hover]),
        constraints=shooting.Constraints(path_constraints=obstacle, soft_path_constraints=True))
    return shooting.Scenario(model=model.name, problem=problem, x0=[0.0, 0.05, 0, 0, 0, 0], sim_steps=80)
