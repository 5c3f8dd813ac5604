"""The CLI's console and live progress for long runs (rich).

What is printed reads the same on a terminal and through a pipe (``bakeoff ... | tee log``, ``> file``). The rule,
applied here once, by :func:`make_console`, for standard output and standard error alike:

- On a terminal, rich's way: lines wrap at the terminal's width, between words.
- Off a terminal (a file, a pipe), nothing is wrapped at a fixed 80 columns: a line of free text is one line however
  long (a path or a command printed is never cut), and a table is as wide as its cells need, so no header is cut
  short (``COLUMNS``, when set, is the width instead, as rich reads it). Prose that runs to paragraphs (verdicts,
  the recommendation) is wrapped between words at :data:`PROSE_WIDTH` by :func:`paragraph`, never inside a word,
  a path, a quoted command or a short parenthesis; a table of prose cells at most :data:`PROSE_TABLE_WIDTH`. No line
  ends in blanks.
"""

from __future__ import annotations

import io
import os
import re
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec
from bakeoff.measure.environment import OTHER_WORK_SHARE

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from bakeoff.report.card import Card
    from bakeoff.report.templates import Table
    from bakeoff.results.store import Store

PROSE_WIDTH = 100
"""Off a terminal, the width prose is wrapped at (between words; a narrower ``COLUMNS`` wins)."""

HEARTBEAT_S = float(os.environ.get("BAKEOFF_HEARTBEAT_S") or 30)
"""Seconds without a printed line after which a run says what still runs (:class:`RunProgress`)."""

PROSE_TABLE_WIDTH = 160
"""Off a terminal without ``COLUMNS``, the width of a table whose cells are prose (``bakeoff claims``): as wide as its
cells need up to this, its cells wrapped between words beyond."""

UNBOUNDED = 100_000
"""Off a terminal without ``COLUMNS``, the console's width: wide enough that rich never wraps a line nor narrows a
table."""

_NBSP = "\u00a0"
_KEPT_WHOLE = re.compile(r"`[^`\n]{1,80}`|\([^()\n]{1,40}\)")
"""What :func:`paragraph` never breaks: a quoted command (``bakeoff run --retry-busy``) and a short parenthesis
(a ratio's interval, ``(0.51x, 95% CI 0.48–0.55x)``)."""


class _Unpadded:
    """The standard stream (looked up at each write, so a test's capture is honoured) with the blanks that would
    end a line dropped when it is not a terminal: rich pads a table's cells and wrapped text to its width."""

    def __init__(self, stream: Callable[[], io.TextIOBase]) -> None:
        self._stream = stream
        self._blanks = ""  # blanks at the end of the last write: dropped if a newline follows, written otherwise

    def write(self, text: str) -> int:
        stream = self._stream()
        if stream.isatty():
            return stream.write(text)
        text, self._blanks = self._blanks + text, ""
        body = text.rstrip(" ")
        self._blanks = text[len(body):]
        stream.write(re.sub(r" +\n", "\n", body))
        return len(text)

    def flush(self) -> None:
        self._stream().flush()

    def isatty(self) -> bool:
        return self._stream().isatty()

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream(), "encoding", None) or "utf-8"


def make_console(stderr: bool = False) -> Console:
    """The console on standard output (or error), by the module's rule: rich's own on a terminal; off one, no
    wrapping of free text and tables at their natural width (``COLUMNS`` when set), and no trailing blanks."""
    shown = Console(file=_Unpadded(lambda: sys.stderr if stderr else sys.stdout), highlight=False)
    if not shown.is_terminal:
        shown.soft_wrap = True  # a line is never cut by rich; paragraph() wraps prose between words
        if not os.environ.get("COLUMNS", "").strip().isdigit():
            shown.width = UNBOUNDED
    return shown


console = make_console()
errors = make_console(stderr=True)  # messages beside machine-readable output on stdout


def paragraph(markup: str, shown: Console | None = None) -> None:
    """Print prose (rich markup): on a terminal wrapped by rich at its width; off one, wrapped between words at
    :data:`PROSE_WIDTH` (or a narrower console) with continuation lines indented by two, never inside a word, a
    path, a quoted command or a short parenthesis (what a reader copies or reads as one figure), its markup dropped."""
    shown = shown or console
    if shown.is_terminal:
        shown.print(markup, soft_wrap=False)
        return
    plain = _KEPT_WHOLE.sub(lambda m: m.group(0).replace(" ", _NBSP), Text.from_markup(markup).plain)
    indent = " " * (len(plain) - len(plain.lstrip(" ")) + 2)
    lines = textwrap.wrap(plain, min(PROSE_WIDTH, shown.width), subsequent_indent=indent, break_long_words=False,
                          break_on_hyphens=False)
    shown.out("\n".join(line.replace(_NBSP, " ") for line in lines), highlight=False)


