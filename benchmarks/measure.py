"""The measurement protocol of benchmarks/run.py: interleaved rounds, medians of per-round
ratios, the limits, and the machine's load recorded with every figure.

- **Interleaved.** Each round times ours and the baseline; a figure's ratio is the median of the
  per-round ratios, so a load spike on a shared machine hits both sides of a round alike. The
  quartiles of the per-round ratios say how much it moved. The order alternates (ours first in
  even rounds, the baseline first in odd ones), so neither side always runs in the other's wake.
- **Limits.** After the rounds, in a pass of their own, as many times each: the raw-read limit
  (one `read()` of the file) and the typed-decode limit (msgspec's typed decode of every line
  into Structs); a figure reports limit time / our median time (1.0: as fast as the limit).
  Timed inside the rounds they skewed the figure: the typed decode frees millions of Python
  objects and the side timed right after it paid for that memory (on the 2-core VM, 10,000
  completions -> token batch measured 1.52x with ours always after it against 1.11x with no
  limits timed and 1.11x with the baseline after it).
- **CPU.** Each round also takes the CPU time of each side (`cpu_time`: every thread of this
  process, and the fresh processes a start-up figure waits for); a figure reports the median
  of the per-round CPU ratios beside the wall-time one. On 2 cores a multi-threaded side's
  wall time depends on how well its threads overlap, which moves with the VM's scheduling
  from run to run; its CPU time says what work it does.
- **Load.** Before and after each figure: the 1-minute load average (`/proc/loadavg`), and the
  cores other processes keep busy (`/proc/stat` sampled for `SAMPLE` seconds while this process
  sleeps); free cores = `os.cpu_count()` minus those. The load average counts this benchmark's
  own threads and lags a minute; the sample does not. A figure is marked loaded when the load
  average exceeded `LOADED` or others held `OTHERS` cores: on 2 cores a multi-threaded baseline
  then competes with other jobs for its second thread.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LOADED = 1.5
"""A figure taken at a 1-minute load average above this is marked as such."""
OTHERS = 0.5
"""... and so is one during which other processes kept this many cores busy."""


@dataclass(frozen=True)
class Load:
    """The machine at one moment."""

    load1: float
    """1-minute load average: it counts this benchmark's own threads too (1 for ours, 2 for a
    multi-threaded baseline) and lags by about a minute."""
    others: float
    """Cores busy with other processes, sampled over `SAMPLE` seconds while this one sleeps."""
    cores: int

    @property
    def free_cores(self) -> float:
        return max(0.0, self.cores - self.others)


SAMPLE = 0.3
"""Seconds of /proc/stat sampling for `Load.others`."""


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f.readline().split()[1:9])
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def load_now() -> Load:
    cores = os.cpu_count() or 1
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            load1 = float(f.read().split()[0])
        busy0, total0 = _cpu_jiffies()
        time.sleep(SAMPLE)  # this process idles: what is busy now is someone else
        busy1, total1 = _cpu_jiffies()
        others = cores * (busy1 - busy0) / max(total1 - total0, 1)
    except (OSError, IndexError, ValueError):  # no procfs
        load1, others = os.getloadavg()[0], 0.0
    return Load(load1, round(others, 2), cores)


@dataclass
class Figure:
    name: str
    ours: float
    base: float
    base_name: str
    ratio: float
    target: str = ""
    unit: str = "s"
    spread: tuple[float, float] | None = None
    rounds: int = 1
    raw_fraction: float | None = None
    """Raw-read limit time / our time (None: no file is read)."""
    typed_fraction: float | None = None
    """Typed-decode limit time / our time."""
    cpu_ratio: float | None = None
    """Median of the per-round ratios of CPU time (all threads), ours / baseline."""
    load_start: float = 0.0
    load_end: float = 0.0
    others: float = 0.0
    """Cores busy with other processes, the larger of the samples at the start and the end."""
    free_cores: float = 0.0
    """Cores minus `others`."""
    cores: int = 0
    section: str = ""
    note: str = ""
    ok: bool | None = field(default=None)

    def __post_init__(self) -> None:
        self.ok = check(self.ratio, self.target)

    @property
    def loaded(self) -> bool:
        """The load average above `LOADED`, or another process holding half a core or more."""
        return max(self.load_start, self.load_end) > LOADED or self.others >= OTHERS

    def verdict(self) -> str:
        word = {True: "PASS", False: "FAIL", None: "info"}[self.ok]
        return f"{word} (loaded)" if self.loaded and self.ok is not None else word

    def ratio_text(self) -> str:
        spread = f" ({self.spread[0]:.2f}-{self.spread[1]:.2f})" if self.spread else ""
        return f"{self.ratio:.2f}x{spread}"

    def line(self) -> str:
        limits = " ".join(f"{k} {v:.0%}" for k, v in (("raw", self.raw_fraction),
                                                      ("typed", self.typed_fraction)) if v)
        cpu = f" cpu {self.cpu_ratio:.2f}x;" if self.cpu_ratio else ""
        return (f"{self.verdict():13} {self.name:58} {self.ratio_text():20} {self.target or '-':7}"
                f" ({fmt(self.ours, self.unit)} vs {fmt(self.base, self.unit)} {self.base_name};"
                f"{cpu}"
                f" {self.rounds} rounds; load {self.load_start:.1f}-{self.load_end:.1f}, others"
                f" {self.others:.1f}, {self.free_cores:.1f} of {self.cores} cores free"
                f"{'; ' + limits if limits else ''})")

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "loaded": self.loaded, "verdict": self.verdict()}


def check(ratio: float, target: str) -> bool | None:
    """`<= 1.1` / `>= 25`; an empty target is informational."""
    if not target:
        return None
    op, value = target.split()
    return ratio <= float(value) if op == "<=" else ratio >= float(value)


def fmt(seconds: float, unit: str = "s") -> str:
    if unit == "MB":
        return f"{seconds:.0f} MB"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 4:
        return min(values), max(values)
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def _time(fn: Callable[[], Any], number: int, cpu: list[float] | None = None) -> float:
    """Wall time a call; with `cpu`, the process's CPU time a call is appended to it."""
    start, start_cpu = time.perf_counter(), cpu_time()
    for _ in range(number):
        fn()
    wall = (time.perf_counter() - start) / number
    if cpu is not None:
        cpu.append((cpu_time() - start_cpu) / number)
    return wall


