"""Your own model from scratch: a damped pendulum driven by a torque, its integrator, its exact A and B.

    python examples/own_model.py [OUT_DIR]

Declares the model in CasADi SX, builds an RK4 step with 4 substeps and its sensitivities, checks A against
central differences, and simulates 2 s under a constant torque (a plot of the trajectory in OUT_DIR).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import casadi as ca
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import shooting  # noqa: E402


def make_model() -> shooting.Model:
    """theta'' = -g/l sin(theta) - c theta' + tau / (m l^2); x = (theta, omega), u = tau, p = c."""
    x, u, p = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("p", 1)
    g, length, mass = 9.81, 0.5, 0.2
    xdot = ca.vertcat(x[1], -g / length * ca.sin(x[0]) - p[0] * x[1] + u[0] / (mass * length**2))
    return shooting.Model("damped_pendulum", x, u, xdot, p, state_names=["theta", "omega"],
                          input_names=["tau"], param_names=["c"], x0=[0.5, 0.0], p0=[0.3],
                          u_min=[-1.0], u_max=[1.0], dt=0.05)


def main(out: Path) -> None:
    model = make_model()
    step = shooting.build_integrator(model, "rk4", steps=4)
    x0, u, p, dt = np.array([0.5, 0.0]), np.array([0.1]), model.p0, 0.05
    x_next, A, B = (np.array(v) for v in step(x0, u, p, 0.0, dt))
    # A is the exact derivative of the discrete step: compare with central differences
    h = 1e-6
    def x_plus(x: np.ndarray) -> np.ndarray:
        return np.array(step(x, u, p, 0.0, dt)[0]).ravel()

    A_fd = np.column_stack([(x_plus(x0 + h * e) - x_plus(x0 - h * e)) / (2 * h) for e in np.eye(2)])
    print(f"x_next = {x_next.ravel()}, |A - A_fd| = {np.abs(A - A_fd).max():.1e}, B = {B.ravel()}")
    xs = [x0]
    for k in range(40):
        xs.append(np.array(step(xs[-1], u, p, k * dt, dt)[0]).ravel())
    xs_arr = np.array(xs)
    fig, ax = plt.subplots()
    ax.plot(np.arange(41) * dt, xs_arr[:, 0], label="theta [rad]")
    ax.plot(np.arange(41) * dt, xs_arr[:, 1], label="omega [rad/s]")
    ax.set_xlabel("t [s]")
    ax.legend()
    fig.savefig(out / "own_model.png")
    print(f"wrote {out / 'own_model.png'}")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shooting_example_"))
    target.mkdir(parents=True, exist_ok=True)
    main(target)
