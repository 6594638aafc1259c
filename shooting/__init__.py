"""shooting: Runge-Kutta integrators with exact sensitivities on CasADi."""

from shooting.model import Model

__version__ = "0.1.0"

__all__ = ["Model", "__version__"]
