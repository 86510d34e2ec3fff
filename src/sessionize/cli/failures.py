"""Any failure as one line on stderr; the full trace of an unexpected one in a log file.

A `SessionizeError` is already written for people. Anything else (a Spark or Py4J error, a
backend's client error, a bug) is summarized as its innermost cause, with what to do, and
its trace goes to a log file whose path the line names (`--debug` prints it instead).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

import click

from sessionize import spark_version
from sessionize.errors import SessionizeError

DEBUG = False  # set by the CLI's --debug

# A line of a Python or Java trace that names an exception and its message.
_CAUSE = re.compile(
    r"^\s*(?:Caused by: )?((?:[A-Za-z_][\w$]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)): (.+)$"
)
_MAX = 300
ADVICE = "fix the cause and run the same command again"
# Commands that run a stream, whose rerun resumes it: their advice says so.
RESUMING = ("stream", "demo")
COMMAND: str | None = None  # the subcommand running, set by the CLI


def advice() -> str:
    """What to do after an unexpected failure of the running command."""
    if COMMAND in RESUMING:
        return f"{ADVICE} (a stream resumes where it stopped)"
    return ADVICE


def describe(exc: BaseException) -> str:
    """`Type: message` of the innermost cause found in the exception and its trace text."""
    text = str(exc)
    causes = [m.groups() for line in text.splitlines() if (m := _CAUSE.match(line))]
    python = [c for c in causes if "." not in c[0] or c[0].startswith(("pyarrow.", "py4j."))]
    if "Traceback (most recent call last)" in text and python:
        kind, message = python[-1]  # the Python worker's own exception
    elif causes:
        kind, message = causes[-1]  # Java: the last `Caused by`
    else:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        kind, message = type(exc).__name__, first
    kind = kind.rsplit(".", 1)[-1]
    message = re.sub(r"\s+", " ", message).strip()
    if len(message) > _MAX:
        message = message[: _MAX - 3] + "..."
    return f"{kind}: {message}" if message else kind


class StderrLog:
    """For the life of a command: file descriptor 2, which Spark's JVM and its Python workers
    inherit, goes to a log file, while `sys.stderr` stays the terminal. So what they print
    (JVM warnings, Spark's log) never adds lines to the one-line error; the log is kept only
    when the command fails unexpectedly, with the trace appended, and its path is named.
    What libraries log through Python's root logger (py4j logs every broken call there, with
    its trace) goes to the same log."""

    def __init__(self) -> None:
        name = f"sessionize-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        self.path = os.path.join(tempfile.gettempdir(), name)
        self._saved: int | None = None
        self._handler: logging.Handler | None = None

    def __enter__(self) -> StderrLog:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError:
            return self  # no log: the JVM writes to the terminal as it would anyway
        sys.stderr.flush()
        self._saved = os.dup(2)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stderr = open(self._saved, "w", buffering=1, closefd=False)  # noqa: SIM115
        self._handler = logging.StreamHandler(_log_stream())
        logging.getLogger().addHandler(self._handler)
        global LOG
        LOG = self.path
        return self

    def __exit__(self, *exc_info) -> None:
        global LOG
        if self._handler is not None:
            logging.getLogger().removeHandler(self._handler)
        if LOG is not None and not KEEP:
            with contextlib.suppress(OSError):
                os.remove(self.path)
        LOG = None


LOG: str | None = None  # the log of the running command, if any
KEEP = False  # keep the log: it holds the trace of a failure


def _log_stream():
    """File descriptor 2 as a text stream: the log while a StderrLog is open."""
    return open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def quiet_from_now() -> None:
    """Send what is printed to `sys.stderr` from now on to the log (file descriptor 2): once
    the one line of an interrupt is out, py4j's and Spark's threads print traces of the calls
    that Ctrl-C broke while the process shuts down; none of them is the user's business."""
    if LOG is not None:
        sys.stderr.flush()
        sys.stderr = _log_stream()


def _write_log(exc: BaseException) -> str | None:
    global KEEP
    if LOG is None:
        return None
    try:
        with open(LOG, "a") as f:
            f.write("\n" + " ".join(sys.argv) + "\n\n")
            f.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    KEEP = True
    return LOG


def report(message: str, exc: BaseException, *, unexpected: bool = False) -> None:
    """Print `sessionize: error: MESSAGE` (one line); for an unexpected error add what to
    do and where its trace is. With --debug the trace is printed first."""
    if DEBUG:
        traceback.print_exception(exc, file=sys.stderr)
    line = message.replace("\n", " ")
    if unexpected:
        where = "rerun with --debug to see the full trace"
        if not DEBUG:
            log = _write_log(exc)
            where = f"full trace in {log}" if log else where
        line = f"{line}; {advice()}; {where}" if not DEBUG else f"{line}; {advice()}"
    click.echo(f"sessionize: error: {line}", err=True)


def reported(work: Callable[[], object]) -> int:
    """Run `work`; the exit code, with what stopped it said in one line: Ctrl-C (130, and
    what the shutdown prints goes to the log), a SessionizeError (2), anything else (2, its
    trace in the log). What `work` raises that is not an Exception (SystemExit) passes."""
    try:
        work()
    except KeyboardInterrupt:
        click.echo("sessionize: interrupted; run the same command again to resume", err=True)
        quiet_from_now()
        return 130
    except SessionizeError as exc:
        report(str(exc), exc)
        return 2
    except Exception as exc:  # from Spark, a backend or a bug: still one line, trace kept
        problem = spark_version.import_problem(exc)  # no PySpark: what to install
        if problem is not None:
            report(str(problem), problem)
        else:
            report(describe(exc), exc, unexpected=True)
        return 2
    return 0
