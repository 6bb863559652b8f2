package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
	"github.com/trellis-proxy/trellis-proxy/wire"
)

// testInterceptor answers a few statements locally, standing in for the
// Trellis router until it is wired in.
type testInterceptor struct{}

func (testInterceptor) Classify(_ *wire.SessionInfo, sql string) wire.Route {
	s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sql), ";"))
	switch s {
	case "SELECT 'intercepted'", "SELECT 'probe'", "SELECT 'fail'", "SELECT 'multi'", "SELECT 'multi-fail'", "SELECT 'sleep'", "SELECT 'notify'":
		return wire.Route{Local: true, Kind: "test", Payload: s}
	}
	return wire.PassThroughRoute
}

func (testInterceptor) Describe(_ *wire.SessionInfo, sql string, r wire.Route) ([]pgproto3.FieldDescription, error) {
	switch r.Payload {
	case "SELECT 'intercepted'":
		return []pgproto3.FieldDescription{wire.TextField("answer")}, nil
	case "SELECT 'probe'":
		return []pgproto3.FieldDescription{wire.TextField("seen"), wire.TextField("tx")}, nil
	}
	return nil, nil
}

func (testInterceptor) Execute(ctx context.Context, s *wire.SessionInfo, c *wire.Call, up wire.Upstream, w wire.ResultWriter) error {
	switch c.Route.Payload {
	case "SELECT 'intercepted'":
		w.RowDescription([]pgproto3.FieldDescription{wire.TextField("answer")})
		w.DataRow([][]byte{[]byte("answered by the proxy")})
		return w.CommandComplete("SELECT 1")
	case "SELECT 'probe'":
		// Runs inside the client's transaction: sees its temp table, and
		// its insert is undone by the client's ROLLBACK.
		tx := string(up.TxStatus())
		res, err := up.Query(ctx, "select count(*)::text from probe where note <> $1", "skip")
		if err != nil {
			return err
		}
		if _, err := up.Exec(ctx, "insert into probe(note) values ($1)", "from the proxy"); err != nil {
			return err
		}
		w.RowDescription([]pgproto3.FieldDescription{wire.TextField("seen"), wire.TextField("tx")})
		w.DataRow([][]byte{res.Rows[0][0], []byte(tx)})
		return w.CommandComplete("SELECT 1")
	case "SELECT 'fail'":
		return pgerr.New(pgerr.InvalidParameterValue, "refused on purpose").WithHint("do something else").WithPosition(8).WithClass("validation", "OnPurpose")
	case "SELECT 'multi'":
		// A multi-statement unit: pass-through pieces forwarded, one local
		// piece, a notice; one ReadyForQuery at the end (written by wire).
		if err := up.Forward(ctx, "select 1 as a", w); err != nil {
			return err
		}
		w.Notice(&pgerr.Error{Message: "a notice from the proxy"})
		w.RowDescription([]pgproto3.FieldDescription{wire.TextField("local")})
		w.DataRow([][]byte{[]byte("middle")})
		w.CommandComplete("SELECT 1")
		return up.Forward(ctx, "select 2 as b", w)
	case "SELECT 'multi-fail'":
		if err := up.Forward(ctx, "select 1/0", w); err != nil {
			return err
		}
		return errors.New("not reached")
	case "SELECT 'sleep'":
		_, err := up.Exec(ctx, "select pg_sleep(30)")
		return err
	case "SELECT 'notify'":
		if _, err := up.Exec(ctx, "select pg_notify('proxy_chan', 'from the unit')"); err != nil {
			return err
		}
		w.RowDescription([]pgproto3.FieldDescription{wire.TextField("done")})
		w.DataRow([][]byte{[]byte("yes")})
		return w.CommandComplete("SELECT 1")
	}
	return fmt.Errorf("unexpected payload %v", c.Route.Payload)
}

func interceptHarness(t *testing.T) *harness {
	return start(t, func(_ *proxyConfig, o *proxyOptions) { o.Interceptor = testInterceptor{} })
}

func TestInterceptSimpleAndExtended(t *testing.T) {
	h := interceptHarness(t)
	conn := h.connect(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement,
		pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		var s string
		if err := conn.QueryRow(t.Context(), "SELECT 'intercepted'", mode).Scan(&s); err != nil || s != "answered by the proxy" {
			t.Fatalf("mode %v: %q %v", mode, s, err)
		}
		// Ordinary SQL still passes through on the same session.
		if err := conn.QueryRow(t.Context(), "select 'upstream'", mode).Scan(&s); err != nil || s != "upstream" {
			t.Fatalf("mode %v: %q %v", mode, s, err)
		}
	}
	// Prepared in one batch, executed in later ones.
	if _, err := conn.Prepare(t.Context(), "local_stmt", "SELECT 'intercepted'"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		var s string
		if err := conn.QueryRow(t.Context(), "local_stmt").Scan(&s); err != nil || s != "answered by the proxy" {
			t.Fatalf("prepared: %q %v", s, err)
		}
	}
}

