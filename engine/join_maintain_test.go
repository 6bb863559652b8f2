package engine

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// execAll runs each statement in turn.
func execAll(t *testing.T, q Querier, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		exec(t, q, s)
	}
}

// transform runs a TRANSFORM statement through Apply and commits it.
func transform(t *testing.T, e *Engine, stmt string) {
	t.Helper()
	st, err := grammar.Parse(stmt)
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	ctx := context.Background()
	tx, err := e.w.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := e.Apply(ctx, tx, st, ApplyOptions{}); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A star and a snowflake JOIN target, 1-1 and aggregate, kept equal to
// Postgres's own run of their join query as every table changes: facts
// re-pointed, dimension rows updated, deleted and re-inserted, a
// dimension's own foreign key re-pointed, a dimension truncated.
func TestJoinTargetsMaintained(t *testing.T) {
	pool := testDB(t)
	execAll(t, pool,
		`CREATE TABLE regions (id int PRIMARY KEY, name text)`,
		`CREATE TABLE customers (id bigint PRIMARY KEY, name text, region_id int)`,
		`CREATE INDEX ON customers (region_id)`,
		`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, amount numeric)`,
		`CREATE INDEX ON orders (customer_id)`,
		`INSERT INTO regions SELECT g, 'region ' || g FROM generate_series(1, 5) g`,
		`INSERT INTO customers SELECT g, 'cust ' || g, CASE WHEN g % 7 = 0 THEN NULL ELSE g % 6 END FROM generate_series(1, 50) g`,
		`INSERT INTO orders SELECT g, CASE WHEN g % 11 = 0 THEN NULL ELSE g % 55 END, g FROM generate_series(1, 1000) g`,
	)
	e, _ := startEngine(t, pool, fastConfig())
	transform(t, e, `TRANSFORM order_wide FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id
		SELECT o.amount AS amount, c.name AS customer, r.name AS region`)
	transform(t, e, `TRANSFORM order_inner FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id
		SELECT o.amount * 2 AS twice, r.name AS region`)
	transform(t, e, `TRANSFORM revenue_by_region FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id
		GROUP BY r.name SELECT SUM(o.amount) AS revenue, COUNT(*) AS n, MAX(c.name) AS top`)
	wide := `SELECT o.id, o.amount, c.name, r.name FROM orders o LEFT JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id`
	inner := `SELECT o.id, o.amount * 2, r.name FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id`
	agg := `SELECT r.name, sum(o.amount), count(*), max(c.name) FROM orders o JOIN customers c ON c.id = o.customer_id LEFT JOIN regions r ON r.id = c.region_id GROUP BY r.name`
	check := func(when string) {
		t.Helper()
		converge(t, e)
		for _, c := range []struct{ got, want string }{
			{`SELECT id, amount, customer, region FROM order_wide`, wide},
			{`SELECT id, twice, region FROM order_inner`, inner},
			{`SELECT name, revenue, n, top FROM revenue_by_region`, agg},
		} {
			if d := diff(t, pool, c.got, c.want); d != "" {
				t.Fatalf("%s: %s differs from its join:\n%s", when, c.got, d)
			}
		}
	}
	for _, n := range []string{"order_wide", "order_inner", "revenue_by_region"} {
		awaitLive(t, e, n)
	}
	check("after the build")
	exec(t, pool, `UPDATE regions SET name = name || '!' WHERE id IN (1, 3)`)
	check("a dimension's dimension renamed")
	exec(t, pool, `UPDATE customers SET region_id = 4 WHERE region_id = 2`)
	check("a snowflake edge re-pointed")
	exec(t, pool, `UPDATE orders SET customer_id = customer_id + 1 WHERE id % 3 = 0`)
	check("facts re-pointed")
	exec(t, pool, `DELETE FROM customers WHERE id % 5 = 0`)
	check("dimension rows deleted")
	exec(t, pool, `INSERT INTO customers SELECT g, 'again ' || g, 1 FROM generate_series(5, 50, 5) g`)
	check("dimension rows re-inserted")
	exec(t, pool, `UPDATE customers SET id = id + 1000 WHERE id BETWEEN 10 AND 14`)
	check("dimension keys changed")
	exec(t, pool, `TRUNCATE regions`)
	check("a dimension truncated")
	exec(t, pool, `INSERT INTO regions SELECT g, 'back ' || g FROM generate_series(1, 5) g`)
	check("the dimension refilled")
}

// A JOIN target through its lifecycle: PAUSE while its dimension changes,
// RESUME (rebuilt from the live join), ALTER TRANSFORM adding a field over
// an item already joined, a schema change of a joined column pausing it
// with a capture_failure naming that table and column, and DROP removing
// the dimension's capture.
func TestJoinTargetLifecycle(t *testing.T) {
	pool := testDB(t)
	execAll(t, pool,
		`CREATE TABLE teams (id int PRIMARY KEY, name text, floor int)`,
		`CREATE TABLE tickets (id bigint PRIMARY KEY, team_id int, title text)`,
		`CREATE INDEX ON tickets (team_id)`,
		`INSERT INTO teams SELECT g, 'team ' || g, g FROM generate_series(1, 5) g`,
		`INSERT INTO tickets SELECT g, g % 6, 'ticket ' || g FROM generate_series(1, 200) g`,
	)
	e, _ := startEngine(t, pool, fastConfig())
	ctx := context.Background()
	run := func(stmt string) {
		t.Helper()
		if _, err := e.ApplyText(ctx, pool, stmt, ApplyOptions{}); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	run(`TRANSFORM ticket_teams FROM tickets t LEFT JOIN teams m ON m.id = t.team_id SELECT t.title AS title, m.name AS team`)
	awaitLive(t, e, "ticket_teams")
	same := func(when, cols, want string) {
		t.Helper()
		converge(t, e)
		if d := diff(t, pool, `SELECT `+cols+` FROM ticket_teams`, want); d != "" {
			t.Fatalf("%s: %s", when, d)
		}
	}
	want := `SELECT t.id, t.title, m.name FROM tickets t LEFT JOIN teams m ON m.id = t.team_id`
	same("built", "id, title, team", want)
	run(`PAUSE TRANSFORM ticket_teams`)
	exec(t, pool, `UPDATE teams SET name = name || ' (paused)'`)
	exec(t, pool, `DELETE FROM teams WHERE id = 2`)
	run(`RESUME TRANSFORM ticket_teams`)
	awaitLive(t, e, "ticket_teams")
	same("resumed", "id, title, team", want)
	run(`ALTER TRANSFORM ticket_teams ADD m.floor * 10 AS floor10`)
	awaitLive(t, e, "ticket_teams")
	exec(t, pool, `UPDATE teams SET floor = floor + 1 WHERE id = 3`)
	same("altered", "id, title, team, floor10", `SELECT t.id, t.title, m.name, m.floor * 10 FROM tickets t LEFT JOIN teams m ON m.id = t.team_id`)

	// The column ALTER added a read of is checked too: its type change
	// pauses the transform.
	exec(t, pool, `ALTER TABLE teams ALTER COLUMN floor TYPE bigint`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, f, _ := storedStatus(t, e, "ticket_teams")
		if status == "paused" && f != nil {
			if f.Table != "public.teams" || f.Column != "floor" {
				t.Fatalf("capture_failure names %s.%s: %+v", f.Table, f.Column, f)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not paused by the joined column's type change: %s %+v", status, f)
		}
		time.Sleep(50 * time.Millisecond)
	}
	run(`DROP TRANSFORM ticket_teams`)
	deadline = time.Now().Add(30 * time.Second)
	for count(t, pool, `SELECT 1 FROM pg_trigger WHERE tgrelid = 'teams'::regclass AND NOT tgisinternal`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the dimension's capture outlived the transform")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Quarantine is per FROM key: a dimension row whose value makes a JOIN
// target's formula fail holds the FROM key reading it, for that transform
// alone, while every other key and transform keeps applying; one that
// makes many FROM keys fail trips the column fuse of that field, as for a
// one-table transform.
func TestJoinTargetQuarantinePerFromKey(t *testing.T) {
	pool := testDB(t)
	execAll(t, pool,
		`CREATE TABLE units (id int PRIMARY KEY, per int)`,
		`CREATE TABLE readings (id bigint PRIMARY KEY, unit_id int, v int)`,
		`CREATE INDEX ON readings (unit_id)`,
		`INSERT INTO units SELECT g, g FROM generate_series(1, 5) g`,
		`INSERT INTO readings SELECT g, g % 4 + 1, g * 10 FROM generate_series(1, 40) g`,
		`INSERT INTO readings VALUES (41, 5, 410)`,
	)
	e, _ := startEngine(t, pool, fastConfig())
	transform(t, e, `TRANSFORM scaled FROM readings r JOIN units u ON u.id = r.unit_id SELECT r.v / u.per AS scaled, r.v AS v`)
	transform(t, e, `TRANSFORM raw FROM readings r LEFT JOIN units u ON u.id = r.unit_id SELECT r.v AS v, u.per AS per`)
	awaitLive(t, e, "scaled")
	awaitLive(t, e, "raw")
	held := `SELECT p.key FROM trellis._poison p JOIN trellis._definitions d ON d.id = p.definition_id WHERE d.target_table = 'public.scaled'`
	exec(t, pool, `UPDATE units SET per = 0 WHERE id = 5`) // reading 41 now divides by zero
	waitFor(t, "reading 41 held for scaled", 30*time.Second, func() bool { return count(t, pool, held) == 1 })
	if n := count(t, pool, `SELECT 1 FROM trellis._poison WHERE key <> '41' OR definition_id <> (SELECT id FROM trellis._definitions WHERE target_table = 'public.scaled')`); n != 0 {
		t.Fatalf("%d other keys held", n)
	}
	exec(t, pool, `UPDATE readings SET v = v + 1`)
	waitFor(t, "everything else applied", 30*time.Second, func() bool {
		return diff(t, pool, `SELECT id, scaled, v FROM scaled WHERE id <> 41`,
			`SELECT r.id, r.v / u.per, r.v FROM readings r JOIN units u ON u.id = r.unit_id WHERE r.id <> 41`) == "" &&
			diff(t, pool, `SELECT id, v, per FROM raw`, `SELECT r.id, r.v, u.per FROM readings r LEFT JOIN units u ON u.id = r.unit_id`) == ""
	})
	exec(t, pool, `UPDATE units SET per = 0 WHERE id = 2`) // ten readings at once: the field's fuse
	waitFor(t, "the scaled column paused by its fuse", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._paused_columns WHERE column_name = 'scaled'`) == 1
	})
	exec(t, pool, `UPDATE readings SET v = v + 1`)
	// (Key 41 stays held, so a token past it does not converge.)
	waitFor(t, "the unfused field of scaled applied", 30*time.Second, func() bool {
		return diff(t, pool, `SELECT id, v FROM scaled WHERE id <> 41`, `SELECT r.id, r.v FROM readings r JOIN units u ON u.id = r.unit_id WHERE r.id <> 41`) == ""
	})
}

// A self-join over rows that point at each other in a cycle: a change
// fans out once to the rows reading it, whose re-derives fan out no
// further (a fan-out's key did not change), so the drain comes to rest.
func TestJoinSelfJoinCycleComesToRest(t *testing.T) {
	pool := testDB(t)
	exec(t, pool, `CREATE TABLE people (id int PRIMARY KEY, name text, buddy_id int)`)
	exec(t, pool, `CREATE INDEX ON people (buddy_id)`)
	exec(t, pool, `INSERT INTO people VALUES (1, 'a', 2), (2, 'b', 1), (3, 'c', 3)`)
	e, _ := startEngine(t, pool, fastConfig())
	transform(t, e, `TRANSFORM buddies FROM people p LEFT JOIN people b ON b.id = p.buddy_id SELECT p.name AS name, b.name AS buddy`)
	awaitLive(t, e, "buddies")
	exec(t, pool, `UPDATE people SET name = upper(name)`)
	converge(t, e)
	if d := diff(t, pool, `SELECT id, name, buddy FROM buddies`, `SELECT p.id, p.name, b.name FROM people p LEFT JOIN people b ON b.id = p.buddy_id`); d != "" {
		t.Fatal(d)
	}
	// Nothing keeps staging: the log empties once the batches retire.
	waitFor(t, "the change log at rest", 30*time.Second, func() bool {
		return count(t, pool, `SELECT 1 FROM trellis._change_log`) == 0
	})
}

// A join on a unique key other than the joined table's primary key: capture
// logs the old and new values of that key, so re-keying the dimension's
// unique column, deleting and re-inserting its rows and NULL codes all
// reach the FROM rows that join on them.
func TestJoinOnUniqueKeyMaintained(t *testing.T) {
	pool := testDB(t)
	execAll(t, pool,
		`CREATE TABLE products (id int PRIMARY KEY, sku text UNIQUE, name text)`,
		`CREATE TABLE lines (id bigint PRIMARY KEY, sku text, qty int)`,
		`CREATE INDEX ON lines (sku)`,
		`INSERT INTO products SELECT g, 'sku-' || g, 'product ' || g FROM generate_series(1, 20) g`,
		`INSERT INTO products VALUES (21, NULL, 'no sku')`,
		`INSERT INTO lines SELECT g, CASE WHEN g % 9 = 0 THEN NULL ELSE 'sku-' || (g % 25) END, g FROM generate_series(1, 300) g`,
	)
	e, _ := startEngine(t, pool, fastConfig())
	transform(t, e, `TRANSFORM line_names FROM lines l LEFT JOIN products p ON p.sku = l.sku SELECT l.qty AS qty, p.name AS product`)
	transform(t, e, `TRANSFORM qty_by_product FROM lines l JOIN products p ON p.sku = l.sku GROUP BY p.name SELECT SUM(l.qty) AS qty, COUNT(*) AS n`)
	awaitLive(t, e, "line_names")
	awaitLive(t, e, "qty_by_product")
	check := func(when string) {
		t.Helper()
		converge(t, e)
		if d := diff(t, pool, `SELECT id, qty, product FROM line_names`,
			`SELECT l.id, l.qty, p.name FROM lines l LEFT JOIN products p ON p.sku = l.sku`); d != "" {
			t.Fatalf("%s: line_names: %s", when, d)
		}
		if d := diff(t, pool, `SELECT name, qty, n FROM qty_by_product`,
			`SELECT p.name, sum(l.qty), count(*) FROM lines l JOIN products p ON p.sku = l.sku GROUP BY p.name`); d != "" {
			t.Fatalf("%s: qty_by_product: %s", when, d)
		}
	}
	check("built")
	exec(t, pool, `UPDATE products SET sku = 'sku-' || (id + 100) WHERE id IN (1, 2, 3)`) // moved away: the old value's readers lose it
	check("unique key re-keyed")
	exec(t, pool, `UPDATE products SET sku = 'sku-22' WHERE id = 21`) // a NULL key comes to match
	check("a NULL key set")
	exec(t, pool, `DELETE FROM products WHERE id IN (4, 5)`)
	exec(t, pool, `INSERT INTO products VALUES (104, 'sku-4', 'new four')`)
	check("deleted and re-inserted under another identity")
	exec(t, pool, `UPDATE products SET name = name || '!' WHERE id > 10`)
	exec(t, pool, `UPDATE lines SET sku = 'sku-101' WHERE id % 7 = 0`)
	check("names and facts changed")
	exec(t, pool, `TRUNCATE products`)
	check("dimension truncated")
	// The joined key column renamed: the dimension's writers never fail
	// for the capture logging it; its readers pause, naming it.
	exec(t, pool, `ALTER TABLE products RENAME COLUMN sku TO code`)
	exec(t, pool, `INSERT INTO products VALUES (1, 'sku-1', 'one')`)
	exec(t, pool, `UPDATE products SET code = 'sku-2'`)
	waitFor(t, "line_names paused", 30*time.Second, func() bool {
		status, f, _ := storedStatus(t, e, "line_names")
		return status == "paused" && f != nil && f.Table == "public.products"
	})
}

// A fan-out re-derives for the JOIN target that staged it only: another
// transform over the same FROM table locks and re-derives none of the
// keys a dimension's change fanned out to (a re-derive leaves the key's
// lock entry in a 1-1 target's ledger; a fresh build leaves none).
func TestJoinFanOutScopedToItsTransform(t *testing.T) {
	pool, e := fanOutFixture(t, 0)
	exec(t, pool, `UPDATE kinds SET label = label || '!'`)
	exec(t, pool, `UPDATE items SET v = v + 1 WHERE id = 1`)
	converge(t, e)
	if d := diff(t, pool, itemKindsGot, itemKindsWant); d != "" {
		t.Fatal(d)
	}
	if n := count(t, pool, `SELECT 1 FROM item_kinds__ledger`); n != 300 {
		t.Fatalf("item_kinds re-derived %d of the 300 keys the fan-out reached", n)
	}
	if n := count(t, pool, `SELECT 1 FROM item_doubles__ledger`); n != 1 {
		t.Fatalf("item_doubles re-derived %d keys for a dimension it does not read (want only its own change, 1)", n)
	}
}

// fanOutFixture is kinds (3 rows) read by items (100 each) through a JOIN
// target, beside a one-table transform of items, on an engine that keeps
// its change log (so a test can count what a fan-out staged).
func fanOutFixture(t *testing.T, inlineKeys int) (*pgxpool.Pool, *Engine) {
	cfg := fastConfig()
	cfg.FanOutInlineKeys = inlineKeys
	return fanOutFixtureWith(t, cfg)
}

// fanOutFixtureWith is fanOutFixture on an engine of config cfg.
func fanOutFixtureWith(t *testing.T, cfg Config) (*pgxpool.Pool, *Engine) {
	pool := testDB(t)
	execAll(t, pool,
		`CREATE TABLE kinds (id int PRIMARY KEY, label text)`,
		`CREATE TABLE items (id bigint PRIMARY KEY, kind_id int, v int)`,
		`CREATE INDEX ON items (kind_id)`,
		`INSERT INTO kinds SELECT g, 'kind ' || g FROM generate_series(1, 3) g`,
		`INSERT INTO items SELECT g, g % 3 + 1, g FROM generate_series(1, 300) g`,
	)
	e, _ := startPlanted(t, pool, cfg, func(e *Engine) { e.w.Plant.KeepLog = true })
	transform(t, e, `TRANSFORM item_kinds FROM items i JOIN kinds k ON k.id = i.kind_id SELECT k.label AS label`)
	transform(t, e, `TRANSFORM item_doubles FROM items SELECT v * 2 AS twice`)
	awaitLive(t, e, "item_kinds")
	awaitLive(t, e, "item_doubles")
	return pool, e
}

const (
	fanOutStaged   = `SELECT 1 FROM trellis._change_log WHERE op = 'fanout'`
	itemKindsGot   = `SELECT id, label FROM item_kinds`
	itemKindsWant  = `SELECT i.id, k.label FROM items i JOIN kinds k ON k.id = i.kind_id`
	itemDoublesGot = `SELECT id, twice FROM item_doubles`
	itemDoublesWnt = `SELECT id, v * 2 FROM items`
)

// A dimension change read by no more FROM rows than FanOutInlineKeys is
// re-derived in the page that carried it, staging nothing; one read by
// more is staged for a later batch, one 'fanout' log row per FROM key.
func TestJoinFanOutRederivedInItsPage(t *testing.T) {
	for _, c := range []struct {
		name       string
		inlineKeys int
		staged     int64
	}{{"inline", 0, 0}, {"over the bound", 99, 100}, {"always staged", -1, 100}} {
		t.Run(c.name, func(t *testing.T) {
			pool, e := fanOutFixture(t, c.inlineKeys)
			exec(t, pool, `UPDATE kinds SET label = label || '!' WHERE id = 1`) // 100 items
			converge(t, e)
			if d := diff(t, pool, itemKindsGot, itemKindsWant); d != "" {
				t.Fatal(d)
			}
			if n := count(t, pool, fanOutStaged); n != c.staged {
				t.Fatalf("%d FROM keys staged, want %d", n, c.staged)
			}
		})
	}
}

// holdItemThree has a client transaction hold item 3's item_kinds row
// (item 3 reads kind 1) and then changes kind 1, whose fan-out reaches
// the held row; release ends the client's transaction.
func holdItemThree(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	ctx := context.Background()
	client, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Rollback(ctx) })
	exec(t, client, `SELECT 1 FROM item_kinds WHERE id = 3 FOR UPDATE`)
	exec(t, pool, `UPDATE kinds SET label = label || '!' WHERE id = 1`)
	return func() {
		if err := client.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// An inline fan-out gives way to a lock instead of waiting in a page that
// may already hold its definition's entries: with a client transaction
// holding one target row, the dimension change's FROM keys are staged (the
// staged page then waits or defers that key as for any change), the other
// transform keeps applying meanwhile, and everything converges once the
// client ends.
func TestJoinFanOutInlineGivesWayToALock(t *testing.T) {
	pool, e := fanOutFixture(t, 0)
	release := holdItemThree(t, pool)
	exec(t, pool, `UPDATE items SET v = v + 1 WHERE id = 3`)
	waitFor(t, "the fan-out staged", 30*time.Second, func() bool { return count(t, pool, fanOutStaged) == 100 })
	waitFor(t, "item_doubles applied beside the held row", 30*time.Second, func() bool {
		return diff(t, pool, itemDoublesGot, itemDoublesWnt) == ""
	})
	release()
	converge(t, e)
	if d := diff(t, pool, itemKindsGot, itemKindsWant); d != "" {
		t.Fatal(d)
	}
}

// The inline re-derive's lock wait is its own short one, not the page's:
// with pages allowed to wait a minute for a lock, a fan-out whose target
// row a client holds is still staged at once (within the 30 s this test
// waits), and converges once the client ends.
func TestJoinFanOutInlineLockWaitIsShort(t *testing.T) {
	cfg := fastConfig()
	cfg.PageLockTimeout = time.Minute
	pool, e := fanOutFixtureWith(t, cfg)
	release := holdItemThree(t, pool)
	waitFor(t, "the fan-out staged while the row is held", 30*time.Second, func() bool { return count(t, pool, fanOutStaged) == 100 })
	release()
	converge(t, e)
	if d := diff(t, pool, itemKindsGot, itemKindsWant); d != "" {
		t.Fatal(d)
	}
}
