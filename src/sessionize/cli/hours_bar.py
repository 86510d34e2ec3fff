"""`sessionize batch`'s progress in a terminal."""

from __future__ import annotations


class HoursBar:
    """In a terminal, a bar of the hours done with the time left, the hour lines above it."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.progress = Progress(
            "hours", BarColumn(), MofNCompleteColumn(), "left", TimeRemainingColumn()
        )
        self.task = self.progress.add_task("hours", total=None)

    def start(self, hours: int) -> None:
        self.progress.update(self.task, total=hours)

    def line(self, text: str) -> None:
        self.progress.console.print(text, highlight=False)
        if text.startswith("hour ") and " read, " in text:
            self.progress.advance(self.task)

    def __enter__(self) -> HoursBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
