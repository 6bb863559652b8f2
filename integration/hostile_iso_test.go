package integration

// Per-definition failure isolation (D21): one tenant's transform that cannot
// be applied holds only that transform; every other role's transforms keep
// converging, and the failure's text is shown only to who may see it.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// isoTenants is a harness with an attacker (CREATE on public only) and a
// victim, each with a source; the victim's transform is live.
type isoTenants struct {
	h               *trellisHarness
	su, mal, victim *pgx.Conn
}

func isoSetup(t *testing.T, h *trellisHarness) *isoTenants {
	t.Helper()
	su := h.client(t)
	h.tenant(t, "iso_mallory")
	h.tenant(t, "iso_victim")
	v := connectURL(t, h.url("iso_victim", "", h.db, ""))
	mustExec(t, v, `CREATE TABLE iso_vsrc (id int PRIMARY KEY, v int)`)
	mustExec(t, v, `INSERT INTO iso_vsrc SELECT g, g FROM generate_series(1, 10) g`)
	mustExec(t, v, `TRANSFORM iso_vt FROM iso_vsrc SELECT v * 2 AS w`)
	var live string
	if err := v.QueryRow(context.Background(), `SELECT trellis.await_live('iso_vt', 60000)`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	m := connectURL(t, h.url("iso_mallory", "", h.db, ""))
	mustExec(t, m, `CREATE TABLE iso_msrc (id int PRIMARY KEY, v int8)`)
	mustExec(t, m, `INSERT INTO iso_msrc SELECT g, g FROM generate_series(1, 10) g`)
	return &isoTenants{h: h, su: su, mal: m, victim: v}
}

// malTransform defines mallory's transform and waits for it to be live.
func (s *isoTenants) malTransform(t *testing.T, stmt, target string) {
	t.Helper()
	mustExec(t, s.mal, stmt)
	var live string
	if err := s.mal.QueryRow(context.Background(), `SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil {
		t.Fatal(err)
	}
}

// victimConverges writes mallory's source (with malWrite) and the victim's,
// then checks that the victim's write converges within a few seconds, more
// than once (her held share stays held), that its status names no problem
// and carries none of her error text, and that the victim's target is right.
func (s *isoTenants) victimConverges(t *testing.T, malWrite string, secret string) {
	t.Helper()
	ctx := context.Background()
	for round := 1; round <= 3; round++ {
		mustExec(t, s.mal, malWrite)
		mustExec(t, s.victim, `UPDATE iso_vsrc SET v = v + 1`)
		if _, err := s.victim.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 5000)`); err != nil {
			s.dumpEngineState(t)
			t.Fatalf("round %d: the victim's write did not converge while mallory's transform is held: %v", round, err)
		}
	}
	if !sameAs(t, s.victim, `SELECT id, w FROM iso_vt`, `SELECT id, v * 2 FROM iso_vsrc`) {
		t.Fatal("the victim's target differs from its definition")
	}
	rows, err := s.victim.Query(ctx, `SELECT target, status, coalesce(problem, ''), coalesce(drain_failure::text, '') FROM trellis.status`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var target, status, problem, df string
		if err := rows.Scan(&target, &status, &problem, &df); err != nil {
			t.Fatal(err)
		}
		if target == "iso_vt" && (status != "live" || problem != "" || df != "") {
			t.Fatalf("the victim's status: %s, problem %q, drain_failure %s", status, problem, df)
		}
		if secret != "" && (strings.Contains(problem, secret) || strings.Contains(df, secret)) {
			t.Fatalf("the victim sees mallory's error text on %s: %q %s", target, problem, df)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var super bool
	if err := s.su.QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = 'iso_mallory'`).Scan(&super); err != nil || super {
		t.Fatalf("mallory's rolsuper: %v %v", super, err)
	}
}

// dumpEngineState logs the engine's queue tables, so a stall names the row
// that holds it.
func (s *isoTenants) dumpEngineState(t *testing.T) {
	t.Helper()
	for _, q := range []string{
		`SELECT id, target_table, status, version, status_detail::text FROM trellis._definitions`,
		`SELECT * FROM trellis._batches ORDER BY 1`,
		`SELECT * FROM trellis._batch_buckets ORDER BY 1, 2`,
		`SELECT * FROM trellis._page_failures`,
		`SELECT * FROM trellis._deferred`,
		`SELECT count(*) FROM trellis._change_log`,
		`SELECT * FROM trellis._workers`,
		`SELECT pid, usename, state, wait_event_type, wait_event, left(query, 200) FROM pg_stat_activity WHERE datname = current_database()`,
	} {
		rows, err := s.su.Query(context.Background(), q)
		if err != nil {
			t.Logf("%s: %v", q, err)
			continue
		}
		t.Logf("== %s", q)
		for rows.Next() {
			vals, _ := rows.Values()
			t.Logf("  %v", vals)
		}
		rows.Close()
	}
}

// malHeld waits until mallory's status says what holds her transform.
func (s *isoTenants) malHeld(t *testing.T, target string) {
	t.Helper()
	eventually(t, 30*time.Second, "mallory's status names what holds her transform", func() bool {
		var problem string
		err := s.mal.QueryRow(context.Background(), `SELECT coalesce(problem, '') FROM trellis.status WHERE target = $1`, target).Scan(&problem)
		return err == nil && problem != ""
	})
}

// refusedThenAdmin runs stmt as mallory, which the first wall (targets
// and ledgers owned by the workers' role) must refuse with 42501, then as
// the superuser, so the second wall is tested too: whatever then fails on
// her tables (or pauses her transform) holds her transform only.
func (s *isoTenants) refusedThenAdmin(t *testing.T, stmt string) {
	t.Helper()
	if _, err := s.mal.Exec(context.Background(), stmt); isoCode(err) != "42501" {
		t.Fatalf("mallory's %s: %v, want 42501", stmt, err)
	}
	mustExec(t, s.su, stmt)
}

func isoCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestIsoStallRaisingTrigger(t *testing.T) { eachWorkers(t, isoStallRaisingTrigger) }

func isoStallRaisingTrigger(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc SELECT v + 1 AS w`, "iso_mt")
	mustExec(t, s.mal, `CREATE FUNCTION iso_boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'iso-secret-% of mallory', NEW.w; END $$`)
	s.refusedThenAdmin(t, `CREATE TRIGGER iso_boom BEFORE INSERT OR UPDATE ON iso_mt FOR EACH ROW EXECUTE FUNCTION iso_boom()`)
	s.victimConverges(t, `UPDATE iso_msrc SET v = v + 1`, "iso-secret")
	s.malHeld(t, "iso_mt")
}

func TestIsoStallAliasField(t *testing.T) { eachWorkers(t, isoStallAliasField) }

func isoStallAliasField(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc SELECT v AS t, v + 1 AS excluded`, "iso_mt")
	s.victimConverges(t, `UPDATE iso_msrc SET v = v + 1`, "")
	// The aliases are the engine's own: her fields are applied as any other.
	if _, err := s.mal.Exec(context.Background(), `SELECT trellis.await_converged(trellis.watermark_token(), 5000)`); err != nil {
		t.Fatalf("fields named t and excluded: %v", err)
	}
	if !sameAs(t, s.mal, `SELECT id, t, excluded FROM iso_mt`, `SELECT id, v, v + 1 FROM iso_msrc`) {
		t.Fatal("mallory's target differs from its definition")
	}
}

func TestIsoStallHugeValue(t *testing.T) { eachWorkers(t, isoStallHugeValue) }

func isoStallHugeValue(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc SELECT repeat('x', v::int) AS w`, "iso_mt")
	s.victimConverges(t, `UPDATE iso_msrc SET v = 1100000000 WHERE id = 1`, "")
	s.malHeld(t, "iso_mt")
}

