"""Cycles of a program on the emulated Cortex-M4: QEMU's execution trace, costed by the cycle model.

`trace_segments` runs an ELF built by `shooting.codegen.qemu_mps2.build_m4_elf`
in QEMU (`QEMU_M4_ARGS` and `ICOUNT_ARGS`, so SysTick still counts
instructions in the same run) with ``-d exec,nochain,in_asm -D FIFO``. A small
C program (``templates/exec_trace.c.in``, compiled once per process with the
host gcc) reads the log from the FIFO while QEMU writes it, so the log (tens
of millions of lines) never reaches the disk, and adds up the instructions and
cycles of every translation block executed with the per-instruction costs of
`shooting.codegen.cycle_model` (the rules stay in Python; C only adds them up,
the per-block totals are recomputed in Python from its histogram and must
agree). A Python reader was measured at ~1 us a line, 5 s for the cart-pole's
40-sample check alone; the C reader keeps pace with QEMU.

A *segment* starts at each execution of a marker function: any function of the
ELF named ``shooting_mark_<name>`` (`marker_functions` writes them). Each
segment reports the marker's ``<name>``, its instructions (QEMU's count, the
same as SysTick under ``-icount``) and its cycles (`CycleModel`).

QEMU 7.2 flushes its log after every line (one system call per block); an
``LD_PRELOAD`` library (``templates/log_buffer.c.in``) makes that one stream
fully buffered: measured 6.9 s -> 2.1 s of emulation for the cart-pole's
40-sample closed loop (5.3 million log lines). ``buffered_log=False`` runs
without it.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from shooting import _validate
from shooting.codegen import qemu_mps2
from shooting.codegen.cycle_model import (
    MARKER_PREFIX,
    CostTable,
    CycleModel,
    Program,
    UnknownInstructionError,
    cost_table,
    disassemble,
)
from shooting.codegen.templates import render
from shooting.codegen.toolchain import ToolchainError, compile_host, find_tool, first_error_line, tool_timeout

__all__ = ["DEFAULT_MODEL", "WAIT_STATES", "CycleModel", "ProfileRow", "Segment", "TraceRun", "UnknownInstructionError",
           "marker_functions", "trace_on_cortex_m4", "trace_segments"]

#: QEMU's log items: every translation block's instructions once, and every execution of a block.
TRACE_ARGS = ("-d", "exec,nochain,in_asm")

#: Instruction name of the fetch wait states in a `TraceRun` breakdown.
WAIT_STATES = "(flash wait states)"

#: The default assumptions (an STM32F4 at 168 MHz, 5 flash wait states; see `CycleModel`).
DEFAULT_MODEL = CycleModel()


@dataclass(frozen=True)
class Segment:
    """From one execution of a marker function to the next.

    Attributes
    ----------
    marker : str
        ``NAME`` of the marker ``shooting_mark_NAME`` ("" before the first marker).
    instructions : int
        Instructions executed (QEMU's count).
    cycles : int
        Cycles at the model's assumptions, fetch wait states included.
    fetch_misses : int
        Non-sequential fetches that missed the flash accelerator's cache.
    seconds : float
        ``cycles`` at the model's clock.
    """

    marker: str
    instructions: int
    cycles: int
    fetch_misses: int
    seconds: float


@dataclass(frozen=True)
class ProfileRow:
    """Instructions and cycles of one instruction of one function within the segments of one marker.

    Attributes
    ----------
    marker, function, instruction : str
        The segments' marker name, the function, the instruction's table
        mnemonic (``"vdiv"``) or `WAIT_STATES`.
    instructions, cycles : int
    """

    marker: str
    function: str
    instruction: str
    instructions: int
    cycles: int


@dataclass(frozen=True)
class TraceRun:
    """A program run on the emulated Cortex-M4 with its execution costed (see `trace_segments`).

    Attributes
    ----------
    segments : tuple of Segment
        In order of execution.
    unmarked : Segment
        What ran before the first marker (marker "").
    stdout, stderr : str
        The program's output (stderr: also QEMU's diagnostics).
    exit_code : int
        As `shooting.codegen.qemu_mps2.RunResult.exit_code`.
    model : CycleModel
    profile : tuple of ProfileRow
    seconds : float
        Wall-clock time of the traced run.
    stats : dict of str to int
        Log lines, blocks executed, ``stopped`` (blocks QEMU left before
        their first instruction), ``io_splits`` (blocks cut by a device
        access), ``translations``, ``buffered_log`` (1 when the log was
        buffered), ``unexplained_jumps`` (control left a block that ends in
        no branch: only after a fault).
    """

    segments: tuple[Segment, ...]
    unmarked: Segment
    stdout: str
    stderr: str
    exit_code: int
    model: CycleModel
    profile: tuple[ProfileRow, ...]
    seconds: float
    stats: dict[str, int]

    @property
    def faulted(self) -> bool:
        """Whether the program ended in a fault handler."""
        return self.exit_code == qemu_mps2.FAULT_EXIT_CODE

    def of(self, marker: str) -> list[Segment]:
        """The segments of one marker, in order."""
        return [s for s in self.segments if s.marker == marker]

    def breakdown(self, by: Literal["function", "instruction"], markers: Iterable[str] | None = None
                  ) -> dict[str, tuple[int, int]]:
        """Instructions and cycles by function or by instruction, over the segments of `markers`.

        Parameters
        ----------
        by : {"function", "instruction"}
            Group by the function an instruction belongs to (its own cost,
            callees apart) or by its table mnemonic (``"vdiv"``, ``"ldr"``;
            the fetch wait states apart as `WAIT_STATES`).
        markers : iterable of str, optional
            Marker names (default: every segment and the unmarked start).

        Returns
        -------
        dict of str to (int, int)
            ``name -> (instructions, cycles)``, most cycles first.
        """
        by = _validate.choice(by, ("function", "instruction"), "by")
        wanted = None if markers is None else set(markers)
        totals: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        for row in self.profile:
            if wanted is None or row.marker in wanted:
                entry = totals[row.function if by == "function" else row.instruction]
                entry[0] += row.instructions
                entry[1] += row.cycles
        return {k: (v[0], v[1]) for k, v in sorted(totals.items(), key=lambda kv: -kv[1][1])}


def marker_functions(*names: str) -> str:
    """C definitions of the marker functions ``shooting_mark_NAME`` (call them where segments start).

    ``noinline, noipa`` keep every call and stop GCC from merging the
    identical bodies into one address.

    Parameters
    ----------
    *names : str
        Marker names, C identifier characters.

    Returns
    -------
    str
    """
    lines = []
    for name in names:
        fn = _validate.identifier(MARKER_PREFIX + name, "marker name")
        lines.append(f"void {fn}(void);\n"
                     f"__attribute__((noinline, noipa)) void {fn}(void) {{ __asm__ volatile(\"\"); }}")
    return "\n".join(lines) + "\n"


def trace_segments(elf: Path, *, model: CycleModel = DEFAULT_MODEL, timeout: float = 600.0,
                   buffered_log: bool = True) -> TraceRun:
    """Run `elf` on QEMU's mps2-an386 with its execution traced, and cost each segment.

    Parameters
    ----------
    elf : pathlib.Path
        A program linked by `shooting.codegen.qemu_mps2.build_m4_elf`.
    model : CycleModel, optional
    timeout : float, optional
        Seconds for the run (QEMU and the trace reader are killed after it).
    buffered_log : bool, optional
        Buffer QEMU's log with the ``LD_PRELOAD`` library (3x faster).

    Returns
    -------
    TraceRun
        A nonzero exit code is not an error here: the caller judges it.

    Raises
    ------
    ToolchainError
        A missing or failing tool, a timeout, a trace that does not agree with
        the ELF's disassembly.
    UnknownInstructionError
        An executed instruction the cycle model has no timing for.
    """
    elf = Path(elf).resolve()
    if not isinstance(model, CycleModel):
        raise ValueError(f"model must be a CycleModel, got {type(model).__name__}")
    buffered_log = _validate.flag(buffered_log, "buffered_log")
    qemu = find_tool("qemu-system-arm")
    program = disassemble(elf)
    table = cost_table(program, model)
    names = sorted(program.markers, key=program.markers.__getitem__)
    reader = _built("exec_trace", shared=False)
    library = _built("log_buffer", shared=True) if buffered_log else None
    with tempfile.TemporaryDirectory(prefix="shooting-trace-") as tmp:
        d = Path(tmp)
        fifo, costs, out = d / "exec.log", d / "costs.bin", d / "trace.txt"
        os.mkfifo(fifo)
        table.write(costs, model, [program.markers[n] for n in names])
        cmd = [qemu, *qemu_mps2.QEMU_M4_ARGS, *qemu_mps2.ICOUNT_ARGS, *TRACE_ARGS, "-D", str(fifo), "-kernel", str(elf)]
        preload = ":".join(p for p in (str(library), os.environ.get("LD_PRELOAD", "")) if p)
        env = dict(os.environ, LD_PRELOAD=preload, SHOOTING_TRACE_LOG=str(fifo)) if library else None
        start = time.perf_counter()
        stdout, stderr, code = _run_traced(cmd, env, [str(reader), str(fifo), str(costs), str(out)], fifo,
                                           tool_timeout(timeout), elf.name)
        seconds = time.perf_counter() - start
        text = out.read_text()
    markers = [n[len(MARKER_PREFIX):] for n in names]
    run = _read_output(text, program, table, model, markers)
    return TraceRun(segments=run[0], unmarked=run[1], stdout=stdout, stderr=stderr, exit_code=code, model=model,
                    profile=run[2], seconds=seconds, stats={**run[3], "buffered_log": int(library is not None)})


def trace_on_cortex_m4(sources: list[Path], *, include_dirs: tuple[Path, ...] = (), extra_flags: tuple[str, ...] = (),
                       timeout: float = 600.0, workdir: Path | None = None, opt: str = "-O2",
                       model: CycleModel = DEFAULT_MODEL) -> TraceRun:
    """Build a C (or assembly) program for the MPS2 AN386 and run it with `trace_segments`.

    Parameters
    ----------
    sources : list of pathlib.Path
        The program, as for `shooting.codegen.qemu_mps2.run_on_cortex_m4`;
        call marker functions (`marker_functions`) where segments start.
    include_dirs, extra_flags, opt :
        As for `shooting.codegen.qemu_mps2.run_on_cortex_m4`.
    timeout : float, optional
        Seconds for the build and, separately, for the run.
    workdir : pathlib.Path, optional
        Keeps ``app.elf`` and ``app.map`` there (default: a temporary folder).
    model : CycleModel, optional

    Returns
    -------
    TraceRun

    Raises
    ------
    ToolchainError
        A missing tool, a failed build, or as `trace_segments`.
    UnknownInstructionError
        As `trace_segments`.
    """
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="shooting-qemu-")))
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        elf, _, _ = qemu_mps2.build_m4_elf(sources, workdir, include_dirs, extra_flags, opt, timeout)
        return trace_segments(elf, model=model, timeout=timeout)


# --------------------------------------------------------------------------- running


@functools.lru_cache(maxsize=None)
def _built(template: str, shared: bool) -> Path:
    """The host build of ``templates/<template>.c.in``, once per process (deleted at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="shooting-cycles-"))
    atexit.register(shutil.rmtree, folder, True)
    source = folder / f"{template}.c"
    source.write_text(render(f"{template}.c.in"))
    output = folder / (f"lib{template}.so" if shared else template)
    result = compile_host([source], output, extra_flags=("-shared", "-fPIC") if shared else ())
    if not result.ok:
        raise ToolchainError(f"gcc failed building the trace helper {source.name}: {first_error_line(result.stderr)}")
    return output


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def _run_traced(qemu_cmd: list[str], env: dict[str, str] | None, reader_cmd: list[str], fifo: Path, timeout: float,
                name: str) -> tuple[str, str, int]:
    """Run the trace reader on the FIFO and QEMU writing it; both are killed on a timeout or an interrupt."""
    deadline = time.monotonic() + timeout
    reader = subprocess.Popen(reader_cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    qemu = None
    try:
        qemu = subprocess.Popen(qemu_cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        out, err = _outputs(qemu, reader, deadline)
        # A reader still blocked opening the FIFO (QEMU never opened it) gets its end of file.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        _, reader_err = reader.communicate(timeout=max(deadline - time.monotonic(), 1.0))
    except BaseException as exc:  # a timeout, or Ctrl-C: neither process may outlive us
        for proc in (qemu, reader):
            if proc is not None:
                _kill(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise ToolchainError(f"qemu-system-arm timed out after {timeout:g} s running {name} traced "
                                 f"(killed)") from None
        raise
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if reader.returncode != 0:
        detail = reader_err.decode("utf-8", "replace").strip() or f"exit {reader.returncode}"
        raise ToolchainError(f"reading the execution trace of {name} failed: {first_error_line(detail)}")
    if qemu.returncode != 0 and not stdout and stderr.startswith("qemu-system-arm:"):
        raise ToolchainError(f"qemu-system-arm failed to start {name}: {first_error_line(stderr)}")
    return stdout, stderr, qemu.returncode


def _outputs(qemu: subprocess.Popen[bytes], reader: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes]:
    """QEMU's stdout and stderr once it ends; killed at once if the reader fails (QEMU ignores SIGPIPE)."""
    while True:
        try:
            return qemu.communicate(timeout=max(min(0.5, deadline - time.monotonic()), 0.0))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
            if reader.poll() not in (None, 0):
                _kill(qemu)  # the reader's message is the error; QEMU's output is not needed
                return b"", b""


# --------------------------------------------------------------------------- the reader's output


def _read_output(text: str, program: Program, table: CostTable, model: CycleModel, markers: list[str]
                 ) -> tuple[tuple[Segment, ...], Segment, tuple[ProfileRow, ...], dict[str, int]]:
    """Segments, profile and statistics from the reader's output, its sums checked against Python's."""
    ws, hz = model.flash_wait_states, model.clock_hz
    segments, seg_cycles = [], collections.Counter[int]()
    rows: dict[tuple[int, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    walked = collections.Counter[int]()
    stats: dict[str, int] = {"unexplained_jumps": 0}
    for line in text.splitlines():
        tag, *fields = line.split()
        values = [int(v) for v in fields]
        if tag == "S":
            marker, insns, cycles, misses = values
            seg_cycles[marker] += cycles
            segments.append(Segment(markers[marker] if marker >= 0 else "", insns, cycles + ws * misses, misses,
                                    (cycles + ws * misses) / hz))
        elif tag == "H":
            walked[values[0]] += _walk(program, table, ws, values, rows, stats)
        elif tag == "T":
            stats.update(zip(("log_lines", "blocks", "stopped", "io_splits", "translations"), values, strict=True))
    if not segments or "log_lines" not in stats:
        raise ToolchainError("the execution trace reader wrote no summary (was QEMU's log empty?)")
    if walked != seg_cycles:
        raise ToolchainError(f"cycle sums disagree between the trace reader {dict(seg_cycles)} and its histogram "
                             f"{dict(walked)} (a bug in shooting.codegen.cycles)")
    profile = tuple(ProfileRow(markers[m] if m >= 0 else "", fn, name, v[0], v[1]) for (m, fn, name), v in rows.items())
    first, *rest = segments
    return tuple(rest), first, profile, stats


def _walk(program: Program, table: CostTable, ws: int, values: list[int],
          rows: dict[tuple[int, str, str], list[int]], stats: dict[str, int]) -> int:
    """Cost one kind of block execution instruction by instruction into `rows`; its cycles without wait states."""
    marker, pc, end, last, n, taken, seq, miss, count = values
    position = program.index.get(pc)
    if position is None or position + n > len(program.instructions):
        raise ToolchainError(f"QEMU executed a block at 0x{pc:08x} that objdump does not decode as instructions")
    total = 0
    for j in range(n):
        insn = program.instructions[position + j]
        expected = pc if j == 0 else program.instructions[position + j - 1].address + \
            program.instructions[position + j - 1].size
        if insn.address != expected or insn.address >= end:
            raise ToolchainError(f"QEMU's block at 0x{pc:08x} ({n} instructions to 0x{end:08x}) does not match "
                                 f"objdump's decoding at 0x{insn.address:08x}")
        if insn.address in table.unknown:
            raise UnknownInstructionError.of(insn)
        h = insn.address // 2
        cycles = int(table.in_sequence[h]) + (int(table.solo_delta[h]) if j == 0 and not seq else 0)
        if j == n - 1:
            if insn.address != last:
                raise ToolchainError(f"QEMU's block at 0x{pc:08x} ends at 0x{last:08x}, objdump's at "
                                     f"0x{insn.address:08x}")
            cycles += int(table.taken_extra[h]) if taken else 0
            stats["unexplained_jumps"] += count if taken and not insn.transfers_control else 0
        row = rows[(marker, insn.function, insn.name or insn.mnemonic)]
        row[0] += count
        row[1] += cycles * count
        total += cycles * count
    if miss:
        rows[(marker, program.instructions[position].function, WAIT_STATES)][1] += ws * count
    return total
