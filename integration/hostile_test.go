package integration

// Hostile input over the wire: injected identifiers, megabyte statements,
// client encodings the proxy cannot read, and clients that vanish while the
// proxy executes their statement. Each must end in a clear error or a clean
// abort, leave nothing half-applied, and leave the proxy serving.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// stillServing checks that a fresh session through the proxy works.
func (h *trellisHarness) stillServing(t *testing.T) {
	t.Helper()
	c := h.client(t)
	var one int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the proxy stopped serving: %v", err)
	}
}

func TestInjectedIdentifiers(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE y (id int PRIMARY KEY)`)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	mustExec(t, c, `CREATE TABLE "we""ird; DROP TABLE y" (id int PRIMARY KEY, "a'; DROP TABLE y; --" int)`)
	mustExec(t, c, `INSERT INTO s SELECT g, g FROM generate_series(1, 20) g`)
	mustExec(t, c, `INSERT INTO "we""ird; DROP TABLE y" SELECT g, g FROM generate_series(1, 20) g`)

	// Names that are SQL if pasted are only names: the target, a column
	// alias and a source with quotes and semicolons in them.
	for _, q := range []string{
		`TRANSFORM "x; DROP TABLE y" FROM s SELECT a AS b`,
		`TRANSFORM z FROM s SELECT a AS "b); DROP TABLE y; --"`,
		`TRANSFORM w FROM "we""ird; DROP TABLE y" SELECT "a'; DROP TABLE y; --" * 2 AS "it's"`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// The same through trellis.apply($1), the statement as a parameter.
	if _, err := c.Exec(ctx, `SELECT * FROM trellis.apply($1)`, `TRANSFORM "v"";DROP TABLE y;--" FROM s SELECT a + 1 AS c`); err != nil {
		t.Fatal(err)
	}
	// A source that does not exist under its injected name is just missing.
	_, err := c.Exec(ctx, `TRANSFORM u FROM "s; DROP TABLE y" SELECT a AS b`)
	if pe := pgErrOf(t, err); pe.Code != "42P01" {
		t.Fatalf("injected source name: %s %s", pe.Code, pe.Message)
	}
	for _, target := range []string{"x; DROP TABLE y", "z", "w", `v";DROP TABLE y;--`} {
		var live string
		if err := c.QueryRow(ctx, `SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil {
			t.Fatalf("await_live(%q): %v", target, err)
		}
	}
	mustExec(t, c, `UPDATE s SET a = a + 100 WHERE id <= 5`)
	mustExec(t, c, `UPDATE "we""ird; DROP TABLE y" SET "a'; DROP TABLE y; --" = 0 WHERE id = 3`)
	if _, err := c.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	h.sameAs(t, c, `SELECT id, b FROM "x; DROP TABLE y"`, `SELECT id, a FROM s`)
	h.sameAs(t, c, `SELECT id, "b); DROP TABLE y; --" FROM z`, `SELECT id, a FROM s`)
	h.sameAs(t, c, `SELECT id, "it's" FROM w`, `SELECT id, "a'; DROP TABLE y; --" * 2 FROM "we""ird; DROP TABLE y"`)
	if !tableExists(t, h.pool, "y") {
		t.Fatal("table y was dropped")
	}
	mustExec(t, c, `PAUSE TRANSFORM "x; DROP TABLE y"`)
	mustExec(t, c, `DROP TRANSFORM "x; DROP TABLE y"`)
	if !tableExists(t, h.pool, "y") || tableExists(t, h.pool, `"x; DROP TABLE y"`) {
		t.Fatal("the drop of an injected name went wrong")
	}
	h.stillServing(t)
}

func TestMegabyteStatements(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	mustExec(t, c, `INSERT INTO s SELECT g, g FROM generate_series(1, 10) g`)
	mb := strings.Repeat("x", 1<<20)

	// Ordinary SQL of 1 MB and 2 MB passes through in both protocols.
	for _, n := range []int{1 << 20, 2 << 20} {
		lit := strings.Repeat("y", n)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
			var got int
			if err := c.QueryRow(ctx, "SELECT length('"+lit+"')", mode).Scan(&got); err != nil || got != n {
				t.Fatalf("%d-byte SELECT (%v): %d %v", n, mode, got, err)
			}
		}
	}
	// A 1 MB comment ahead of a Trellis statement, and a Trellis statement
	// whose formula holds a 1 MB literal: both are Trellis statements.
	if _, err := c.Exec(ctx, "/* "+mb+" */ TRANSFORM big_comment FROM s SELECT a + 1 AS b", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("TRANSFORM after a 1 MB comment: %v", err)
	}
	if _, err := c.Exec(ctx, "TRANSFORM big_literal FROM s SELECT a::text || '"+mb+"' AS b", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("TRANSFORM with a 1 MB literal: %v", err)
	}
	var live string
	if err := c.QueryRow(ctx, `SELECT trellis.await_live('big_literal', 60000)`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM big_literal WHERE length(b) = 1048577 OR length(b) = 1048578`).Scan(&n); err != nil || n != 10 {
		t.Fatalf("big_literal rows: %d %v", n, err)
	}
	// A 1 MB Trellis statement by the extended protocol, and a 1 MB
	// statement that only looks like one: a clear error, nothing applied.
	if _, err := c.Exec(ctx, "TRANSFORM big_ext FROM s SELECT a::text || '"+mb+"' AS b"); err != nil {
		t.Fatalf("1 MB TRANSFORM, extended: %v", err)
	}
	_, err := c.Exec(ctx, "TRANSFORM big_bad FROM s SELECT a + "+strings.Repeat("(", 1<<20), pgx.QueryExecModeSimpleProtocol)
	if pe := pgErrOf(t, err); pe.Code == "" || pe.Code == "XX000" {
		t.Fatalf("1 MB malformed TRANSFORM: %s %s", pe.Code, pe.Message)
	}
	if tableExists(t, h.pool, "big_bad") {
		t.Fatal("a malformed statement created its target")
	}
	h.stillServing(t)
}