func TestIsoStallLockedTarget(t *testing.T) { eachWorkers(t, isoStallLockedTarget) }

func isoStallLockedTarget(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc SELECT v + 1 AS w`, "iso_mt")
	ctx := context.Background()
	for _, q := range []string{`LOCK TABLE iso_mt IN ACCESS EXCLUSIVE MODE`, `SELECT 1 FROM iso_mt FOR UPDATE`} {
		if _, err := s.mal.Exec(ctx, `BEGIN; `+q+`; COMMIT`); isoCode(err) != "42501" {
			t.Fatalf("mallory's %s: %v, want 42501", q, err)
		}
		s.mal.Exec(ctx, `ROLLBACK`)
	}
	// Second wall: the lock held by a role that may take it holds her
	// transform only.
	tx, err := s.su.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE iso_mt IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	s.victimConverges(t, `UPDATE iso_msrc SET v = v + 1`, "")
	// Her lock ends: her transform catches up by itself.
	tx.Rollback(ctx)
	if _, err := s.mal.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 60000)`); err != nil {
		t.Fatalf("mallory's transform after her lock ended: %v", err)
	}
	if !sameAs(t, s.mal, `SELECT id, w FROM iso_mt`, `SELECT id, v + 1 FROM iso_msrc`) {
		t.Fatal("mallory's target differs from its definition")
	}
}

func TestIsoStallDroppedLedger(t *testing.T) { eachWorkers(t, isoStallDroppedLedger) }

