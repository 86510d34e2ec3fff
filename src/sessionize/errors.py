"""One error root for the package; the CLI prints any SessionizeError as one line."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class SessionizeError(Exception):
    """A failure with a message written for the person running the job."""


class MappingWarning(UserWarning):
    """A mapped path matched nothing in a run's first events (engines/mapping_check.py):
    warned in Python (`warnings`) besides the line the run prints."""


class ConfigError(SessionizeError):
    """A flag or setting is wrong; the message says which and what is accepted."""


class EnvironmentProblem(SessionizeError):
    """Something outside the project is missing (Java, a service, an optional package)."""


class StateError(SessionizeError):
    """The state store is unreachable, corrupt, or does not match the checkpoint."""


class IncompatibleCheckpoint(StateError):
    """A checkpoint or state store was created with settings that differ from this run's."""


class OutputOwned(IncompatibleCheckpoint):
    """The output belongs to another job (its owner record, sinks/owner.py, names it)."""


class SinkError(SessionizeError):
    """An output could not be written or published."""


class SourceError(SessionizeError):
    """A stream cannot be read as its offsets say (records gone, topic or stream missing)."""


class ProcessorError(SessionizeError):
    """A stateful processor is declared wrongly, raised, or returned what its declaration
    does not allow; the message names the processor, the output or column and what."""


class LeaseHeld(StateError):
    """Another driver holds the lease of this checkpoint or state."""


class LeaseLost(StateError):
    """This driver's lease was taken over; it must not commit anything more."""


@contextmanager
def translated(translate: Callable[[Exception], SessionizeError | None]) -> Iterator[None]:
    """Run a block; an exception that `translate` turns into a SessionizeError is raised as
    that (caused by the original), any other exception passes unchanged."""
    try:
        yield
    except SessionizeError:
        raise
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        raise error from exc


# The last line of a Python worker's trace, as Spark reports a failed task.
_TASK_ERROR = re.compile(r"^sessionize\.errors\.(\w+): (.+)$", re.M)


def raised_in_task(failure: BaseException) -> SessionizeError | None:
    """The error of this module a Spark task raised, rebuilt from the text of the failure
    Spark reports on the driver; None if the failure was something else (which the CLI
    reports with its trace in a log file)."""
    found = _TASK_ERROR.findall(str(failure))
    if not found:
        return None
    name, message = found[-1]
    kind = next((k for k in _kinds(SessionizeError) if k.__name__ == name), None)
    return None if kind is None else kind(message.strip())


def _kinds(cls: type[SessionizeError]) -> tuple[type[SessionizeError], ...]:
    return (cls, *(k for sub in cls.__subclasses__() for k in _kinds(sub)))