_STYLE = {"ok": "green", "failed": "red", "timeout": "red", "out_of_memory": "red", "unsupported": "yellow"}
_OUTCOME = {"better": "green", "worse": "red", "equal": "cyan", "unsettled": "yellow", "leader": "bold"}
"""A card cell's colour by its outcome (:data:`bakeoff.analysis.bootstrap.OUTCOMES`, or the leader's own value)."""


def print_table(table: Table) -> None:
    """A report's table (:class:`bakeoff.report.templates.Table`): the same header and cells, no word of them cut
    (:func:`whole_words`); its notes under it, as its caption on a terminal, printed by :func:`paragraph` off one."""
    from rich.table import Table as RichTable

    terminal = console.is_terminal
    notes = escape("\n".join(table.notes))
    out = RichTable(caption=notes if terminal and notes else None, caption_justify="left")
    for header, align in zip(table.header, table.alignment(), strict=True):
        out.add_column(escape(header), justify="left" if align == "l" else "right")
    for row in table.rows:
        out.add_row(*(escape(cell) for cell in row))
    console.print(whole_words(out))
    if not terminal:
        for note in table.notes:
            paragraph(escape(note))


def whole_words(table: RichTable) -> RichTable:
    """Off a terminal, ``table`` with each column at least as wide as the longest word of its header and cells, so
    that a narrow ``COLUMNS`` wraps a cell between words and never cuts a header short (``strat…``): a line wider
    than ``COLUMNS`` is printed whole. On a terminal, which would cut off the columns past its width, ``table`` as
    it is: rich narrows its columns to fit. Returns ``table``."""
    if console.is_terminal:
        return table
    for column in table.columns:
        texts = [column.header, *column.cells]
        words = [w for t in texts if isinstance(t, str) for w in Text.from_markup(t).plain.split()]
        column.min_width = max([column.min_width or 0, *map(len, words)])
    return table


def print_card(card: Card) -> None:
    """The decision card (:mod:`bakeoff.report.card`), then the recommendation and what decides it.

    A table per workload titled with its leader and verdict, each ratio over its interval, words whole: about 80
    columns for five criteria, on a terminal and into a file or a pipe alike (the report's one wide table, a row a
    line, was 199–237 columns there); the recommendation and what decides it are printed by :func:`paragraph`.
    """
    from rich import box
    from rich.table import Table

    from bakeoff.analysis.conditions import BUSY_MARK
    from bakeoff.report.card import LEADER

    def table(header: list[str], rows: list[list[Text]], title: str) -> Table:
        """Each column at least as wide as its longest word, so that a terminal of 80 columns cuts no number."""
        out = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title, title_justify="left", title_style="bold")
        for i, name in enumerate(header):
            words = [w for t in [name, *(row[i].plain for row in rows)] for w in t.split()]
            out.add_column(name, justify="right" if i >= len(header) - len(card.criteria) else "left",
                           overflow="fold", min_width=max(map(len, words), default=1))
        for row in rows:
            out.add_row(*row)
        return out

    for section in dict.fromkeys(r.section for r in card.rows):
        rows = [r for r in card.rows if r.section == section]
        leader = next((r for r in rows if r.leader), None)
        cells = [[Text((f"{LEADER} " if r.leader else "") + r.framework.replace(" (", "\n("),
                       style=_OUTCOME["leader"] if r.leader else ""), Text(r.win_probability),
                  *(Text(_stacked(c.text), style=_OUTCOME.get(c.outcome, "")) for c in r.cells)] for r in rows]
        header = [h.replace(" ", "\n", 1) for h in ["framework", "win prob.", *card.header[4:]]]
        console.print(table(header, cells, f"{section}: {leader.framework} {leader.standing}" if leader else section))
    paragraph(f"[bold]recommendation[/]: {escape(card.recommendation)}")
    paragraph(f"[bold]what decides it[/]: {escape(card.decides)}")
    for line in card.legend:  # the one legend line a reader of the console cannot do without
        if line.startswith(BUSY_MARK):
            paragraph(escape(line))