func isoStallDroppedLedger(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc GROUP BY v SELECT v AS v, COUNT(*) AS n`, "iso_mt")
	s.refusedThenAdmin(t, `DROP TABLE "iso_mt__ledger"`)
	s.victimConverges(t, `UPDATE iso_msrc SET v = v + 1`, "")
}

func TestIsoPoisonedKeyAwait(t *testing.T) { eachWorkers(t, isoPoisonedKeyAwait) }

func isoPoisonedKeyAwait(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc SELECT 100 / v AS q`, "iso_mt")
	ctx := context.Background()
	mustExec(t, s.mal, `UPDATE iso_msrc SET v = 0 WHERE id = 1`)
	eventually(t, 60*time.Second, "mallory's key held", func() bool {
		var n int
		err := s.h.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._poison`).Scan(&n)
		return err == nil && n > 0
	})
	mustExec(t, s.victim, `UPDATE iso_vsrc SET v = v + 1`)
	if _, err := s.victim.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 5000)`); err != nil {
		t.Fatalf("mallory's held key fails the victim's await_converged: %v", err)
	}
	var ok bool
	if err := s.victim.QueryRow(ctx, `SELECT trellis.converged(trellis.watermark_token())`).Scan(&ok); err != nil || !ok {
		t.Fatalf("trellis.converged for the victim: %v %v", ok, err)
	}
	// Her own wait still reports the held key.
	var mine bool
	if err := s.mal.QueryRow(ctx, `SELECT trellis.try_await_converged(trellis.watermark_token(), 300)`).Scan(&mine); err != nil || mine {
		t.Fatalf("mallory's own wait over her held key: %v %v", mine, err)
	}
}

// stagingAlive checks that the staging worker still brings a new
// transform of the victim's live and keeps its writes converging.
func (s *isoTenants) stagingAlive(t *testing.T, target string) {
	t.Helper()
	ctx := context.Background()
	mustExec(t, s.victim, `TRANSFORM `+target+` FROM iso_vsrc SELECT v + 3 AS w3`)
	var live string
	if err := s.victim.QueryRow(ctx, `SELECT trellis.await_live($1, 20000)`, target).Scan(&live); err != nil {
		t.Fatalf("the staging worker no longer brings a new transform live: %v", err)
	}
	s.victimConverges(t, `SELECT 1`, "")
}

func TestIsoTempTargetRefused(t *testing.T) { eachWorkers(t, isoTempTargetRefused) }

func isoTempTargetRefused(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	ctx := context.Background()
	_, err := s.mal.Exec(ctx, `TRANSFORM pg_temp.iso_tt FROM iso_msrc SELECT v AS w`)
	if err == nil {
		t.Fatal("a target in pg_temp was accepted")
	}
	if pe := pgErrOf(t, err); pe.Code == "" || pe.Code == "XX000" {
		t.Fatalf("pg_temp target: %s %s", pe.Code, pe.Message)
	}
	s.stagingAlive(t, "iso_vt2")
}

func TestIsoTargetDroppedInDefiningTransaction(t *testing.T) {
	eachWorkers(t, isoTargetDroppedInDefiningTransaction)
}

func isoTargetDroppedInDefiningTransaction(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	ctx := context.Background()
	// First wall: she cannot drop a target, which the workers' role owns.
	tx, err := s.mal.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `TRANSFORM iso_gone FROM iso_msrc SELECT v AS w`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DROP TABLE iso_gone`); isoCode(err) != "42501" {
		t.Fatalf("mallory's DROP TABLE of her target: %v, want 42501", err)
	}
	tx.Rollback(ctx)
	// Second wall: a superuser's drop in the defining transaction leaves a
	// definition without a target; it holds only itself.
	if tx, err = s.su.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `TRANSFORM iso_gone FROM iso_msrc SELECT v AS w`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DROP TABLE iso_gone`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s.stagingAlive(t, "iso_vt2")
	// The definition can still be removed by name.
	mustExec(t, s.su, `PAUSE TRANSFORM iso_gone`)
	mustExec(t, s.su, `DROP TRANSFORM iso_gone`)
	s.stagingAlive(t, "iso_vt3")
}

func TestIsoStallRule(t *testing.T) { eachWorkers(t, isoStallRule) }

func isoStallRule(t *testing.T, h *trellisHarness) {
	s := isoSetup(t, h)
	s.malTransform(t, `TRANSFORM iso_mt FROM iso_msrc SELECT v + 1 AS w`, "iso_mt")
	// An INSERT rule makes every INSERT ... ON CONFLICT into her target fail.
	s.refusedThenAdmin(t, `CREATE RULE iso_rule AS ON INSERT TO iso_mt DO ALSO NOTIFY iso_rule`)
	s.victimConverges(t, `UPDATE iso_msrc SET v = v + 1`, "")
	s.malHeld(t, "iso_mt")
}
