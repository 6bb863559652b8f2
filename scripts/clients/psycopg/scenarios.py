"""psycopg 3 scenarios for cmd/trellis-clients, pipelines included.

One line per case on stdout: "PASS name", "FAIL name: why", "SKIP name: why".
Connection from PGHOST/PGPORT/PGUSER/PGDATABASE (libpq reads them);
CLIENTS_PATH=proxy runs the Trellis cases too; CLIENTS_TAG keeps the direct
and proxy runs' tables apart. Run with Debian's /usr/bin/python3, which
imports python3-psycopg.
"""

import os
import sys
import threading
import time

import psycopg
from psycopg import sql as S

VIA_PROXY = os.environ.get("CLIENTS_PATH") == "proxy"
TAG = os.environ.get("CLIENTS_TAG", "x")


def t(name):
    return f"psy_{TAG}_{name}"


def out(s):
    print(s.replace("\n", " "), flush=True)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def case(name, trellis=False):
    def wrap(fn):
        if trellis and not VIA_PROXY:
            out(f"SKIP {name}: Trellis statement, proxy only")
            return fn
        try:
            fn()
            out(f"PASS {name}")
        except psycopg.Error as e:
            out(f"FAIL {name}: {e.sqlstate} {e}")
        except Exception as e:  # noqa: BLE001 - every failure is a result
            out(f"FAIL {name}: {type(e).__name__} {e}")
        return fn

    return wrap


def connect(**kw):
    return psycopg.connect("", connect_timeout=20, **kw)


def await_live(conn, target):
    (s,) = conn.execute("SELECT trellis.await_live(%s, 60000)", (target,)).fetchone()
    check(s == "live", f"{target}: {s}")


with connect(autocommit=True) as c:
    c.execute(f"DROP TABLE IF EXISTS {t('items')}, {t('pipe')}, {t('copy')}")
    c.execute(f"CREATE TABLE {t('items')} (id bigint PRIMARY KEY, name text NOT NULL)")
    c.execute(f"INSERT INTO {t('items')} SELECT g, 'n' || g FROM generate_series(1, 10) g")
    c.execute(f"CREATE TABLE {t('pipe')} (id bigint PRIMARY KEY, v text)")
    c.execute(f"CREATE TABLE {t('copy')} (id bigint PRIMARY KEY, v text)")


@case("psycopg.simple_and_params")
def _():
    with connect() as c:
        check(c.execute("SELECT 1").fetchone() == (1,), "SELECT 1")
        check(c.execute("SELECT %s::int + 1, %s", (41, "x")).fetchone() == (42, "x"), "params")


@case("psycopg.server_prepared")
def _():
    with connect(prepare_threshold=0) as c:
        for i in range(1, 4):
            check(c.execute(f"SELECT name FROM {t('items')} WHERE id = %s", (i,), prepare=True).fetchone() == (f"n{i}",), f"row {i}")


@case("psycopg.transaction_rollback")
def _():
    with connect() as c:
        c.execute(f"INSERT INTO {t('pipe')} VALUES (900, 'gone')")
        c.rollback()
        with c.transaction():
            c.execute(f"INSERT INTO {t('pipe')} VALUES (901, 'kept')")
        check(c.execute(f"SELECT count(*) FROM {t('pipe')} WHERE id IN (900, 901)").fetchone() == (1,), "rows")


@case("psycopg.error_then_recover")
def _():
    with connect(autocommit=True) as c:
        try:
            c.execute("SELEC 1")
            check(False, "no error")
        except psycopg.errors.SyntaxError:
            pass
        check(c.execute("SELECT 2").fetchone() == (2,), "recover")


@case("psycopg.backend_pid")
def _():
    with connect() as c:
        check(c.execute("SELECT pg_backend_pid()").fetchone()[0] == c.info.backend_pid, "reported pid")


@case("psycopg.notify_sender_pid")
def _():
    with connect(autocommit=True) as c:
        got = []
        c.add_notify_handler(got.append)
        c.execute(f"LISTEN {t('chan')}")
        # A self-notification arrives before the NOTIFY's ReadyForQuery.
        c.execute(f"NOTIFY {t('chan')}, 'hi'")
        check(len(got) == 1, f"notifications: {got}")
        n = got[0]
        check(n.payload == "hi" and n.pid == c.info.backend_pid, f"{n.payload} from {n.pid}, own {c.info.backend_pid}")


@case("psycopg.cancel")
def _():
    with connect(autocommit=True) as c:
        threading.Timer(0.4, c.cancel).start()
        try:
            c.execute("SELECT pg_sleep(30)")
            check(False, "not cancelled")
        except psycopg.errors.QueryCanceled:
            pass
        check(c.execute("SELECT 1").fetchone() == (1,), "after cancel")


@case("psycopg.copy_in_out")
def _():
    with connect(autocommit=True) as c:
        with c.cursor() as cur:
            with cur.copy(f"COPY {t('copy')} (id, v) FROM STDIN") as cp:
                for i in range(1, 1001):
                    cp.write_row((i, f"v{i}"))
            rows = 0
            with cur.copy(f"COPY {t('copy')} TO STDOUT") as cp:
                for _row in cp.rows():
                    rows += 1
            check(rows == 1000, f"copied out {rows}")