def _stacked(text: str) -> str:
    """``"unsettled 0.56x (0.40–0.79x)"`` -> ``"unsettled\n0.56x\n0.40–0.79"``: a narrow cell, never cut inside a
    number, its outcome, ratio and interval a line each in every cell alike (a busy mark stays with the ratio:
    ``"worse\n0.56x §\n0.40–0.79"``)."""
    from bakeoff.analysis.conditions import BUSY_MARK

    text, mark = (text.removesuffix(f" {BUSY_MARK}"), f" {BUSY_MARK}") if text.endswith(BUSY_MARK) else (text, "")
    if " (" not in text or not text.endswith(")"):
        return text + mark
    ratio, interval = text[:-1].split(" (", 1)
    return f"{ratio.replace(' ', chr(10), 1)}{mark}\n{interval.removesuffix('x')}"


def describe(result: TrialResult) -> str:
    """One line of what a finished trial measured, for the live log."""
    resumed = result.training.resumed_at_steps
    resumed_text = f" (resumed at step {', '.join(str(s) for s in resumed)})" if resumed else ""
    if result.status.value != "ok":
        return (f"[{_STYLE[result.status.value]}]{result.status.value}[/]{resumed_text}: {result.reason[:200]}"
                + _retried(result))
    parts = []
    if (eps := result.throughput.get("examples_per_s")) is not None:
        parts.append(f"{eps:,.0f} ex/s")
    if result.first_step_s is not None:
        parts.append(f"first step {result.first_step_s:.2f} s")
    if result.final_metric is not None:
        parts.append(f"{result.metric_name} {result.final_metric:.3f}")
    tt = result.time_to_target_s
    parts.append(f"target in {tt:.1f} s" if tt is not None else "target not reached")
    return f"[green]ok[/]{resumed_text} " + ", ".join(parts) + _retried(result)


def _retried(result: TrialResult) -> str:
    """`` — measured again (--retry-busy): busy again (...): kept the first measurement ...`` for a busy trial's
    retry (:meth:`bakeoff.results.store.Store.keep_quieter`); '' otherwise."""
    from bakeoff.analysis.conditions import retry_note
    from bakeoff.results.store import busy_retry

    record = busy_retry(result)
    if record is None:
        return ""
    style = "yellow" if record["kept"] == "stored" or (record["retry"].get("other_share") or 0) > OTHER_WORK_SHARE \
        else "green"
    return f" — [{style}]measured again (--retry-busy): {escape(retry_note(record))}[/]"


class _EtaColumn(ProgressColumn):
    def __init__(self, owner: RunProgress) -> None:
        super().__init__()
        self._owner = owner

    def render(self, task: object) -> Text:
        return Text(self._owner.eta_text(), style="progress.remaining")


