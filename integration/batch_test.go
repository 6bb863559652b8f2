package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// Trellis statements and proxy-answered calls inside extended-protocol Sync
// batches shared with ordinary statements (D6, docs/architecture.md "Mixed
// Sync batches"). The batches are written with pgproto3 frames, so frame
// boundaries and writes are exactly the test's; where an ordinary statement
// can stand in for the Trellis one, the same batch is sent to Postgres
// directly and the replies must have the same shape.

// rawDB is a raw protocol connection to db at addr (user postgres, trust).
func rawDB(t *testing.T, addr, db string) *rawConn {
	t.Helper()
	r := dialRaw(t, addr)
	msg := pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "postgres", "database": db}}
	b, _ := msg.Encode(nil)
	r.send(b)
	if fs := r.untilZ(); fs[0].typ == 'E' {
		t.Fatalf("startup: %v", fs)
	}
	return r
}

// shape is the frame types of a reply without notices, each ReadyForQuery
// followed by its transaction status: what a driver acts on.
func shape(fs []frame) string {
	var b strings.Builder
	for _, f := range fs {
		if f.typ == 'N' {
			continue
		}
		b.WriteByte(f.typ)
		if f.typ == 'Z' && len(f.body) == 1 {
			b.WriteByte(f.body[0])
		}
	}
	return b.String()
}

func errCodes(fs []frame) []string {
	var out []string
	for _, f := range fs {
		if f.typ == 'E' {
			var e pgproto3.ErrorResponse
			e.Decode(f.body)
			out = append(out, e.Code)
		}
	}
	return out
}

// pbde is Parse, Bind, Describe portal, Execute of sql on the unnamed
// statement and portal, as pgx and psycopg send a statement.
func pbde(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}
}

// pbe is Parse, Bind, Execute, as pgJDBC sends a statement it knows the
// shape of (BEGIN, DDL).
func pbe(sql string) []pgproto3.FrontendMessage {
	return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
}