@case("psycopg.pipeline_sql")
def _():
    with connect() as c:
        with c.pipeline():
            c.execute(f"INSERT INTO {t('pipe')} VALUES (1, 'a')")
            c.execute(f"INSERT INTO {t('pipe')} VALUES (2, 'b')")
            cur = c.execute(f"SELECT count(*) FROM {t('pipe')} WHERE id <= 2")
        check(cur.fetchone() == (2,), "pipeline rows")
        c.commit()


@case("psycopg.pipeline_error_skips_rest")
def _():
    with connect(autocommit=True) as c:
        try:
            with c.pipeline():
                c.execute(f"INSERT INTO {t('pipe')} VALUES (3, 'c')")
                c.execute("SELECT 1/0")
                c.execute(f"INSERT INTO {t('pipe')} VALUES (4, 'd')")
            check(False, "no error")
        except psycopg.errors.DivisionByZero:
            pass
        # One Sync at the end of the block: the INSERT before the error is
        # in the same implicit transaction and rolled back with it.
        n = c.execute(f"SELECT count(*) FROM {t('pipe')} WHERE id IN (3, 4)").fetchone()[0]
        check(n == 0, f"rows after a failed pipeline: {n}")


@case("psycopg.executemany_pipelined")
def _():
    with connect() as c:
        with c.cursor() as cur:
            cur.executemany(f"INSERT INTO {t('pipe')} VALUES (%s, %s)", [(i, f"m{i}") for i in range(100, 150)])
        c.commit()
        check(c.execute(f"SELECT count(*) FROM {t('pipe')} WHERE id BETWEEN 100 AND 149").fetchone() == (50,), "executemany rows")


@case("psycopg.transform_autocommit", trellis=True)
def _():
    with connect(autocommit=True) as c:
        row = c.execute(f"TRANSFORM {t('upper')} FROM {t('items')} SELECT upper(name) AS uname").fetchone()
        check(row[0] == "transform_defined", str(row))
        await_live(c, t("upper"))
        check(c.execute(f"SELECT uname FROM {t('upper')} WHERE id = 3").fetchone() == ("N3",), "target row")


@case("psycopg.transform_in_transaction", trellis=True)
def _():
    # psycopg sends BEGIN by itself before the first statement, as a
    # separate round trip: not a shared batch.
    with connect() as c:
        c.execute(f"CREATE TABLE {t('pay')} (id bigint PRIMARY KEY, who text, amount numeric)")
        c.execute(f"TRANSFORM {t('paid')} FROM {t('pay')} GROUP BY who SELECT SUM(amount) AS total")
        c.commit()
        await_live(c, t("paid"))


@case("psycopg.transform_server_prepared", trellis=True)
def _():
    with connect(autocommit=True) as c:
        row = c.execute(f"TRANSFORM {t('lens')} FROM {t('items')} SELECT length(name) AS len", prepare=True).fetchone()
        check(row[0] == "transform_defined", str(row))


@case("psycopg.status_select", trellis=True)
def _():
    with connect(autocommit=True) as c:
        rows = c.execute("SELECT * FROM trellis.status").fetchall()
        check(len(rows) >= 1, "no rows")
        check(c.execute("SELECT status FROM trellis.status WHERE target = %s", (t("upper"),)).fetchone() is not None, "by target")


@case("psycopg.pipeline_sql_then_transform", trellis=True)
def _():
    with connect() as c:
        with c.pipeline():
            c.execute(f"CREATE TABLE {t('pt')} (id bigint PRIMARY KEY, v text)")
            c.execute(f"INSERT INTO {t('pt')} VALUES (1, 'x')")
            c.execute(f"TRANSFORM {t('pt_up')} FROM {t('pt')} SELECT upper(v) AS uv")
        c.commit()
        await_live(c, t("pt_up"))


@case("psycopg.pipeline_transform_then_sql", trellis=True)
def _():
    with connect(autocommit=True) as c:
        with c.pipeline():
            c.execute(f"TRANSFORM {t('pt_len')} FROM {t('items')} SELECT length(name) AS n")
            cur = c.execute("SELECT count(*) FROM trellis.status")
        check(cur.fetchone()[0] >= 1, "status count")


@case("psycopg.pipeline_status_reads", trellis=True)
def _():
    with connect(autocommit=True) as c:
        with c.pipeline():
            a = c.execute("SELECT count(*) FROM trellis.status")
            b = c.execute("SELECT 1")
        check(a.fetchone()[0] >= 1 and b.fetchone() == (1,), "pipelined reads")


@case("psycopg.pipeline_failing_sql_skips_transform", trellis=True)
def _():
    with connect(autocommit=True) as c:
        try:
            with c.pipeline():
                c.execute("SELECT 1/0")
                c.execute(f"TRANSFORM {t('skipped')} FROM {t('items')} SELECT name AS n2")
            check(False, "no error")
        except psycopg.errors.DivisionByZero:
            pass
        check(c.execute("SELECT count(*) FROM trellis.status WHERE target = %s", (t("skipped"),)).fetchone() == (0,), "the Trellis statement after the error ran")
