"""What the tests share that is not a fixture: the CI flag and the skip markers of missing tools.

Locally a test whose tool is missing skips; under CI (``CI`` set to anything but "", "0", "false" or "no", as
`.ci/run` does) it runs and fails, so that a missing install step cannot pass as a skip.
"""

from __future__ import annotations

import os

import pytest

from shooting.codegen import qemu_mps2, toolchain

__all__ = ["CI", "needs_arm", "needs_gcc", "needs_m4"]

CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _needs(available: bool, reason: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(not available and not CI, reason=reason)


#: The host's C compiler.
needs_gcc = _needs(toolchain.have_host_compiler(), "needs gcc")
#: arm-none-eabi-gcc with newlib (cross-compiles for the Cortex-M4).
needs_arm = _needs(qemu_mps2.have_cortex_m4_toolchain(), "needs arm-none-eabi-gcc and newlib")
#: The cross toolchain and qemu-system-arm (runs on the emulated Cortex-M4).
needs_m4 = _needs(qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu(),
                  "needs arm-none-eabi-gcc, newlib and qemu-system-arm")
