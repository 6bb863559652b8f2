package engine

import (
	"context"
	"testing"

	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// The catalog checks of a JOIN TRANSFORM (joins spec §4), each with the
// statement that fails it and its twin that passes it; a statement that
// passes every check is refused as not supported yet, and nothing is
// written.
func TestJoinTargetChecks(t *testing.T) {
	pool := testDB(t)
	for _, q := range []string{
		`CREATE TABLE regions (id int PRIMARY KEY, name text)`,
		`CREATE TABLE customers (id bigint PRIMARY KEY, name text, region_id int, code text UNIQUE, tag text)`,
		`CREATE INDEX ON customers (region_id)`,
		`CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, customer_code text, amount numeric, region_id int)`,
		`CREATE INDEX ON orders (customer_id)`,
		`CREATE DOMAIN code_d AS text`,
		`CREATE TABLE coded (id bigint PRIMARY KEY, code code_d)`,
		`CREATE UNLOGGED TABLE scratch (id bigint PRIMARY KEY, v int)`,
		`CREATE TABLE secret (id int PRIMARY KEY, v int)`,
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'join_reader') THEN CREATE ROLE join_reader; END IF; END $$`,
		`GRANT SELECT ON regions, customers, orders TO join_reader`,
		`GRANT CREATE ON SCHEMA public TO join_reader`,
	} {
		exec(t, pool, q)
	}
	e, _ := startEngine(t, pool, fastConfig())
	exec(t, pool, `GRANT USAGE ON SCHEMA trellis TO join_reader`) // as the SQL surface grants PUBLIC
	cases := []struct {
		stmt, variant, role string
	}{
		{`TRANSFORM t FROM orders o LEFT JOIN customers c ON c.id = o.customer_id SELECT c.name AS who`, "", ""},
		{`TRANSFORM t FROM orders o LEFT JOIN nosuch c ON c.id = o.customer_id SELECT c.name AS who`, "SourceTableNotFound", ""},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id SELECT c.nope AS who`, "UnresolvedColumn", ""},
		{`TRANSFORM t FROM orders o JOIN scratch s ON s.id = o.customer_id SELECT s.v AS v`, "SourceNotChangeKeyed", ""},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.code = o.customer_id SELECT c.name AS who`, "JoinTypeMismatch", ""},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.code = o.customer_code SELECT c.name AS who WITHOUT SOURCE INDEX`, "", ""},
		{`TRANSFORM t FROM orders o JOIN coded d ON d.code = o.customer_code SELECT o.amount AS a`, "UnsupportedPrimaryKeyType", ""},
		{`TRANSFORM t FROM customers c JOIN orders o ON o.customer_id = c.id SELECT o.amount AS a`, "JoinNotToOne", ""},
		{`TRANSFORM t FROM customers c JOIN orders o ON o.id = c.id SELECT o.amount AS a`, "", ""},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.code = o.customer_code SELECT c.name AS who`, "MissingSourceIndex", ""},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id SELECT r.name AS region`, "", ""},
		{`TRANSFORM t FROM orders o JOIN regions r ON r.id = o.region_id SELECT r.name AS region`, "MissingSourceIndex", ""},
		{`TRANSFORM t FROM orders o JOIN customers c ON c.id = o.customer_id JOIN regions r ON r.id = c.region_id SELECT r.name AS region`, "", "join_reader"},
		{`TRANSFORM t FROM orders o JOIN secret s ON s.id = o.region_id SELECT s.v AS v WITHOUT SOURCE INDEX`, "MissingPrivilege", "join_reader"},
		{`TRANSFORM t FROM orders o JOIN secret s ON s.id = o.region_id SELECT s.v AS v WITHOUT SOURCE INDEX`, "", ""},
	}
	for _, c := range cases {
		st, err := grammar.Parse(c.stmt)
		if err != nil {
			t.Fatalf("%s: %v", c.stmt, err)
		}
		err = applyAs(t, e, c.role, st)
		if c.variant == "" {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", c.stmt, err)
			}
			continue
		}
		pe, ok := pgerr.As(err)
		if !ok {
			t.Errorf("%s: got %v, want %s", c.stmt, err, c.variant)
			continue
		}
		if pe.Variant != c.variant {
			t.Errorf("%s: got %s %s (%s), want %s", c.stmt, pe.Code, pe.Variant, pe.Message, c.variant)
			continue
		}
		t.Logf("%s -> %s %s: %s (hint: %s)", c.stmt, pe.Code, pe.Variant, pe.Message, pe.Hint)
		if pe.Position <= 0 || pe.Code == "" {
			t.Errorf("%s: %s without position or SQLSTATE: %+v", c.stmt, pe.Variant, pe)
		}
	}
	if n := count(t, pool, "SELECT * FROM trellis._definitions"); n != 0 {
		t.Fatalf("%d definitions written by refused statements", n)
	}
}

// applyAs applies st in a transaction of its own, as role when one is given
// (SET LOCAL ROLE), and rolls it back.
func applyAs(t *testing.T, e *Engine, role string, st grammar.Statement) error {
	t.Helper()
	ctx := context.Background()
	tx, err := e.w.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if role != "" {
		if _, err := tx.Exec(ctx, `SELECT set_config('role', $1, true)`, role); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.Apply(ctx, tx, st, ApplyOptions{})
	return err
}
