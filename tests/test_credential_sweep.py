"""No credential in anything the project writes or prints: every command runs once with a
password in every URI (and option) that takes one, then everything it wrote is searched
for the passwords, as given and percent-encoded.

- PostgreSQL: a role of the group `sessionize_password`, which the test server makes log
  in with its password (services/postgres.sh); its password holds `@ / ? #`, percent-encoded
  in the URIs. A wrong one is refused by the server, and said in one line.
- Redis: an ACL user with a password (the default user is left as it is).
- Kafka: SASL credentials as source options (a Kafka URI takes none: refused in one line).

Searched: each command's stdout and stderr, every file under the run's directory (outputs,
checkpoints, progress logs, the report, exports, Spark's local and temporary files, the
commands' logs: TMPDIR points there), and the records kept in the databases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
import redis
from psycopg import sql

from sessionize import Sessionizer
from tests.helpers import SHORT_JVM_OPTS, cli_env
from tests.state.services_fixtures import service_env


class Sweep:
    """One run's place, servers and secrets; `run` keeps what each command printed."""

    def __init__(self, root: Path):
        tag = uuid.uuid4().hex[:10]
        self.root, self.tag = root, tag
        self.pg_password = f"Pw@{tag}/x?y#z"  # reserved characters, percent-encoded below
        self.redis_password = f"Rp{tag}Redis"
        self.sasl_password = f"Sasl{tag}Kafka"
        self.wrong = f"Wrong{tag}Pw"
        self.role = f"sweep_{tag}"
        pg = service_env("postgres")["SESSIONIZE_TEST_POSTGRES"]
        self.pg_admin = pg
        self.pg_host = pg.split("@", 1)[1]  # HOST:PORT/DB
        self.redis_admin = service_env("redis")["SESSIONIZE_TEST_REDIS"]
        self.redis_user = f"sweep-{tag}"
        self.kafka = os.environ["SESSIONIZE_TEST_KAFKA"].rstrip("/")
        self.printed: list[str] = []
        for d in ("tmp", "spark-local"):
            (root / d).mkdir()

    def secrets(self) -> list[str]:
        forms = {
            self.pg_password,
            quote(self.pg_password, safe=""),
            self.redis_password,
            self.sasl_password,
            self.wrong,
        }
        return sorted(forms)

    def pg(self, schema: str, password: str | None = None) -> str:
        """A URI of the role, its password in it (percent-encoded), or none (`""`)."""
        secret = self.pg_password if password is None else password
        auth = f":{quote(secret, safe='')}" if secret else ""
        return f"postgresql://{self.role}{auth}@{self.pg_host}?schema={schema}_{self.tag}"

    def redis(self, prefix: str) -> str:
        base = self.redis_admin.split("://", 1)[1]
        return f"redis://{self.redis_user}:{self.redis_password}@{base}?prefix={prefix}{self.tag}"

    def env(self, **extra: str) -> dict[str, str]:
        tmp = self.root / "tmp"
        env = cli_env(
            TMPDIR=str(tmp),
            SPARK_LOCAL_DIRS=str(self.root / "spark-local"),
            SPARK_SUBMIT_OPTS=f"{SHORT_JVM_OPTS} -Djava.io.tmpdir={tmp}",
        )
        env.pop("PGPASSWORD", None)
        return {**env, **extra}

    def run(self, *args: str, fails: str | None = None, **env: str) -> str:
        """`sessionize ARGS` in the run's directory; its stdout. `fails`: it must end in
        one line on stderr holding this text, with exit code 2; that line is returned."""
        done = subprocess.run(
            [sys.executable, "-m", "sessionize", *args],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=self.root,
            env=self.env(**env),
        )
        self.printed += [done.stdout, done.stderr]
        if fails is None:
            assert done.returncode == 0, (args, done.stderr[-3000:])
        else:
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2 and len(lines) == 1, (args, done.stderr[-3000:])
            assert fails in lines[0], (args, lines[0])
            return lines[0]
        return done.stdout


