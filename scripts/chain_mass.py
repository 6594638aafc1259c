"""A chain of masses in the style of acados' chain_mass example: a model from another project, for benchmarks.

``n_mass`` point masses are linked by springs. The first is fixed at the
origin, the last one's velocity is the input (3 inputs), and the M =
``n_mass - 2`` masses between are free: the state is their positions, the
last mass's position and their velocities, ``nx = 6 M + 3`` (21 for 5
masses). Spring force between neighbours (Hooke with a rest length):
``F = D (1 - L / |d|) d``, ``d`` the difference of their positions; each free
mass accelerates by ``(F_right - F_left) / m + g``. Constants as acados'
(``examples/acados_python/chain_mass/export_chain_mass_model.py``):
``m = 0.033 kg``, ``D = 1 N/m``, ``L = 0.033 m``, ``g = (0, 0, -9.81)``,
``Ts = 0.2 s``, inputs ``|u_i| <= 1 m/s``, the end of the chain at rest at
``(1, 0, 0)``.

Usage: ``chain_model(5)`` -> `Model`; ``chain_ocp(model, horizon)`` -> the
regulation back to rest after a push of the free end (soft velocity bounds).
"""

from __future__ import annotations

import casadi as ca
import numpy as np

import shooting

MASS, SPRING, REST_LENGTH, GRAVITY = 0.033, 1.0, 0.033, np.array([0.0, 0.0, -9.81])
END = np.array([1.0, 0.0, 0.0])  # the last mass's position at rest


def _xdot(n_mass: int, x: ca.SX, u: ca.SX) -> ca.SX:
    M = n_mass - 2
    pos = [ca.DM.zeros(3)] + [x[3 * i:3 * i + 3] for i in range(M + 1)]  # fixed, free masses, the last
    vel = [x[3 * (M + 1) + 3 * i:3 * (M + 1) + 3 * i + 3] for i in range(M)]

    def force(i: int) -> ca.SX:  # the spring between pos[i] and pos[i + 1], acting on pos[i + 1]
        d = pos[i + 1] - pos[i]
        return SPRING * (1 - REST_LENGTH / ca.norm_2(d)) * d

    acc = [(force(i + 1) - force(i)) / MASS + GRAVITY for i in range(M)]
    return ca.vertcat(*vel, u, *acc)


def rest_state(n_mass: int) -> np.ndarray:
    """The chain hanging at rest from the origin to `END` (the free masses' positions solve force balance)."""
    M = n_mass - 2
    x = ca.SX.sym("x", 6 * M + 3)
    free = x[:3 * M]
    state = ca.vertcat(free, ca.DM(END), ca.DM.zeros(3 * M))
    balance = ca.Function("balance", [free], [_xdot(n_mass, state, ca.DM.zeros(3))[3 * (M + 1):]])
    solve = ca.rootfinder("rest", "newton", balance, {"abstol": 1e-12})
    guess = np.concatenate([END * (i + 1) / (M + 1) + np.array([0.0, 0.0, -0.1]) for i in range(M)])
    positions = np.asarray(solve(guess)).ravel()
    return np.concatenate([positions, END, np.zeros(3 * M)])


def chain_model(n_mass: int = 5) -> shooting.Model:
    """The chain of `n_mass` masses (``nx = 6 (n_mass - 2) + 3``, ``nu = 3``), at rest as its nominal state."""
    M = n_mass - 2
    x = ca.SX.sym("x", 6 * M + 3)
    u = ca.SX.sym("u", 3)
    rest = rest_state(n_mass)
    push = rest.copy()
    push[3 * M:3 * M + 3] += np.array([-0.2, 0.2, 0.2])  # the free end moved (acados pushes it with u)
    return shooting.Model(f"chain{n_mass}", x, u, _xdot(n_mass, x, u), x0=push, u0=np.zeros(3),
                          u_min=-np.ones(3), u_max=np.ones(3), dt=0.2,
                          description=f"acados' chain of {n_mass} masses, the last one's velocity as input")


def chain_ocp(model: shooting.Model, horizon: int) -> shooting.MultipleShootingOCP:
    """Back to rest: Q on the positions 1, on the velocities 0.1, R 0.01; soft |v| <= 1 on the free masses."""
    nx = model.nx
    M = (nx - 3) // 6
    rest = rest_state(M + 2)
    q = np.concatenate([np.ones(3 * (M + 1)), 0.1 * np.ones(3 * M)])
    big = np.full(nx, np.inf)
    v_max = big.copy()
    v_max[3 * (M + 1):] = 1.0
    cost = shooting.QuadraticCost(Q=q, R=0.01 * np.ones(3), Q_terminal=q, x_ref=rest, u_ref=np.zeros(3))
    problem = shooting.OCPProblem(horizon=horizon, dt=model.dt, method="rk4", steps=1, cost=cost,
                                  constraints=shooting.Constraints(x_min=-v_max, x_max=v_max, soft_x_bounds=True))
    return shooting.MultipleShootingOCP.from_problem(model, problem)


if __name__ == "__main__":
    chain = chain_model(5)
    rest = rest_state(5)
    print(f"{chain.name}: nx = {chain.nx}, nu = {chain.nu}, dt = {chain.dt} s; the free masses at rest: "
          f"{np.array2string(rest[:9].reshape(3, 3), precision=3)}; the push x0 - rest: "
          f"{np.abs(chain.x0 - rest).max():.2f} m")
    ocp = chain_ocp(chain, 20)
    print(f"back to rest at N = 20: {ocp.layout.n_w} decision variables")
