"""The CLI's console and live progress for long runs (rich)."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bakeoff.spec import RunSpec, TrialResult

console = Console(stderr=False, highlight=False)

_STYLE = {"ok": "green", "failed": "red", "timeout": "red", "out_of_memory": "red", "unsupported": "yellow"}


def describe(result: TrialResult) -> str:
    """One line of what a finished trial measured, for the live log."""
    if result.status.value != "ok":
        return f"[{_STYLE[result.status.value]}]{result.status.value}[/]: {result.reason[:200]}"
    parts = []
    if (eps := result.throughput.get("examples_per_s")) is not None:
        parts.append(f"{eps:,.0f} ex/s")
    if result.first_step_s is not None:
        parts.append(f"first step {result.first_step_s:.2f} s")
    if result.final_metric is not None:
        parts.append(f"{result.metric_name} {result.final_metric:.3f}")
    tt = result.time_to_target_s
    parts.append(f"target in {tt:.1f} s" if tt is not None else "target not reached")
    return "[green]ok[/] " + ", ".join(parts)


class RunProgress:
    """A progress bar over trials plus one printed line per finished trial; usable as the runner's callback."""

    def __init__(self, total: int) -> None:
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=console, transient=True)
        self._task = self._progress.add_task("trials", total=total)

    def __enter__(self) -> RunProgress:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def __call__(self, event: str, spec: RunSpec, result: TrialResult | None) -> None:
        name = f"{spec.workload}/{spec.preset} {spec.label()} seed {spec.seed}"
        if event == "start":
            self._progress.update(self._task, description=f"running {name}")
        elif event == "skip":
            self._progress.advance(self._task)
            console.print(f"  [dim]skip {name} (already in the store)[/]")
        elif event == "done" and result is not None:
            self._progress.advance(self._task)
            console.print(f"  {name}: {describe(result)}")
