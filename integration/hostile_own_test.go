package integration

// Issue 14, D20: tenant-owned code never runs as the workers. An ordinary
// role own_mallory (CREATE on public only) defines a transform over her own
// table, then tries to attach code to her target and ledger that would run
// when the workers write them. The tables are the workers' role's, so each
// attempt is refused, and no role attribute changes.

import (
	"context"
	"testing"
)

func TestOwnTargetCodeRefused(t *testing.T) {
	eachWorkers(t, ownTargetCodeRefused)
}

func ownTargetCodeRefused(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	su := h.client(t)
	h.tenant(t, "own_mallory")
	m := connectURL(t, h.url("own_mallory", "", h.db, ""))
	mustExec(t, m, `CREATE TABLE own_src (id int PRIMARY KEY, v int)`)
	mustExec(t, m, `INSERT INTO own_src SELECT g, g FROM generate_series(1, 5) g`)
	mustExec(t, m, `TRANSFORM own_tgt FROM own_src SELECT v * 2 AS w`)
	var status string
	if err := m.QueryRow(ctx, `SELECT trellis.await_live('own_tgt', 60000)`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, `CREATE FUNCTION own_escalate() RETURNS trigger LANGUAGE plpgsql AS $f$
		BEGIN EXECUTE 'ALTER ROLE own_mallory SUPERUSER'; RETURN NULL; END $f$`)
	for _, q := range []string{
		`CREATE TRIGGER own_t AFTER INSERT OR UPDATE OR DELETE ON own_tgt FOR EACH STATEMENT EXECUTE FUNCTION own_escalate()`,
		`CREATE TRIGGER own_t AFTER INSERT OR UPDATE OR DELETE ON own_tgt__ledger FOR EACH STATEMENT EXECUTE FUNCTION own_escalate()`,
		`CREATE RULE own_r AS ON INSERT TO own_tgt DO ALSO SELECT 1`,
		`ALTER TABLE own_tgt ALTER COLUMN w SET DEFAULT 1`,
		`ALTER TABLE own_tgt ADD CHECK (w > 0)`,
		`ALTER TABLE own_tgt ADD COLUMN own_g int GENERATED ALWAYS AS (w + 1) STORED`,
		`CREATE INDEX ON own_tgt ((w + 1))`,
		`CREATE INDEX ON own_tgt__ledger ((k || 'x'))`,
		`ALTER TABLE own_tgt ENABLE ROW LEVEL SECURITY`,
	} {
		if _, err := m.Exec(ctx, q); err == nil || sqlstate(err) != "42501" {
			t.Errorf("%s: want 42501, got %v", q, err)
		}
	}
	// The owner keeps reading, indexing (plain columns) and dropping.
	mustExec(t, m, `UPDATE own_src SET v = v + 1`)
	if _, err := m.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	h.sameAs(t, m, `SELECT id, w FROM own_tgt`, `SELECT id, v * 2 FROM own_src`)
	mustExec(t, m, `SELECT trellis._create_index('own_tgt', ARRAY['w'])`)
	var super bool
	if err := su.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = 'own_mallory'`).Scan(&super); err != nil || super {
		t.Fatalf("own_mallory rolsuper = %v (%v)", super, err)
	}
	mustExec(t, m, `PAUSE TRANSFORM own_tgt`)
	mustExec(t, m, `DROP TRANSFORM own_tgt`)
}

// The second wall: a trigger only a superuser could add to a target pauses
// the transform with a capture_failure naming the table.
func TestOwnTamperPauses(t *testing.T) {
	eachWorkers(t, ownTamperPauses)
}

func ownTamperPauses(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	su, app := h.client(t), h.owner(t)
	mustExec(t, app, `CREATE TABLE own_s2 (id int PRIMARY KEY, v int)`)
	mustExec(t, app, `INSERT INTO own_s2 VALUES (1, 1)`)
	mustExec(t, app, `TRANSFORM own_t2 FROM own_s2 SELECT v AS w`)
	h.waitStatus(t, "own_t2", "live")
	mustExec(t, su, `CREATE FUNCTION own_noop() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN RETURN NULL; END $f$`)
	mustExec(t, su, `CREATE TRIGGER own_x AFTER INSERT ON own_t2 FOR EACH STATEMENT EXECUTE FUNCTION own_noop()`)
	h.waitStatus(t, "own_t2", "paused")
	var table string
	if err := h.pool.QueryRow(ctx, `SELECT status_detail #>> '{capture_failure,table}' FROM trellis._definitions
		WHERE target_table = 'public.own_t2'`).Scan(&table); err != nil || table != "public.own_t2" {
		t.Fatalf("capture_failure table %q (%v)", table, err)
	}
}
