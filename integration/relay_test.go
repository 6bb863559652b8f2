package integration

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

func TestQueries(t *testing.T) {
	h := start(t, nil)
	ctx := t.Context()
	conn := h.connect(t)

	t.Run("simple", func(t *testing.T) {
		var a int
		var b string
		if err := conn.QueryRow(ctx, "select 1, 'x'", pgx.QueryExecModeSimpleProtocol).Scan(&a, &b); err != nil || a != 1 || b != "x" {
			t.Fatalf("got %d %q %v", a, b, err)
		}
		// A multi-statement simple query: one ReadyForQuery, several results.
		res, err := conn.PgConn().Exec(ctx, "select 1; select 2, 3; select").ReadAll()
		if err != nil || len(res) != 3 || string(res[1].Rows[0][1]) != "3" {
			t.Fatalf("multi-statement: %v %v", res, err)
		}
	})
	t.Run("extended named and unnamed", func(t *testing.T) {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
			var n int64
			var s string
			if err := conn.QueryRow(ctx, "select $1::int8 * 2, $2::text", mode, int64(21), "y").Scan(&n, &s); err != nil || n != 42 || s != "y" {
				t.Fatalf("mode %v: %d %q %v", mode, n, s, err)
			}
		}
		if _, err := conn.Prepare(ctx, "named_one", "select generate_series(1, $1::int)"); err != nil {
			t.Fatal(err)
		}
		rows, _ := conn.Query(ctx, "named_one", 5)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil || len(got) != 5 {
			t.Fatalf("named: %v %v", got, err)
		}
	})
	t.Run("portal row limits", func(t *testing.T) {
		r := dialRaw(t, h.Addr)
		r.startup()
		r.sendMsgs(&pgproto3.Parse{Query: "select generate_series(1, 5)"}, &pgproto3.Bind{},
			&pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{MaxRows: 2}, &pgproto3.Sync{})
		if got := types(r.untilZ()); got != "12DDsDDsDCZ" {
			t.Fatalf("frames %q", got)
		}
	})
	t.Run("pipelined batch", func(t *testing.T) {
		b := &pgx.Batch{}
		for i := 0; i < 100; i++ {
			b.Queue("select $1::int", i)
		}
		br := conn.SendBatch(ctx, b)
		for i := 0; i < 100; i++ {
			var n int
			if err := br.QueryRow().Scan(&n); err != nil || n != i {
				t.Fatalf("batch %d: %d %v", i, n, err)
			}
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		// Raw pipelining: three Sync batches and a Query in one write.
		r := dialRaw(t, h.Addr)
		r.startup()
		r.sendMsgs(&pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
			&pgproto3.Query{String: "select 2"},
			&pgproto3.Parse{Query: "select 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
			&pgproto3.Parse{Query: "select 3"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
		if got := types(r.untilZs(4)); got != "12DCZTDCZ1EZ12DCZ" {
			t.Fatalf("frames %q", got)
		}
	})
}

func TestErrorsInTransaction(t *testing.T) {
	h := start(t, nil)
	ctx := t.Context()
	conn := h.connect(t)
	mustExec(t, conn, "create temp table e(x int primary key)")
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "insert into e values (1)"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "insert into e values (1)")
	if sqlstate(err) != "23505" {
		t.Fatalf("want 23505, got %v", err)
	}
	_, err = tx.Exec(ctx, "select 1")
	if sqlstate(err) != "25P02" {
		t.Fatalf("want 25P02, got %v", err)
	}
	if conn.PgConn().TxStatus() != 'E' {
		t.Fatalf("tx status %c", conn.PgConn().TxStatus())
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "select count(*) from e").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after rollback: %d %v", n, err)
	}
	// Savepoint recovery.
	mustExec(t, conn, "begin; insert into e values (2); savepoint s")
	if _, err := conn.Exec(ctx, "insert into e values (2)"); sqlstate(err) != "23505" {
		t.Fatalf("want 23505, got %v", err)
	}
	mustExec(t, conn, "rollback to savepoint s; insert into e values (3); commit")
	if err := conn.QueryRow(ctx, "select count(*) from e").Scan(&n); err != nil || n != 2 {
		t.Fatalf("after savepoint: %d %v", n, err)
	}
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestCopy streams 1,000,000 rows each way and compares bytes with a direct
// connection.
func TestCopy(t *testing.T) {
	h := start(t, nil)
	ctx := t.Context()
	pc := h.connect(t).PgConn()
	dc := direct(t).PgConn()
	const q = "copy (select i, md5(i::text), i * 7 from generate_series(1, 1000000) i) to stdout"
	sum := func(c *pgconn.PgConn, sql string) ([32]byte, int64) {
		hs := sha256.New()
		tag, err := c.CopyTo(ctx, hs, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		var s [32]byte
		copy(s[:], hs.Sum(nil))
		return s, tag.RowsAffected()
	}
	viaProxy, n := sum(pc, q)
	directly, _ := sum(dc, q)
	if viaProxy != directly || n != 1000000 {
		t.Fatalf("COPY TO differs: %x vs %x (%d rows)", viaProxy, directly, n)
	}

	if _, err := dc.Exec(ctx, "drop table if exists copy_in; create table copy_in(i int, m text, k int8)").ReadAll(); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := dc.CopyTo(context.Background(), pw, q)
		pw.CloseWithError(err)
	}()
	// dc is busy streaming into the pipe; read it through the proxy into the
	// table on a proxied connection.
	tag, err := pc.CopyFrom(ctx, pr, "copy copy_in from stdin")
	if err != nil || tag.RowsAffected() != 1000000 {
		t.Fatalf("COPY FROM: %v %v", tag, err)
	}
	got, _ := sum(h.connect(t).PgConn(), "copy (select * from copy_in order by i) to stdout")
	if got != directly {
		t.Fatalf("COPY FROM round trip differs")
	}
	if _, err := pc.Exec(ctx, "drop table copy_in").ReadAll(); err != nil {
		t.Fatal(err)
	}
}

func TestLargeResult(t *testing.T) {
	h := start(t, nil)
	conn := h.connect(t)
	const size = 100 << 20
	var n int
	rows, err := conn.Query(t.Context(), "select repeat('x', $1)", size)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		n += len(rows.RawValues()[0])
	}
	if rows.Err() != nil || n != size {
		t.Fatalf("got %d bytes, %v", n, rows.Err())
	}
	// Many rows summing to 100 MB, simple protocol.
	n = 0
	rows, _ = conn.Query(t.Context(), "select repeat('y', 1048576) from generate_series(1, 100)", pgx.QueryExecModeSimpleProtocol)
	for rows.Next() {
		n += len(rows.RawValues()[0])
	}
	if rows.Err() != nil || n != size {
		t.Fatalf("got %d bytes, %v", n, rows.Err())
	}
}

func TestCancel(t *testing.T) {
	h := start(t, nil)
	conn := h.connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := conn.Exec(ctx, "select pg_sleep(30)")
	if err == nil || time.Since(began) > 10*time.Second {
		t.Fatalf("pg_sleep not cancelled: %v after %v", err, time.Since(began))
	}
	var pe *pgconn.PgError
	// pgx reports the 57014 from Postgres when the cancel lands first, or
	// closes the connection when its own deadline does.
	if errors.As(err, &pe) && pe.Code != "57014" {
		t.Fatalf("want 57014, got %v", err)
	}
	if !conn.IsClosed() {
		var one int
		if err := conn.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
	}
	// Cancel through the raw protocol: the proxy's key, routed upstream.
	c2 := h.connect(t)
	done := make(chan error, 1)
	go func() {
		_, err := c2.Exec(context.Background(), "select pg_sleep(30)")
		done <- err
	}()
	eventually(t, 10*time.Second, "pg_sleep running", func() bool {
		var n int
		direct(t).QueryRow(t.Context(), "select count(*) from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'").Scan(&n)
		return n > 0
	})
	if err := c2.PgConn().CancelRequest(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if sqlstate(err) != "57014" {
			t.Fatalf("want 57014, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not stop pg_sleep")
	}
	// The secret carries the instance bits; the pid is the backend's own.
	if k := c2.PgConn().SecretKey(); len(k) < 4 || binary.BigEndian.Uint32(k)>>20 == 0 {
		t.Fatalf("secret %x has no instance bits", k)
	}
}

func TestListenNotify(t *testing.T) {
	h := start(t, nil)
	listener := h.connect(t)
	talker := h.connect(t)
	mustExec(t, listener, "listen chan_a")
	mustExec(t, talker, "select pg_notify('chan_a', 'hello')")
	mustExec(t, talker, "notify chan_a, 'world'")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, want := range []string{"hello", "world"} {
		n, err := listener.WaitForNotification(ctx)
		if err != nil || n.Payload != want || n.Channel != "chan_a" {
			t.Fatalf("notification %v %v, want %s", n, err, want)
		}
	}
}

func TestConcurrentSessions(t *testing.T) {
	h := start(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 200; i++ {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, h.url("postgres", "", "postgres", ""))
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			for j := 0; j < 5; j++ {
				var n int
				if err := conn.QueryRow(ctx, "select $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
					errs <- fmt.Errorf("session %d: %d %v", i, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestUpstreamKilled(t *testing.T) {
	h := start(t, nil)
	victim := h.connect(t)
	other := h.connect(t)
	var pid int
	if err := victim.QueryRow(t.Context(), "select pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	mustExec(t, direct(t), "select pg_terminate_backend($1)", pid)
	_, err := victim.Exec(t.Context(), "select 1")
	if err == nil {
		t.Fatal("victim's query succeeded after its backend was terminated")
	}
	var one int
	if err := other.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
		t.Fatalf("other session broke: %v", err)
	}
	fresh := h.connect(t)
	if err := fresh.QueryRow(t.Context(), "select 1").Scan(&one); err != nil {
		t.Fatalf("new session failed: %v", err)
	}
}

func TestMaxClientConns(t *testing.T) {
	h := start(t, func(c *proxyConfig, _ *proxyOptions) { c.MaxClientConns = 2 })
	h.connect(t)
	h.connect(t)
	_, err := pgx.Connect(t.Context(), h.url("postgres", "", "postgres", ""))
	if sqlstate(err) != "53300" {
		t.Fatalf("want 53300, got %v", err)
	}
}

func TestShutdown(t *testing.T) {
	h := start(t, func(c *proxyConfig, _ *proxyOptions) { c.ShutdownGrace = 20 * time.Second })
	idle := h.connect(t)
	busy := h.connect(t)
	done := make(chan error, 1)
	go func() {
		var s string
		done <- busy.QueryRow(context.Background(), "select pg_sleep(1.5)::text").Scan(&s)
	}()
	// Sleeping, not merely active: a backend is also active while it parses
	// the statement, and between pgx's Parse round trip and its Execute the
	// session is idle, which shutdown may end.
	eventually(t, 10*time.Second, "busy query sleeping", func() bool {
		var n int
		direct(t).QueryRow(t.Context(), "select count(*) from pg_stat_activity where query like 'select pg_sleep(1.5)%' and state = 'active' and wait_event = 'PgSleep'").Scan(&n)
		return n > 0
	})
	stopped := make(chan error, 1)
	go func() { stopped <- h.stop() }()
	eventually(t, 10*time.Second, "listener closed", func() bool {
		c, err := net.DialTimeout("tcp", h.Addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	// The idle session is told at once.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := idle.Exec(ctx, "select 1")
	if err == nil {
		t.Fatal("idle session still served after shutdown began")
	}
	if s := sqlstate(err); s != "" && s != "57P01" {
		t.Fatalf("idle session: want 57P01, got %v", err)
	}
	// The busy one finishes its statement within the grace period.
	if err := <-done; err != nil {
		t.Fatalf("busy session: %v", err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
}

func TestShutdownGraceExpires(t *testing.T) {
	direct(t) // the cluster and its goroutines first, for the baseline
	base := goroutines()
	h := start(t, func(c *proxyConfig, _ *proxyOptions) { c.ShutdownGrace = 300 * time.Millisecond })
	busy := h.connect(t)
	mustExec(t, busy, "begin")
	began := time.Now()
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if time.Since(began) > 10*time.Second {
		t.Fatalf("shutdown took %v", time.Since(began))
	}
	_, err := busy.Exec(t.Context(), "select 1")
	if err == nil {
		t.Fatal("session in a transaction survived the grace period")
	}
	if !strings.Contains(err.Error(), "57P01") && !busy.IsClosed() {
		t.Fatalf("want 57P01 or a closed connection, got %v", err)
	}
	busy.Close(t.Context())
	// Nothing of the proxy is left running.
	eventually(t, 10*time.Second, "goroutines back at baseline", func() bool { return goroutines() <= base })
}