// TestInterceptOrdering pipelines upstream and local units in one write and
// checks that the replies come back whole and in order.
func TestInterceptOrdering(t *testing.T) {
	h := interceptHarness(t)
	r := dialRaw(t, h.Addr)
	r.startup()
	r.sendMsgs(
		&pgproto3.Parse{Query: "select pg_sleep(0.2)::text || 'first'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.Query{String: "SELECT 'intercepted'"},
		&pgproto3.Parse{Query: "select 'third'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.Parse{Name: "s1", Query: "SELECT 'intercepted'"}, &pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.Query{String: "select 'fifth'"},
		&pgproto3.Bind{PreparedStatement: "s1"}, &pgproto3.Execute{}, &pgproto3.Sync{},
	)
	frames := r.untilZs(6)
	if got, want := types(frames), "12DCZ"+"TDCZ"+"12DCZ"+"12TDCZ"+"TDCZ"+"2DCZ"; got != want {
		t.Fatalf("frames %q, want %q", got, want)
	}
	var values []string
	for _, f := range frames {
		if f.typ == 'D' {
			var d pgproto3.DataRow
			d.Decode(f.body)
			values = append(values, string(d.Values[0]))
		}
	}
	if got := strings.Join(values, ","); got != "first,answered by the proxy,third,answered by the proxy,fifth,answered by the proxy" {
		t.Fatalf("values %s", got)
	}

	// A batch mixing a local and an upstream statement runs in order: the
	// ordinary prefix went upstream at once (D22), its replies come first,
	// then the local statement's, then ReadyForQuery.
	r.sendMsgs(&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT 'intercepted'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	frames = r.untilZ()
	if types(frames) != "12DC12DCZ" || string(frames[len(frames)-1].body) != "I" {
		t.Fatalf("mixed batch frames %q", types(frames))
	}

	// Mixed after a Flush already had the first part answered.
	r.sendMsgs(&pgproto3.Parse{Query: "select 1"}, &pgproto3.Flush{})
	if f := r.next1(); f.typ != '1' {
		t.Fatalf("want ParseComplete, got %v", f)
	}
	r.sendMsgs(&pgproto3.Parse{Query: "SELECT 'intercepted'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
		&pgproto3.Query{String: "select 'after'"})
	if got := types(r.untilZs(2)); got != "12DCZTDCZ" {
		t.Fatalf("frames %q", got)
	}

	// The forwarded prefix commits with the batch; a local statement failing
	// after it rolls it back and skips the rest, as an error from Postgres.
	r.sendMsgs(&pgproto3.Query{String: "create table relay_mixed(a int)"})
	r.untilZ()
	r.sendMsgs(&pgproto3.Parse{Query: "insert into relay_mixed values (1)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT 'intercepted'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if frames := r.untilZ(); types(frames) != "12C12DCZ" || string(frames[len(frames)-1].body) != "I" {
		t.Fatalf("insert batch frames %q", types(frames))
	}
	r.sendMsgs(&pgproto3.Parse{Query: "insert into relay_mixed values (2)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT 'fail'"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "insert into relay_mixed values (3)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	frames = r.untilZ()
	if types(frames) != "12C12EZ" || string(frames[len(frames)-1].body) != "I" {
		t.Fatalf("failing local statement: frames %q", types(frames))
	}
	var e pgproto3.ErrorResponse
	e.Decode(frames[5].body)
	if e.Code != "22023" {
		t.Fatalf("failing local statement: %+v", e)
	}
	var got string
	if err := direct(t).QueryRow(t.Context(), "select string_agg(a::text, ',' order by a) from relay_mixed").Scan(&got); err != nil || got != "1" {
		t.Fatalf("relay_mixed holds %q (%v), want the first batch's row only", got, err)
	}

	// A prefix that fails is reported as Postgres reports it, and the local
	// statement after it is skipped.
	r.sendMsgs(&pgproto3.Parse{Query: "select 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT 'intercepted'"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	frames = r.untilZ()
	if types(frames) != "1EZ" { // 1/0 fails at Bind (constant folding)
		t.Fatalf("failing prefix frames %q", types(frames))
	}
	e.Decode(frames[1].body)
	if e.Code != "22012" {
		t.Fatalf("failing prefix: want 22012, got %+v", e)
	}
}

func TestInterceptLentUpstreamInTransaction(t *testing.T) {
	h := interceptHarness(t)
	conn := h.connect(t)
	ctx := t.Context()
	mustExec(t, conn, "begin")
	mustExec(t, conn, "create temp table probe(note text)")
	// Pipelined: the insert and the probe are sent in one write, each in
	// its own Sync batch.
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryParams("insert into probe values ('client')", nil, nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("SELECT 'probe'", nil, nil, nil, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	var seen, tx string
	for i := 0; i < 4; i++ {
		res, err := p.GetResults()
		if err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
		if rr, ok := res.(*pgconn.ResultReader); ok {
			r := rr.Read()
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if i == 2 {
				seen, tx = string(r.Rows[0][0]), string(r.Rows[0][1])
			}
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if seen != "1" || tx != "T" {
		t.Fatalf("probe saw %s rows in tx status %s", seen, tx)
	}
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from probe").Scan(&n); err != nil || n != 2 {
		t.Fatalf("count %d %v", n, err)
	}
	if conn.PgConn().TxStatus() != 'T' {
		t.Fatalf("tx status %c", conn.PgConn().TxStatus())
	}
	mustExec(t, conn, "rollback")
	if _, err := conn.Exec(ctx, "select count(*) from probe"); sqlstate(err) != "42P01" {
		t.Fatalf("temp table survived rollback: %v", err)
	}
	// The lent connection's reserved statement names do not leak.
	var leaked int
	conn.QueryRow(ctx, "select count(*) from pg_prepared_statements where name like '_trellis%'").Scan(&leaked)
	if leaked != 0 {
		t.Fatalf("%d reserved statements left", leaked)
	}
}

func TestInterceptErrorsNoticesForward(t *testing.T) {
	h := interceptHarness(t)
	conn := h.connect(t)
	ctx := t.Context()

	_, err := conn.Exec(ctx, "SELECT 'fail'")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22023" || pe.Hint != "do something else" || pe.Position != 8 || !strings.Contains(pe.Detail, "trellis: validation/OnPurpose") {
		t.Fatalf("local error: %#v", err)
	}

	var notices []string
	nconn := connectURL(t, h.url("postgres", "", "postgres", ""))
	nconn.PgConn() // notices are captured through a config hook below
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", "postgres", ""))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	mconn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer mconn.Close(ctx)
	res, err := mconn.PgConn().Exec(ctx, "SELECT 'multi'").ReadAll()
	if err != nil || len(res) != 3 {
		t.Fatalf("multi: %v %v", res, err)
	}
	if string(res[0].Rows[0][0]) != "1" || string(res[1].Rows[0][0]) != "middle" || string(res[2].Rows[0][0]) != "2" || string(res[2].FieldDescriptions[0].Name) != "b" {
		t.Fatalf("multi results %v", res)
	}
	if len(notices) != 1 || notices[0] != "a notice from the proxy" {
		t.Fatalf("notices %v", notices)
	}
	_, err = mconn.PgConn().Exec(ctx, "SELECT 'multi-fail'").ReadAll()
	if sqlstate(err) != "22012" {
		t.Fatalf("forwarded error: %v", err)
	}
	var one int
	if err := mconn.QueryRow(ctx, "select 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}

func TestInterceptCancelAndNotify(t *testing.T) {
	h := interceptHarness(t)
	conn := h.connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := conn.Exec(ctx, "SELECT 'sleep'", pgx.QueryExecModeSimpleProtocol)
	if err == nil || time.Since(began) > 10*time.Second {
		t.Fatalf("local unit not cancelled: %v after %v", err, time.Since(began))
	}
	if s := sqlstate(err); s != "" && s != "57014" {
		t.Fatalf("want 57014, got %v", err)
	}
	if !conn.IsClosed() {
		var one int
		if err := conn.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
	}

	listener := h.connect(t)
	mustExec(t, listener, "listen proxy_chan")
	var s string
	if err := listener.QueryRow(t.Context(), "SELECT 'notify'", pgx.QueryExecModeSimpleProtocol).Scan(&s); err != nil || s != "yes" {
		t.Fatalf("%q %v", s, err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer wcancel()
	n, err := listener.WaitForNotification(wctx)
	if err != nil || n.Payload != "from the unit" {
		t.Fatalf("notification %v %v", n, err)
	}
}

// TestInterceptAfterExtendedCopy: Syncs sent between an extended-protocol
// COPY and its data owe no ReadyForQuery; a local unit after it must not
// wait for one.
func TestInterceptAfterExtendedCopy(t *testing.T) {
	h := interceptHarness(t)
	r := dialRaw(t, h.Addr)
	r.startup()
	r.sendMsgs(&pgproto3.Query{String: "create temp table xc(x int)"})
	r.untilZ()
	r.sendMsgs(&pgproto3.Parse{Query: "copy xc from stdin"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
	for f := r.next1(); f.typ != 'G'; f = r.next1() {
	}
	r.sendMsgs(&pgproto3.CopyData{Data: []byte("1\n2\n")}, &pgproto3.CopyDone{}, &pgproto3.Sync{})
	if got := types(r.untilZ()); got != "CZ" {
		t.Fatalf("frames %q", got)
	}
	r.sendMsgs(&pgproto3.Query{String: "SELECT 'intercepted'"}, &pgproto3.Query{String: "select count(*) from xc"})
	frames := r.untilZs(2)
	if got := types(frames); got != "TDCZTDCZ" {
		t.Fatalf("frames %q", got)
	}
}
