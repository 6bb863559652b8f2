package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func qString(t *testing.T, c *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func sameAs(t *testing.T, c *pgx.Conn, got, want string) bool {
	t.Helper()
	return qString(t, c, "SELECT count(*)::text FROM ((("+got+") EXCEPT ALL ("+want+")) UNION ALL (("+want+") EXCEPT ALL ("+got+"))) d") == "0"
}

// Quarantine through the proxy (issue 7): a failing key is held for its
// transform only, a person sees why, fixes the row and releases it.
func TestQuarantineThroughProxy(t *testing.T) {
	h := startTrellisFaults(t)
	ctx := context.Background()
	c := h.client(t)
	mustExec(t, c, `CREATE TABLE orders (id bigint PRIMARY KEY, price numeric, qty int, email text)`)
	mustExec(t, c, `INSERT INTO orders SELECT g, g, 1 + g % 3, 'u' || g || '@x' FROM generate_series(1, 100) g`)
	mustExec(t, c, `TRANSFORM unit FROM orders SELECT price / qty AS per`)
	mustExec(t, c, `TRANSFORM gross FROM orders SELECT price * 2 AS p`)
	mustExec(t, c, `TRANSFORM emails FROM orders SELECT lower(email) AS mail`)
	h.waitStatus(t, "unit", "live")
	h.waitStatus(t, "gross", "live")
	h.waitStatus(t, "emails", "live")

	// A divisor becomes zero for one row; a user's unique index on a target
	// refuses another row.
	mustExec(t, c, `CREATE UNIQUE INDEX ON emails (mail)`)
	mustExec(t, c, `UPDATE orders SET qty = 0 WHERE id = 7`)
	mustExec(t, c, `UPDATE orders SET email = 'U1@X' WHERE id = 2`)
	mustExec(t, c, `UPDATE orders SET price = price + 1 WHERE id > 50`)
	token := qString(t, c, `SELECT trellis.watermark_token()`)
	eventually(t, 60*time.Second, "keys held", func() bool {
		return qString(t, c, `SELECT count(*)::text FROM trellis.poisoned`) == "2"
	})
	got := qString(t, c, `SELECT string_agg(src_table || ' ' || key || ' ' || error_message || ' ' || cursor, ';') FROM trellis.sample_quarantined('unit', NULL, 10)`)
	if got != "public.orders 7 division by zero 13:public.orders7" {
		t.Fatalf("sample_quarantined(unit): %q", got)
	}
	got = qString(t, c, `SELECT key || ' ' || sqlstate FROM trellis.quarantined_rows WHERE transform = 'emails'`)
	if got != "2 23505" {
		t.Fatalf("quarantined_rows(emails): %q", got)
	}
	// Everything else is live and exact; the drain is not stuck.
	eventually(t, 60*time.Second, "others exact", func() bool {
		return sameAs(t, c, `SELECT id, per FROM unit WHERE id <> 7`, `SELECT id, price / qty FROM orders WHERE id <> 7`) &&
			sameAs(t, c, `SELECT id, p FROM gross`, `SELECT id, price * 2 FROM orders`) &&
			sameAs(t, c, `SELECT id, mail FROM emails WHERE id <> 2`, `SELECT id, lower(email) FROM orders WHERE id <> 2`)
	})
	if s := qString(t, c, `SELECT string_agg(target || ':' || status || ':' || coalesce(held_keys ->> 'held_count', '-'), ' ' ORDER BY target) FROM trellis.status`); s != "emails:live:1 gross:live:- unit:live:1" {
		t.Fatalf("status: %s", s)
	}
	var ok bool
	if err := c.QueryRow(ctx, "SELECT trellis.try_await_converged($1, 300)", token).Scan(&ok); err != nil || ok {
		t.Fatalf("a token above held keys converged: %v %v", ok, err)
	}

	// Fix the rows and release: exact, and the token converges.
	mustExec(t, c, `UPDATE orders SET qty = 4 WHERE id = 7`)
	mustExec(t, c, `UPDATE orders SET email = 'u2@x' WHERE id = 2`)
	var notices []string
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", h.db, ""))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	nc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close(ctx)
	mustExec(t, nc, `SELECT trellis.release_key('unit', 'orders', '7')`)
	mustExec(t, nc, `SELECT trellis.release_key('emails', 'public.orders', '2')`)
	if len(notices) != 2 || notices[0] != "released key 7 of public.orders for unit; it is re-derived from its current row" {
		t.Fatalf("notices %q", notices)
	}
	_, err = c.Exec(ctx, `SELECT trellis.release_key('unit', 'orders', '7')`)
	if pe := pgErrOf(t, err); pe.Code != "42704" || !strings.Contains(pe.Message, "is not held for unit") {
		t.Fatalf("second release: %s %s", pe.Code, pe.Message)
	}
	if err := c.QueryRow(ctx, "SELECT trellis.try_await_converged($1, 30000)", token).Scan(&ok); err != nil || !ok {
		t.Fatalf("token after release: %v %v", ok, err)
	}
	if !sameAs(t, c, `SELECT id, per FROM unit`, `SELECT id, price / qty FROM orders`) ||
		!sameAs(t, c, `SELECT id, mail FROM emails`, `SELECT id, lower(email) FROM orders`) {
		t.Fatal("targets not exact after release")
	}

	// An unattributable failure: a drain_failure, loudly, until fixed.
	mustExec(t, c, `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'gross under maintenance' USING ERRCODE = '55006'; END $$`)
	mustExec(t, c, `CREATE TRIGGER refuse BEFORE UPDATE ON gross FOR EACH ROW EXECUTE FUNCTION refuse()`)
	mustExec(t, c, `UPDATE orders SET price = price + 1 WHERE id = 3`)
	eventually(t, 60*time.Second, "drain_failure", func() bool {
		return qString(t, c, `SELECT coalesce(problem, '') FROM trellis.status WHERE target = 'gross'`) == "drain held back: gross under maintenance"
	})
	mustExec(t, c, `DROP TRIGGER refuse ON gross`)
	token = qString(t, c, `SELECT trellis.watermark_token()`)
	if err := c.QueryRow(ctx, "SELECT trellis.try_await_converged($1, 30000)", token).Scan(&ok); err != nil || !ok {
		t.Fatalf("token after the holdup cleared: %v %v", ok, err)
	}
	if s := qString(t, c, `SELECT (drain_failure IS NULL)::text FROM trellis.status WHERE target = 'gross'`); s != "true" {
		t.Fatal("drain_failure did not clear")
	}

	// Many rows failing on one field pause that column only (it keeps its
	// values; the rest of the target stays live).
	mustExec(t, c, `TRANSFORM two FROM orders SELECT price / qty AS per, price + 1 AS up`)
	h.waitStatus(t, "two", "live")
	mustExec(t, c, `UPDATE orders SET qty = 0, price = price + 1000 WHERE id <= 20`)
	eventually(t, 60*time.Second, "two.per paused", func() bool {
		return qString(t, c, `SELECT count(*)::text FROM trellis.quarantined WHERE target = 'two.per' AND state = 'paused'`) == "1"
	})
	eventually(t, 60*time.Second, "two.up exact", func() bool {
		return sameAs(t, c, `SELECT id, up FROM two`, `SELECT id, price + 1 FROM orders`)
	})
	if s := qString(t, c, `SELECT status || ' ' || paused_columns::text FROM trellis.status WHERE target = 'two'`); s != "live {per}" {
		t.Fatalf("two: %s", s)
	}
	if sameAs(t, c, `SELECT id, per FROM two`, `SELECT id, price / nullif(qty, 0) FROM orders`) {
		t.Fatal("a paused column was written")
	}
	// Fix the rows and resume the column: the transform rebuilds it.
	_, err = c.Exec(ctx, `RESUME TRANSFORM two.up`)
	if pe := pgErrOf(t, err); pe.Code != "55000" || !strings.Contains(pe.Message, "is not paused") {
		t.Fatalf("RESUME of a live column: %s %s", pe.Code, pe.Message)
	}
	mustExec(t, c, `UPDATE orders SET qty = 3 WHERE qty = 0`)
	mustExec(t, c, `RESUME TRANSFORM two.per`)
	h.waitStatus(t, "two", "live")
	eventually(t, 60*time.Second, "two exact after RESUME two.per", func() bool {
		return sameAs(t, c, `SELECT id, per, up FROM two`, `SELECT id, price / qty, price + 1 FROM orders`)
	})
	if s := qString(t, c, `SELECT paused_columns::text FROM trellis.status WHERE target = 'two'`); s != "{}" {
		t.Fatalf("paused after resume: %s", s)
	}

	// Every row refused by a constraint on the target (not a column's
	// formula) trips the transform fuse; other transforms stay exact.
	mustExec(t, c, `ALTER TABLE gross ADD CONSTRAINT small CHECK (p < 100000)`)
	mustExec(t, c, `UPDATE orders SET price = price + 100000`)
	eventually(t, 60*time.Second, "gross quarantined", func() bool {
		return qString(t, c, `SELECT count(*)::text FROM trellis.quarantined WHERE target = 'gross' AND held_keys >= 5`) == "1"
	})
	eventually(t, 60*time.Second, "two.up still exact", func() bool {
		return sameAs(t, c, `SELECT id, up FROM two`, `SELECT id, price + 1 FROM orders`)
	})
}