func TestClientEncodings(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a text)`)

	// LATIN1 and SJIS sessions: ordinary SQL is converted by Postgres as
	// always; a Trellis statement is refused, since the proxy reads
	// statement text as UTF-8 (and in SJIS a 0x5C byte can end a
	// character).
	for _, enc := range []struct {
		name, literal string
		chars         int
	}{{"LATIN1", "gr\xf6\xdfe", 5}, {"SJIS", "\x95\x5c\x8e\xa6", 2}} {
		r := dialRaw(t, h.Addr)
		r.sendMsgs(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
			Parameters: map[string]string{"user": "postgres", "database": h.db, "client_encoding": enc.name}})
		r.untilZ()
		r.sendMsgs(&pgproto3.Query{String: "SELECT length('" + enc.literal + "')"})
		got := r.untilZ()
		if types(got) != "TDCZ" {
			t.Fatalf("%s: ordinary SQL: %v", enc.name, got)
		}
		var row pgproto3.DataRow
		if err := row.Decode(got[1].body); err != nil || string(row.Values[0]) != strconv.Itoa(enc.chars) {
			t.Fatalf("%s: length %q %v", enc.name, row.Values, err)
		}
		r.sendMsgs(&pgproto3.Query{String: "TRANSFORM t_" + strings.ToLower(enc.name) + " FROM s SELECT a || '" + enc.literal + "' AS b"})
		got = r.untilZ()
		var e pgproto3.ErrorResponse
		if types(got) != "EZ" || e.Decode(got[0].body) != nil || e.Code != "0A000" || !strings.Contains(e.Message, "client_encoding UTF8") || e.Hint == "" {
			t.Fatalf("%s: TRANSFORM: %v (%s %s)", enc.name, got, e.Code, e.Message)
		}
		// After SET client_encoding the same session may define.
		r.sendMsgs(&pgproto3.Query{String: "SET client_encoding = 'UTF8'"})
		r.untilZ()
		r.sendMsgs(&pgproto3.Query{String: "TRANSFORM t_" + strings.ToLower(enc.name) + " FROM s SELECT a || 'ok' AS b"})
		if got = r.untilZ(); !strings.Contains(types(got), "D") || got[len(got)-1].body[0] != 'I' {
			t.Fatalf("%s: TRANSFORM after SET client_encoding: %v", enc.name, got)
		}
	}
	// Invalid UTF-8 inside a Trellis statement of a UTF8 session.
	r := dialRaw(t, h.Addr)
	r.sendMsgs(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": h.db}})
	r.untilZ()
	r.sendMsgs(&pgproto3.Query{String: "TRANSFORM t_bad FROM s SELECT a || '\xff\xfe' AS b"})
	got := r.untilZ()
	var e pgproto3.ErrorResponse
	if types(got) != "EZ" || e.Decode(got[0].body) != nil || e.Code == "XX000" || e.Code == "" || got[1].body[0] != 'I' {
		t.Fatalf("invalid UTF-8: %v (%s %s)", got, e.Code, e.Message)
	}
	if tableExists(t, h.pool, "t_bad") {
		t.Fatal("invalid UTF-8 created a target")
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM trellis.status`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("definitions after the encoding tests: %d %v", n, err)
	}
	h.stillServing(t)
}

