"""Two spellings of one place are one place: through a symlink, `..`, a relative path and a
bind mount, for paths that exist and for places not created yet."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from sessionize.places import same_place, within


def test_a_symlink_and_dot_dot_name_the_place_they_lead_to(tmp_path, monkeypatch):
    out = tmp_path / "out"
    (out / "sessions").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(out)
    monkeypatch.chdir(tmp_path)
    assert same_place("alias", str(out))
    assert same_place(f"{tmp_path}/x/../out", "out/")
    assert within("alias/archive", str(out))  # not there yet: its existing parent decides
    assert within(f"{tmp_path}/alias/sessions/deeper/still", "out")
    assert not same_place("alias/archive", "out")
    assert not within(str(tmp_path / "outside"), "alias")
    assert not within(str(tmp_path / "out-2"), "out")  # a common prefix is not a parent
    assert within("out", str(tmp_path))  # and the other way round, a parent holds it


def test_a_bind_mount_of_the_directory_is_that_directory(tmp_path):
    """In a private mount namespace (`unshare`: no mount is seen by other processes)."""
    assert shutil.which("unshare"), "these checks need util-linux's unshare"
    out, mount = tmp_path / "out", tmp_path / "mnt"
    (out / "sessions").mkdir(parents=True)
    mount.mkdir()
    check = (
        "from sessionize.places import same_place, within; "
        f"print(same_place('{mount}', '{out}'), within('{mount}/archive', '{out}'), "
        f"within('{tmp_path}/elsewhere', '{out}'))"
    )
    done = subprocess.run(
        [
            "unshare",
            "-rm",
            "sh",
            "-c",
            f'mount --bind "{out}" "{mount}" && "$0" -c "$1"',
            sys.executable,
            check,
        ],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "False"]
