"""A `files` store in the layout where every job record carries the job's settings and the
job has no settings entry, made from a store of the current layout: the stores that
`StateBackend.recorded_settings` reads by the newest record."""

from __future__ import annotations

from pathlib import Path

from sessionize.state import open_backend


def move_settings_into_records(root: Path, job: str) -> dict:
    """Copy the settings entry of `job` in the `files` store at `root` into each of its job
    records and delete the entry; the settings."""
    backend = open_backend(f"files:{root}")
    settings = backend.read_job_settings(job)
    assert settings is not None, f"no settings entry of {job} in {root}"
    for v in backend.job_versions(job):
        record = backend.read_job_record(job, v)
        backend.write_job_record(job, v, {**record, "settings": settings})
    (root / job / "_job" / "settings.json").unlink()
    assert backend.read_job_settings(job) is None
    return settings