// A client that disconnects while the proxy executes its statement (the
// statement waits on a lock) cancels it: in the client's own block the
// backend's transaction dies with the session; in autocommit the proxy's
// own transaction rolls back (or, had the statement finished first, it is
// applied whole). Never half.
func TestClientDisconnectsDuringStatement(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE s (id int PRIMARY KEY, a int)`)
	mustExec(t, c, `INSERT INTO s SELECT g, g FROM generate_series(1, 10) g`)

	for _, inBlock := range []bool{true, false} {
		target := "dc_autocommit"
		if inBlock {
			target = "dc_block"
		}
		// Hold the catalog so the define waits inside the proxy.
		locker, err := h.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := locker.Exec(ctx, `LOCK TABLE trellis._definitions IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		r := dialRaw(t, h.Addr)
		r.sendMsgs(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
			Parameters: map[string]string{"user": "postgres", "database": h.db, "application_name": "disconnecter"}})
		r.untilZ()
		if inBlock {
			r.sendMsgs(&pgproto3.Query{String: "BEGIN"})
			r.untilZ()
		}
		r.sendMsgs(&pgproto3.Query{String: "TRANSFORM " + target + " FROM s SELECT a * 3 AS b"})
		var pid int
		eventually(t, 30*time.Second, "the statement to wait on the catalog lock", func() bool {
			err := h.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'disconnecter' AND wait_event_type = 'Lock'`).Scan(&pid)
			return err == nil
		})
		r.conn.Close()
		time.Sleep(100 * time.Millisecond)
		if err := locker.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the disconnected session's backend to end", func() bool {
			var n int
			h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n)
			return n == 0
		})
		defs, table, _ := h.leftovers(t, target)
		switch {
		case inBlock && (defs != 0 || table):
			t.Fatalf("%s: an uncommitted block left definitions=%d table=%v", target, defs, table)
		case !inBlock && (defs == 1) != table:
			t.Fatalf("%s: half-applied: definitions=%d table=%v", target, defs, table)
		case !inBlock && defs == 1:
			var live string
			if err := c.QueryRow(ctx, `SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil {
				t.Fatalf("%s was applied but does not go live: %v", target, err)
			}
		}
		t.Logf("%s: after the disconnect definitions=%d table=%v", target, defs, table)
	}
	// A client that leaves during a proxy wait ends the wait: its backend
	// goes within seconds, not when the ten-minute timeout would expire.
	mustExec(t, c, `TRANSFORM dc_wait FROM s SELECT a AS b`)
	var live string
	if err := c.QueryRow(ctx, `SELECT trellis.await_live('dc_wait', 60000)`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	hold, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	if _, err := hold.Exec(ctx, `LOCK TABLE dc_wait IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, `INSERT INTO s VALUES (1000, 1)`)
	var token string
	if err := c.QueryRow(ctx, `SELECT trellis.watermark_token()`).Scan(&token); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, h.Addr)
	r.sendMsgs(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": h.db, "application_name": "waiter"}})
	r.untilZ()
	r.sendMsgs(&pgproto3.Query{String: "SELECT trellis.await_converged('" + token + "', 600000)"})
	time.Sleep(500 * time.Millisecond)
	var waiters int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'waiter'`).Scan(&waiters); err != nil || waiters != 1 {
		t.Fatalf("the waiting session's backend: %d %v", waiters, err)
	}
	r.conn.Close()
	eventually(t, 15*time.Second, "the waiter's backend to end after it left", func() bool {
		h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'waiter'`).Scan(&waiters)
		return waiters == 0
	})
	hold.Rollback(ctx)

	// The proxy still serves, and the name is free or taken consistently.
	h.stillServing(t)
	if _, err := c.Exec(ctx, `TRANSFORM dc_block FROM s SELECT a * 3 AS b`); err != nil {
		t.Fatalf("defining the name the disconnected block never committed: %v", err)
	}
}