func batch(parts ...[]pgproto3.FrontendMessage) []pgproto3.FrontendMessage {
	var out []pgproto3.FrontendMessage
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var syncMsg = []pgproto3.FrontendMessage{&pgproto3.Sync{}}
var flushMsg = []pgproto3.FrontendMessage{&pgproto3.Flush{}}

// directShape sends msgs to Postgres directly on a fresh connection to db
// (after setup) and returns the shape of n ReadyForQuery's worth of replies.
func directShape(t *testing.T, db, setup string, n int, msgs []pgproto3.FrontendMessage) string {
	t.Helper()
	r := rawDB(t, pgcluster.ForTest(t).Addr(), db)
	if setup != "" {
		r.sendMsgs(&pgproto3.Query{String: setup})
		if fs := r.untilZ(); len(errCodes(fs)) > 0 {
			t.Fatalf("direct setup %q: %v", setup, errCodes(fs))
		}
	}
	r.sendMsgs(msgs...)
	return shape(r.untilZs(n))
}

func (h *trellisHarness) exists(t *testing.T, name string) bool { return tableExists(t, h.pool, name) }

func (h *trellisHarness) definitions(t *testing.T) int {
	t.Helper()
	var n int
	if err := h.pool.QueryRow(context.Background(), `SELECT count(*) FROM trellis._definitions`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// pgJDBC with autocommit off sends BEGIN and the transaction's first
// statement in one Sync batch.
func TestBatchJDBCBeginThenTransform(t *testing.T) {
	h := startTrellis(t)
	r := rawDB(t, h.Addr, h.db)
	r.sendMsgs(&pgproto3.Query{String: "CREATE TABLE src (id int PRIMARY KEY, v int)"})
	r.untilZ()
	msgs := func(stmt string) []pgproto3.FrontendMessage { return batch(pbe("BEGIN"), pbde(stmt), syncMsg) }

	r.sendMsgs(msgs("TRANSFORM t_commit FROM src SELECT v + 1 AS w")...)
	fs := r.untilZ()
	want := directShape(t, h.db, "", 1, msgs("SELECT 1 AS w"))
	if got := shape(fs); got != want || want != "12C12TDCZT" {
		t.Fatalf("BEGIN + TRANSFORM: %q, Postgres answers an ordinary statement there with %q", got, want)
	}
	// In the client's block: not visible outside before its COMMIT.
	if h.exists(t, "t_commit") {
		t.Fatal("the target is visible before the client's COMMIT")
	}
	r.sendMsgs(batch(pbe("COMMIT"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12CZI" {
		t.Fatalf("COMMIT: %q", got)
	}
	if !h.exists(t, "t_commit") || h.definitions(t) != 1 {
		t.Fatal("the committed transform is missing")
	}
	h.waitStatus(t, "t_commit", "live")

	// The ROLLBACK variant undoes target and definition.
	r.sendMsgs(msgs("TRANSFORM t_rollback FROM src SELECT v * 2 AS w")...)
	if got := shape(r.untilZ()); got != "12C12TDCZT" {
		t.Fatalf("BEGIN + TRANSFORM: %q", got)
	}
	r.sendMsgs(batch(pbe("ROLLBACK"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12CZI" {
		t.Fatalf("ROLLBACK: %q", got)
	}
	if h.exists(t, "t_rollback") || h.definitions(t) != 1 {
		t.Fatal("ROLLBACK left the transform behind")
	}

	// With client_min_messages = error (which hides the warning the proxy
	// reads to tell the client's block from Postgres's implicit one), both
	// cases still come out right, and the setting is the client's again
	// for the rest of the batch.
	r.sendMsgs(&pgproto3.Query{String: "SET client_min_messages = error"})
	r.untilZ()
	cmm := pbde("SELECT current_setting('client_min_messages')")
	r.sendMsgs(batch(pbe("BEGIN"), pbde("TRANSFORM t_quiet FROM src SELECT v - 1 AS w"), cmm, syncMsg)...)
	fs = r.untilZ()
	if got := shape(fs); got != "12C12TDC12TDCZT" || string(fs[len(fs)-3].body[6:11]) != "error" {
		t.Fatalf("quiet BEGIN + TRANSFORM: %q %v", got, fs)
	}
	r.sendMsgs(&pgproto3.Query{String: "ROLLBACK"})
	r.untilZ()
	r.sendMsgs(batch(pbe("CREATE TABLE quiet (id int PRIMARY KEY, v int)"), pbde("TRANSFORM quiet_v FROM quiet SELECT v AS w"), cmm, syncMsg)...)
	fs = r.untilZ()
	if got := shape(fs); got != "12C12TDC12TDCZI" || string(fs[len(fs)-3].body[6:11]) != "error" {
		t.Fatalf("quiet CREATE TABLE + TRANSFORM: %q %v", got, fs)
	}
	if !h.exists(t, "quiet_v") {
		t.Fatal("the quiet batch was not committed")
	}
}

// Statement.execute("CREATE TABLE …; TRANSFORM …") in autocommit: one
// implicit transaction, committed at the Sync, the Trellis statement seeing
// the table the prefix created; a later failure undoes both.
func TestBatchCreateTableThenTransform(t *testing.T) {
	h := startTrellis(t)
	r := rawDB(t, h.Addr, h.db)
	msgs := func(n, stmt, after string) []pgproto3.FrontendMessage {
		b := batch(pbe("CREATE TABLE "+n+" (id int PRIMARY KEY, v int)"), pbde(stmt))
		if after != "" {
			b = append(b, pbe(after)...)
		}
		return append(b, syncMsg...)
	}
	r.sendMsgs(msgs("m1", "TRANSFORM m1v FROM m1 SELECT v AS w", "INSERT INTO m1 VALUES (1, 1)")...)
	fs := r.untilZ()
	want := directShape(t, h.db, "", 1, msgs("d1", "SELECT 1 AS w", "INSERT INTO d1 VALUES (1, 1)"))
	if got := shape(fs); got != want || want != "12C12TDC12CZI" {
		t.Fatalf("CREATE TABLE + TRANSFORM + INSERT: %q, Postgres answers %q", got, want)
	}
	if !h.exists(t, "m1") || !h.exists(t, "m1v") || h.definitions(t) != 1 {
		t.Fatal("the batch was not committed")
	}
	h.waitStatus(t, "m1v", "live")

	// A failure after the Trellis statement undoes the whole batch: nothing
	// was committed early.
	r.sendMsgs(msgs("m2", "TRANSFORM m2v FROM m2 SELECT v AS w", "INSERT INTO m2 VALUES (1, 1), (1, 2)")...)
	fs = r.untilZ()
	want = directShape(t, h.db, "", 1, msgs("d2", "SELECT 1 AS w", "INSERT INTO d2 VALUES (1, 1), (1, 2)"))
	if got := shape(fs); got != want || want != "12C12TDC12EZI" || errCodes(fs)[0] != "23505" {
		t.Fatalf("failing suffix: %q %v, Postgres answers %q", got, errCodes(fs), want)
	}
	if h.exists(t, "m2") || h.exists(t, "m2v") || h.definitions(t) != 1 {
		t.Fatal("a failed batch left its prefix or its transform behind")
	}
}

// An earlier statement failing skips the Trellis statement and the rest:
// the error, then only ReadyForQuery.
func TestBatchEarlierFailureSkipsTrellisStatement(t *testing.T) {
	h := startTrellis(t)
	r := rawDB(t, h.Addr, h.db)
	r.sendMsgs(&pgproto3.Query{String: "CREATE TABLE src (id int PRIMARY KEY, v int)"})
	r.untilZ()
	for _, prefix := range [][]pgproto3.FrontendMessage{
		pbe("SELECT * FROM no_such_table"),                       // fails at Parse
		pbde("INSERT INTO src VALUES (1, 1), (1, 1)"),            // fails at Execute
		batch(pbe("CREATE TABLE e1 (a int)"), pbe("SELECT 1/0")), // fails at Bind, after DDL
	} {
		m := batch(prefix, pbde("TRANSFORM e_v FROM src SELECT v AS w"), pbe("CREATE TABLE e2 (a int)"), syncMsg)
		r.sendMsgs(m...)
		fs := r.untilZ()
		if got := shape(fs); !strings.HasSuffix(got, "EZI") || strings.Count(got, "E") != 1 {
			t.Fatalf("failing prefix: %q", got)
		}
		if h.exists(t, "e_v") || h.exists(t, "e1") || h.exists(t, "e2") || h.definitions(t) != 0 {
			t.Fatal("a failed batch left something behind")
		}
	}
	// The same inside the client's block: the block is aborted, as directly.
	r.sendMsgs(batch(pbe("BEGIN"), pbe("SELECT 1/0"), pbde("TRANSFORM e_v FROM src SELECT v AS w"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12C1EZE" { // 1/0 fails at Bind
		t.Fatalf("failing prefix in a block: %q", got)
	}
	r.sendMsgs(&pgproto3.Query{String: "ROLLBACK"})
	r.untilZ()
}

// A Trellis statement failing mid-batch skips the rest and rolls back the
// prefix; a $n parameter in a Trellis statement is refused with 0A000.
func TestBatchTrellisFailureSkipsRest(t *testing.T) {
	h := startTrellis(t)
	r := rawDB(t, h.Addr, h.db)
	r.sendMsgs(batch(pbe("CREATE TABLE f1 (id int PRIMARY KEY, v int)"), pbde("TRANSFORM f1v FROM f1 SELECT no_such_column AS w"),
		pbe("CREATE TABLE f2 (a int)"), syncMsg)...)
	fs := r.untilZ()
	if got := shape(fs); got != "12C12TEZI" || errCodes(fs)[0] != "42703" {
		t.Fatalf("failing TRANSFORM: %q %v", got, errCodes(fs))
	}
	if h.exists(t, "f1") || h.exists(t, "f2") || h.definitions(t) != 0 {
		t.Fatal("the failed batch left tables behind")
	}

	params := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "TRANSFORM f3v FROM f3 SELECT v + $1 AS w"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}
	r.sendMsgs(batch(pbe("CREATE TABLE f3 (id int PRIMARY KEY, v int)"), params, pbe("CREATE TABLE f4 (a int)"), syncMsg)...)
	fs = r.untilZ()
	if got := shape(fs); !strings.HasPrefix(got, "12C") || !strings.HasSuffix(got, "EZI") || len(errCodes(fs)) != 1 || errCodes(fs)[0] != "0A000" {
		t.Fatalf("$n in a Trellis statement: %q %v", got, errCodes(fs))
	}
	if h.exists(t, "f3") || h.exists(t, "f4") {
		t.Fatal("the refused batch left tables behind")
	}

	// A Trellis statement first in the batch shares the transaction of what
	// follows it too.
	r.sendMsgs(&pgproto3.Query{String: "CREATE TABLE g1 (id int PRIMARY KEY, v int)"})
	r.untilZ()
	r.sendMsgs(batch(pbde("TRANSFORM g1v FROM g1 SELECT v AS w"), pbe("INSERT INTO g1 VALUES (1, 1), (1, 1)"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12TDC12EZI" {
		t.Fatalf("TRANSFORM first, failing INSERT after: %q", got)
	}
	if h.exists(t, "g1v") || h.definitions(t) != 0 {
		t.Fatal("the failed batch kept its TRANSFORM")
	}

	// A Bind too large for the proxy to hold fails the batch there, after
	// the group before it ran.
	big := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT * FROM trellis.apply($1)"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte("TRANSFORM big FROM g1 SELECT v AS w" + strings.Repeat(" ", 1<<21))}}, &pgproto3.Execute{}}
	r.sendMsgs(batch(pbe("CREATE TABLE g2 (a int)"), big, syncMsg)...)
	if fs := r.untilZ(); shape(fs) != "12C1EZI" || errCodes(fs)[0] != "54000" {
		t.Fatalf("oversized Bind of a proxy call: %q %v", shape(fs), errCodes(fs))
	}
	if h.exists(t, "g2") {
		t.Fatal("the failed batch kept its prefix")
	}

	// A Describe refused in the client's block aborts the block too.
	r.sendMsgs(batch(pbe("BEGIN"), params, syncMsg)...)
	if fs := r.untilZ(); shape(fs) != "12C12EZE" || errCodes(fs)[0] != "0A000" {
		t.Fatalf("$n in a block: %q %v", shape(fs), errCodes(fs))
	}
	r.sendMsgs(&pgproto3.Query{String: "ROLLBACK"})
	r.untilZ()

	// Inside the client's block the failure aborts the block.
	r.sendMsgs(batch(pbe("BEGIN"), pbe("CREATE TABLE f5 (id int PRIMARY KEY, v int)"), pbde("TRANSFORM f5v FROM f5 SELECT nope AS w"),
		pbe("CREATE TABLE f6 (a int)"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12C12C12TEZE" {
		t.Fatalf("failing TRANSFORM in a block: %q", got)
	}
	r.sendMsgs(batch(pbe("SELECT 1"), syncMsg)...)
	if fs := r.untilZ(); shape(fs) != "EZE" || errCodes(fs)[0] != "25P02" {
		t.Fatalf("after the failure the block must be aborted upstream: %q %v", shape(fs), errCodes(fs))
	}
	r.sendMsgs(&pgproto3.Query{String: "ROLLBACK"})
	r.untilZ()
}

// Named statements and portals, Describe of the statement and the portal,
// two Syncs in one write, and a Flush-separated pipeline as psycopg 3 sends.
func TestBatchNamedPipelinedAndFlushed(t *testing.T) {
	h := startTrellis(t)
	r := rawDB(t, h.Addr, h.db)
	named := []pgproto3.FrontendMessage{
		&pgproto3.Parse{Name: "tstmt", Query: "TRANSFORM n1v FROM n1 SELECT v + 1 AS w"},
		&pgproto3.Describe{ObjectType: 'S', Name: "tstmt"},
		&pgproto3.Bind{DestinationPortal: "tportal", PreparedStatement: "tstmt"},
		&pgproto3.Describe{ObjectType: 'P', Name: "tportal"},
		&pgproto3.Execute{Portal: "tportal"},
		&pgproto3.Close{ObjectType: 'S', Name: "tstmt"},
	}
	// Two batches in one write: the second sees the first's table and
	// transform.
	r.sendMsgs(batch(pbe("CREATE TABLE n1 (id int PRIMARY KEY, v int)"), named, syncMsg,
		pbde("INSERT INTO n1 VALUES (1, 1)"), pbde("TRANSFORM n2v FROM n1v SELECT w * 2 AS x"),
		pbde("SELECT count(*) FROM trellis._definitions"), syncMsg)...)
	fs := r.untilZs(2)
	if got := shape(fs); got != "12C"+"1tT2TDC3"+"ZI"+"12nC"+"12TDC"+"12TDC"+"ZI" {
		t.Fatalf("two mixed batches in one write: %q", got)
	}
	var last pgproto3.DataRow
	for _, f := range fs {
		if f.typ == 'D' {
			last.Decode(f.body)
		}
	}
	if string(last.Values[0]) != "2" {
		t.Fatalf("the second batch sees %s definitions", last.Values[0])
	}

	// psycopg 3 pipeline: statements flushed one by one, one Sync.
	r.sendMsgs(batch(pbde("CREATE TABLE p1 (id int PRIMARY KEY, v int)"), flushMsg)...)
	if got := shape([]frame{r.next1(), r.next1(), r.next1(), r.next1()}); got != "12nC" {
		t.Fatalf("first pipelined statement: %q", got)
	}
	r.sendMsgs(batch(pbde("TRANSFORM p1v FROM p1 SELECT v AS w"), flushMsg)...)
	var got []frame
	for len(got) < 4 || got[len(got)-1].typ != 'C' {
		got = append(got, r.next1())
	}
	if shape(got) != "12TDC" {
		t.Fatalf("pipelined TRANSFORM: %q", shape(got))
	}
	if h.exists(t, "p1v") {
		t.Fatal("a pipelined TRANSFORM committed before the pipeline's Sync")
	}
	r.sendMsgs(batch(pbde("INSERT INTO p1 VALUES (1, 1)"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12nCZI" {
		t.Fatalf("pipeline end: %q", got)
	}
	if !h.exists(t, "p1v") {
		t.Fatal("the pipeline's Sync did not commit")
	}
	h.waitStatus(t, "p1v", "live")

	// The client's own COMMIT or BEGIN after the Trellis statement: the
	// status at Sync is Postgres's for the same batch.
	r.sendMsgs(&pgproto3.Query{String: "CREATE TABLE p2 (id int, v int)"})
	r.untilZ()
	for _, c := range []struct{ tx, want string }{{"COMMIT", "12C12TDC12C12DCZI"}, {"BEGIN", "12C12TDC12C12DCZT"}} {
		m := batch(pbe("INSERT INTO p2 VALUES (2, 2)"), pbde("SELECT trellis.try_await_converged(pg_current_wal_insert_lsn()::text, 0)"),
			pbe(c.tx), pbe("SELECT 1"), syncMsg)
		fs := r.untilZ
		r.sendMsgs(m...)
		got := shape(fs())
		direct := directShape(t, h.db, "", 1,
			batch(pbe("INSERT INTO p2 VALUES (2, 2)"), pbde("SELECT 1 AS converged"), pbe(c.tx), pbe("SELECT 1"), syncMsg))
		if got != c.want || got != direct {
			t.Fatalf("%s after the call: %q, Postgres ends with %q", c.tx, got, direct)
		}
		r.sendMsgs(&pgproto3.Query{String: "ROLLBACK"})
		r.untilZ()
	}
}

// A call the proxy answers itself (a wait) inside a mixed batch runs at its
// place, and the rest of the batch after it.
func TestBatchProxyCallInMixedBatch(t *testing.T) {
	h := startTrellis(t)
	r := rawDB(t, h.Addr, h.db)
	r.sendMsgs(batch(pbde("SELECT 1"), pbde("SELECT trellis.await_converged(pg_current_wal_insert_lsn()::text, 30000)"),
		pbde("SELECT 2"), syncMsg)...)
	fs := r.untilZ()
	if got := shape(fs); got != "12TDC12TDC12TDCZI" {
		t.Fatalf("wait in a mixed batch: %q %v", got, errCodes(fs))
	}
	// In the client's block, after a write to nothing captured.
	r.sendMsgs(batch(pbe("BEGIN"), pbe("CREATE TEMP TABLE scratch (a int)"),
		pbde("SELECT trellis.try_await_converged(pg_current_wal_insert_lsn()::text, 30000)"), syncMsg)...)
	if got := shape(r.untilZ()); got != "12C12C12TDCZT" {
		t.Fatalf("wait in a block: %q", got)
	}
	r.sendMsgs(&pgproto3.Query{String: "ROLLBACK"})
	r.untilZ()
}

// pgx's SendBatch (exec mode: one Sync for the batch) mixing SQL and a
// Trellis statement, in autocommit and in a transaction.
func TestBatchPgxSendBatch(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	c := connectURL(t, h.url("postgres", "", h.db, "default_query_exec_mode=exec"))
	b := &pgx.Batch{}
	b.Queue("CREATE TABLE px (id int PRIMARY KEY, v int)")
	b.Queue("INSERT INTO px VALUES (1, 10), (2, 20)")
	b.Queue("TRANSFORM pxv FROM px SELECT v + 1 AS w")
	b.Queue("SELECT count(*) FROM px")
	br := c.SendBatch(ctx, b)
	for i := 0; i < 2; i++ {
		if _, err := br.Exec(); err != nil {
			t.Fatalf("statement %d: %v", i, err)
		}
	}
	var kind string
	if err := br.QueryRow().Scan(&kind, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil); err != nil || kind != "transform_defined" {
		t.Fatalf("TRANSFORM in a batch: %q %v", kind, err)
	}
	var n int
	if err := br.QueryRow().Scan(&n); err != nil || n != 2 {
		t.Fatalf("count %d %v", n, err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if c.PgConn().TxStatus() != 'I' || !h.exists(t, "pxv") {
		t.Fatalf("after the batch: tx %c, target exists %v", c.PgConn().TxStatus(), h.exists(t, "pxv"))
	}
	h.waitStatus(t, "pxv", "live")

	// The default mode prepares every statement first (named Parse and
	// Describe, their own Sync), then binds and executes them in one batch.
	d := connectURL(t, h.url("postgres", "", h.db, ""))
	b = &pgx.Batch{}
	b.Queue("INSERT INTO px VALUES (3, 30)")
	b.Queue("TRANSFORM pxw FROM px SELECT v * 2 AS w")
	b.Queue("SELECT count(*) FROM px")
	br = d.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Exec(); err != nil {
		t.Fatal(err)
	}
	if err := br.QueryRow().Scan(&n); err != nil || n != 3 {
		t.Fatalf("count %d %v", n, err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	if d.PgConn().TxStatus() != 'I' || !h.exists(t, "pxw") {
		t.Fatal("the prepared batch did not commit")
	}

	// A failing batch: the error is the driver's, nothing stays.
	b = &pgx.Batch{}
	b.Queue("CREATE TABLE py (id int PRIMARY KEY, v int)")
	b.Queue("TRANSFORM pyv FROM py SELECT v AS w")
	b.Queue("INSERT INTO py VALUES (1, 1), (1, 1)")
	err := c.SendBatch(ctx, b).Close()
	var pe *pgconn.PgError
	if !asErr(err, &pe) || pe.Code != "23505" {
		t.Fatalf("failing batch: %v", err)
	}
	if h.exists(t, "py") || h.exists(t, "pyv") {
		t.Fatal("the failed batch left tables behind")
	}

	// In the client's transaction.
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b = &pgx.Batch{}
	b.Queue("CREATE TABLE pz (id int PRIMARY KEY, v int)")
	b.Queue("TRANSFORM pzv FROM pz SELECT v AS w")
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if c.PgConn().TxStatus() != 'T' || h.exists(t, "pzv") {
		t.Fatal("the batch left the client's transaction")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if h.exists(t, "pz") || h.exists(t, "pzv") {
		t.Fatal("ROLLBACK left the batch's tables")
	}
}