@pytest.fixture
def sweep(tmp_path):
    s = Sweep(tmp_path)
    with psycopg.connect(s.pg_admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE sessionize_password").format(
                sql.Identifier(s.role), sql.Literal(s.pg_password)
            )
        )
        conn.execute(f"GRANT CREATE ON DATABASE sessionize TO {s.role}")
        rule = conn.execute(
            "SELECT auth_method FROM pg_hba_file_rules WHERE '+sessionize_password' = "
            "ANY(user_name) AND error IS NULL"
        ).fetchone()
    assert rule == ("scram-sha-256",), (
        "the test PostgreSQL lets the group sessionize_password in without a password: "
        "run services/start.sh postgres (it adds the rule to a running server too)"
    )
    admin = redis.Redis.from_url(s.redis_admin)
    admin.acl_setuser(
        s.redis_user,
        enabled=True,
        passwords=[f"+{s.redis_password}"],
        keys=["*"],
        commands=["+@all"],
    )
    try:
        yield s
    finally:
        admin.acl_deluser(s.redis_user)
        for key in admin.scan_iter(f"*{s.tag}*", count=1000):
            admin.delete(key)
        admin.close()
        with psycopg.connect(s.pg_admin, autocommit=True) as conn:
            for (schema,) in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (f"%{s.tag}",)
            ).fetchall():
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.execute(f"DROP OWNED BY {s.role}")
            conn.execute(f"DROP ROLE {s.role}")


def test_no_command_writes_or_prints_a_password(spark, sweep, capfd):
    s, root = sweep, sweep.root
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(s.pg(schema="x", password=s.wrong).split("?")[0]).close()

    # generate: a Kafka URI takes no credentials; the input for the jobs
    s.run(
        "generate",
        "--kafka",
        f"kafka://u:{s.sasl_password}@{s.kafka[8:]}/t{s.tag}",
        fails="takes no user or password",
    )
    s.run(
        "generate",
        "--output",
        "in",
        "--hours",
        "1",
        "--users",
        "40",
        "--events-per-hour",
        "400",
        "--files-per-hour",
        "2",
    )
    topic = f"{s.kafka}/sweep-{s.tag}"
    s.run("generate", "--kafka", topic, "--hours", "1", "--users", "40", "--events-per-hour", "400")

    # stream: Kafka with SASL options -> PostgreSQL output and state, metrics on any port
    sasl = [
        "--source-option",
        "kafka.sasl.username=u",
        "--source-option",
        f"kafka.sasl.password={s.sasl_password}",
    ]
    said = s.run(
        "stream",
        "--input",
        topic,
        *sasl,
        "--output",
        s.pg("out"),
        "--state",
        s.pg("st"),
        "--checkpoint",
        "chk",
        "--partitions",
        "2",
        "--source-option",
        "maxRecordsPerTrigger=250",
        "--metrics-port",
        "0",
    )
    assert said.startswith("metrics on http://127.0.0.1:"), said
    # an unencoded reserved character in a password is refused before any client sees it
    s.run(
        "stream",
        "--input",
        "in",
        "--output",
        "o2",
        "--checkpoint",
        "chk2",
        "--state",
        f"postgresql://{s.role}:{s.pg_password}@{s.pg_host}",
        fails="percent-encode it",
    )

    # batch: files -> PostgreSQL output, Redis state
    s.run(
        "batch",
        "--input",
        "in",
        "--from",
        "2026-11-01T00",
        "--output",
        s.pg("bout"),
        "--state",
        s.redis("bst"),
        "--partitions",
        "2",
    )

    # the Python API, in this process: PostgreSQL state and output
    said_api: list[str] = []
    Sessionizer(state=s.pg("api_st"), partitions=2).start(
        spark.readStream.text(str(root / "in"), recursiveFileLookup=True),
        output=s.pg("api_out"),
        checkpoint=str(root / "chk-api"),
        on_batch=said_api.append,
    ).wait()
    s.printed += [*said_api, *capfd.readouterr()]

    # status, history, report: the checkpoint holds the passwords masked (PGPASSWORD then)
    pgpassword = {"PGPASSWORD": s.pg_password}
    s.run("status", "--checkpoint", "chk", *sasl)
    s.run("status", "--checkpoint", "chk", "--json", *sasl)
    s.run("status", "--output", s.pg("bout"))
    assert "batch 1" in s.run("history", "--checkpoint", "chk", **pgpassword)
    s.run("history", "--checkpoint", "chk", fails="password")
    s.run(
        "history",
        "--checkpoint",
        "chk",
        "--state",
        s.pg("st", s.wrong),
        fails="password authentication failed",
    )
    s.run("report", "--output", s.pg("out"), "--checkpoint", "chk", "--to", "report.html")
    s.run("report", "--output", s.pg("out", ""), "--to", "report-env.html", **pgpassword)
    s.run("report", "--output", s.pg("typo"), "--to", "r.html", fails="no sessions table")
    refused = s.run(
        "report",
        "--output",
        s.pg("out", s.wrong),
        "--to",
        "r.html",
        fails="password authentication failed",
    )
    assert "PGPASSWORD" in refused and "restart" not in refused, refused  # a report is no job

    # the state tools
    s.run("state", "inspect", "--checkpoint", "chk", **pgpassword)
    s.run("state", "export", "--checkpoint", "chk", "--state", s.pg("st"), "--to", "open.parquet")
    s.run("state", "inspect", "--output", s.pg("bout"), "--state", s.redis("bst"))
    s.run(
        "state",
        "import",
        "--checkpoint",
        "chk",
        "--to",
        s.pg("imp"),
        fails="not Spark's",
        **pgpassword,
    )
    s.run("rewind", "--checkpoint", "chk", "--to-batch", "0", **pgpassword)
    s.run("state", "migrate", "--checkpoint", "chk", "--state", s.pg("st"), "--to", s.redis("mig"))
    # the state now in Redis, recorded masked: given again
    s.run("state", "inspect", "--checkpoint", "chk", "--state", s.redis("mig"))
    s.run("history", "--checkpoint", "chk", fails="give it with --state")

    # upkeep
    s.run("maintain", "--output", s.pg("out"), fails="leave nothing to clean")
    s.run(
        "maintain", "--output", s.pg("out"), "--checkpoint", "chk", "--move-output", s.pg("moved")
    )

    leaks = _search(s)
    assert not leaks, leaks
    assert (root / "report.html").stat().st_size > 10_000  # the report was searched, whole