class RunProgress:
    """A progress bar over trials plus one printed line per finished trial; usable as the runner's callback.

    Each finished trial's line ends with the run's place and, when it can be estimated, the time left: the
    expected wall time of every trial still to run (:class:`bakeoff.plan.preview.Durations`: stored results of the same
    configuration in ``store``, else the trials finished in this run, their compile time counted apart: only for
    trials of a framework and mode that compile), less what the running ones have already taken; "at least" when a
    trial still to run has no estimate or a compile time not known yet. Several may run at once (an executor that
    spreads them over a cluster): the estimate is then the work left, summed, an upper bound on the wall time. At
    the end of a run it prints where the store's TensorBoard runs are.

    A heartbeat for long trials: after :data:`HEARTBEAT_S` seconds without a printed line, a line saying what still
    runs, for how long, and its last training step as its log tells it (:mod:`bakeoff.trial.progress`):
    ``… still running: mnist/tiny torch/graph seed 0, 45 s, step 120/400``; again every :data:`HEARTBEAT_S`. On a
    terminal, where the bar shows the time, the step goes into the bar's label instead.
    """

    def __init__(self, total: int, store: Store | None = None) -> None:
        from bakeoff.plan.preview import Durations

        self._durations = Durations.from_store(store) if store is not None else Durations()
        self._tensorboard = store.artifacts / "tensorboard" if store is not None else None
        self._logs = store.artifacts / "logs" if store is not None else None  # the runner's: <key>.log
        self._queued: list[RunSpec] = []
        self._running: dict[RunSpec, float] = {}  # the trials running now, each with when it started
        self._done = 0
        self._total = total
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), _EtaColumn(self), console=console, transient=True)
        self._task = self._progress.add_task("trials", total=total)
        self._lock = threading.Lock()  # the heartbeat's thread reads what the runner's callbacks change
        self._said = time.monotonic()  # when the last line was printed
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeats, name="bakeoff-heartbeat", daemon=True)

    def __enter__(self) -> RunProgress:
        self._progress.start()
        self._beat.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._beat.join()
        self._progress.stop()
        if kind is None and self._tensorboard is not None and self._tensorboard.is_dir():
            console.print(f"TensorBoard: {self._tensorboard}  (tensorboard --logdir {self._tensorboard})")

    def extend(self, more: int) -> None:
        """``more`` trials join the run (adaptive repeats add them after a look)."""
        self._total += more
        self._progress.update(self._task, total=self._total)

    def remaining_s(self) -> tuple[float, bool]:
        """Estimated seconds left and whether every trial still to run had an estimate."""
        left, known = 0.0, True
        for spec in self._queued:
            estimate = self._durations.estimate(spec)
            known = known and estimate is not None and self._durations.compile_known(spec)
            left += estimate or 0.0
        with self._lock:
            running = list(self._running.items())
        for spec, started in running:
            estimate = self._durations.estimate(spec)
            known = known and estimate is not None and self._durations.compile_known(spec)
            left += max(0.0, (estimate or 0.0) - (time.monotonic() - started))
        return left, known

    def eta_text(self) -> str:
        """``"about 3 min 20 s left"``, ``"at least 40 s left"`` (some trials without an estimate), or ``""``."""
        from bakeoff.plan.preview import duration

        if not self._queued and not self._running:
            return ""
        left, known = self.remaining_s()
        if not known and left == 0:
            return "time left unknown"
        return f"{'about' if known else 'at least'} {duration(left)} left"

    def heartbeat(self, now: float | None = None) -> str | None:
        """What a heartbeat says now, if one is due (:data:`HEARTBEAT_S` since the last line), else None."""
        from bakeoff.plan.preview import duration

        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._running or now - self._said < HEARTBEAT_S:
                return None
            self._said = now
            running = list(self._running.items())
        return "  … still running: " + "; ".join(f"{spec.title()}, {duration(now - started)}, {self._step(spec)}"
                                                 for spec, started in running)

    def _step(self, spec: RunSpec) -> str:
        from bakeoff.trial.progress import last

        got = last(self._logs / f"{spec.key()}.log") if self._logs is not None else None
        return got.text() if got is not None else "no training step done yet"

    def _heartbeats(self) -> None:
        while not self._stop.wait(1.0):
            if console.is_terminal:  # the bar shows the time: the step goes into its label
                with self._lock:
                    first = next(iter(self._running), None)
                if first is not None:
                    self._describe_running(f", {self._step(first)}")
            elif (line := self.heartbeat()) is not None:
                console.print(escape(line), soft_wrap=True, highlight=False)

    def __call__(self, event: str, spec: RunSpec, result: TrialResult | None) -> None:
        with self._lock:
            self._said = time.monotonic()
        self._event(event, spec, result)

    def _event(self, event: str, spec: RunSpec, result: TrialResult | None) -> None:
        from bakeoff.plan.preview import compile_seconds

        name = spec.title()
        if event == "queued":
            self._queued.append(spec)
        elif event == "start":
            if spec in self._queued:
                self._queued.remove(spec)
            with self._lock:
                self._running[spec] = time.monotonic()
            self._describe_running()
        elif event == "skip":
            if spec in self._queued:  # queued, then stored by another run on the store meanwhile: no time left for it
                self._queued.remove(spec)
            self._progress.advance(self._task)
            console.print(f"  [dim]skip {name} (already in the store)[/]")
        elif event == "done" and result is not None:
            with self._lock:
                self._running.pop(spec, None)
            self._describe_running()
            self._done += 1
            if result.wall_s is not None:  # a trial that failed may have stopped early: its compile time not known
                self._durations.learn(spec, result.wall_s, compile_seconds(result) if result.status.value == "ok"
                                      else None)
            self._progress.advance(self._task)
            left = self.eta_text()
            planned = self._done + len(self._queued) + len(self._running)  # the others running at once (executors)
            place = escape(f"[{self._done} run of {planned}{'; ' + left if left else ''}]")
            console.print(f"  {name}: {describe(result)}  [dim]{place}[/]", soft_wrap=True)

    def _describe_running(self, step: str = "") -> None:
        """The bar's label: the trial running (and its ``step``), or the first of those running and how many more
        run beside it."""
        with self._lock:
            specs = list(self._running)
        if not specs:
            return
        first = specs[0]
        name = first.title()
        more = f" and {len(specs) - 1} more" if len(specs) > 1 else ""
        self._progress.update(self._task, description=f"running {name}{step}{more}")