def cpu_time() -> float:
    """CPU seconds of this process (every thread) and of its children that were waited for
    (the start-up figures time fresh processes; the clock of those is 10 ms coarse)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def interleaved(name: str, ours: Callable[[], Any], base: Callable[[], Any], base_name: str, *,
                target: str = "", rounds: int = 5, number: int = 1, budget: float = 120.0,
                raw: Callable[[], Any] | None = None, typed: Callable[[], Any] | None = None,
                note: str = "") -> Figure:
    """Ours and the baseline timed in alternation, `number` calls per round, then the limits;
    no new round starts after `budget` seconds once two have run."""
    before = load_now()
    ours(), base()  # warm: imports, caches, the file in the page cache
    t_ours: list[float] = []
    t_base: list[float] = []
    raw_f: list[float] = []
    typed_f: list[float] = []
    c_ours: list[float] = []
    c_base: list[float] = []
    start = time.perf_counter()
    while len(t_ours) < rounds and (len(t_ours) < 2 or time.perf_counter() - start < budget):
        if len(t_ours) % 2:  # odd rounds: the baseline first (see the module doc)
            b = _time(base, number, c_base)
            a = _time(ours, number, c_ours)
        else:
            a = _time(ours, number, c_ours)
            b = _time(base, number, c_base)
        t_ours.append(a)
        t_base.append(b)
    # the limits in a pass of their own: the typed decode churns millions of objects, and the
    # side timed right after it paid for that memory
    med = statistics.median
    for limit, fractions in ((raw, raw_f), (typed, typed_f)):
        if limit is not None:
            fractions.extend(_time(limit, number) / med(t_ours) for _ in range(len(t_ours)))
    after = load_now()
    ratios = [a / b for a, b in zip(t_ours, t_base)]
    cpu = [a / b for a, b in zip(c_ours, c_base) if b > 0]
    return Figure(name, med(t_ours), med(t_base), base_name, med(ratios), target,
                  spread=quartiles(ratios), rounds=len(ratios), cpu_ratio=med(cpu) if cpu else None,
                  raw_fraction=med(raw_f) if raw_f else None,
                  typed_fraction=med(typed_f) if typed_f else None,
                  note=note, **where(before, after))


def where(before: Load, after: Load) -> dict[str, Any]:
    """A figure's load fields from the samples at its start and end."""
    others = max(before.others, after.others)
    return {"load_start": before.load1, "load_end": after.load1, "others": others,
            "free_cores": max(0.0, before.cores - others), "cores": before.cores}


def process_time(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """Wall time of one fresh process (start-up figures); it must exit 0."""
    start = time.perf_counter()
    subprocess.run(argv, check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def markdown(figures: list[Figure]) -> str:
    """The figures as the Markdown table benchmarks/README.md keeps."""
    rows = ["| figure | ours | baseline | ratio (quartiles) | target | verdict | CPU ratio "
            "| raw-read limit | typed-decode limit | load start-end | cores busy with others "
            "| free cores | rounds |",
            "|---|---:|---|---:|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for f in figures:
        raw = f"{f.raw_fraction:.0%}" if f.raw_fraction else "-"
        typed = f"{f.typed_fraction:.0%}" if f.typed_fraction else "-"
        cpu = f"{f.cpu_ratio:.2f}x" if f.cpu_ratio else "-"
        rows.append(f"| {f.name} | {fmt(f.ours, f.unit)} | {fmt(f.base, f.unit)} {f.base_name} "
                    f"| {f.ratio_text()} | {f.target or '-'} | {f.verdict()} | {cpu} | {raw} "
                    f"| {typed} "
                    f"| {f.load_start:.1f}-{f.load_end:.1f} | {f.others:.1f} "
                    f"| {f.free_cores:.1f} of {f.cores} | {f.rounds} |")
    return "\n".join(rows) + "\n"