def _search(s: Sweep) -> list[str]:
    """Where a secret appears: printed text, files under the run's directory, records."""
    secrets = [x.encode() for x in s.secrets()]
    found = [
        f"printed: {text[:200]!r}" for text in s.printed if any(x in text.encode() for x in secrets)
    ]
    files = [p for p in s.root.rglob("*") if p.is_file() and not p.is_symlink()]
    names = {p.name for p in files}
    assert {"progress.jsonl", "sessionize-paths.json", "report.html", "open.parquet"} <= names
    found += [str(p) for p in files if any(x in p.read_bytes() for x in secrets)]
    with psycopg.connect(s.pg_admin) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.columns WHERE "
            "table_schema LIKE %s AND data_type IN ('jsonb', 'text') GROUP BY 1, 2",
            (f"%{s.tag}",),
        ).fetchall()
        for schema, table in tables:
            rows = conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall()
            text = json.dumps(rows, default=str).encode()
            found += [f"{schema}.{table}" for x in secrets if x in text]
    client = redis.Redis.from_url(s.redis_admin)
    for key in client.scan_iter(f"*{s.tag}*", count=1000):
        kind = client.type(key)
        value = (
            client.hgetall(key)
            if kind == b"hash"
            else client.get(key)
            if kind == b"string"
            else client.zrange(key, 0, -1)
            if kind == b"zset"
            else b""
        )
        if any(x in repr(value).encode() for x in secrets):
            found.append(f"redis {key!r}")
    client.close()
    return found
