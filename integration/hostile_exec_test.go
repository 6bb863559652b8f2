package integration

// Issue 14, items 3-5: the workers' execution environment. An ordinary
// role (CREATE on public, nothing else) plants objects that name
// resolution, key types or row security would make the workers run or
// read; each test asserts she gained nothing.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// execMallory creates the ordinary role exec_mallory with CREATE on public
// and a trap table any role may insert into, and returns her direct
// connection to the harness's database.
func execMallory(t *testing.T, h *trellisHarness) *pgx.Conn {
	t.Helper()
	h.tenant(t, "exec_mallory")
	m := execConnectAs(t, h.db, "exec_mallory")
	mustExec(t, m, `CREATE TABLE public.exec_trap (who text, at timestamptz DEFAULT now())`)
	mustExec(t, m, `GRANT INSERT ON public.exec_trap TO PUBLIC`)
	return m
}

// execTrap opens the body of a planted PL/pgSQL function: it records who
// ran it and tries to make exec_mallory a superuser (which succeeds when
// the caller is one).
const execTrap = `BEGIN
  INSERT INTO public.exec_trap (who) VALUES (current_user);
  BEGIN
    EXECUTE 'ALTER ROLE exec_mallory SUPERUSER';
  EXCEPTION WHEN insufficient_privilege THEN NULL;
  END;
`

// execAssertNothingGained fails if exec_mallory became a superuser or a
// trap of hers ran.
func execAssertNothingGained(t *testing.T, h *trellisHarness) {
	t.Helper()
	admin := execConnectAs(t, h.db, "postgres")
	var super bool
	if err := admin.QueryRow(context.Background(), `SELECT rolsuper FROM pg_roles WHERE rolname = 'exec_mallory'`).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Error("exec_mallory became a superuser")
	}
	var ran int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM public.exec_trap`).Scan(&ran); err != nil {
		t.Fatal(err)
	}
	if ran > 0 {
		t.Errorf("exec_mallory's planted code ran %d times as another role", ran)
	}
}

// A public.unnest(text[]) is an exact match for the drains' unnest of a
// text[] parameter, so under the default search_path it beat
// pg_catalog.unnest(anyarray) and ran as the workers while they drained
// another role's write. Run with a superuser workers' role (the embedded
// default) and with an ordinary one (a least-privilege deployment).
func TestExecShadowingFunctionNeverRunsAsWorkers(t *testing.T) {
	eachWorkers(t, execShadowingFunction)
}

func execShadowingFunction(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	m := execMallory(t, h)
	mustExec(t, m, `CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS $f$
`+execTrap+`  RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x;
END $f$`)
	// Exact matches for calls a TRANSFORM's define-time queries make in the
	// defining client's own session: they would run as the victim.
	mustExec(t, m, `CREATE FUNCTION public.format(f text, a text, b text) RETURNS text LANGUAGE plpgsql AS $f$
`+execTrap+`  RETURN pg_catalog.format(f, a, b);
END $f$`)
	mustExec(t, m, `CREATE FUNCTION public.unnest(a int2[]) RETURNS SETOF int2 LANGUAGE plpgsql AS $f$
`+execTrap+`  RETURN QUERY SELECT x FROM pg_catalog.unnest(a) x;
END $f$`)
	mustExec(t, m, `GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO PUBLIC`)
	// The victim is a role of its own, whose tables the workers may
	// capture (a member of its role, as docs/security.md asks).
	h.tenant(t, "exec_victim")
	c := connectURL(t, h.url("exec_victim", "", h.db, ""))
	mustExec(t, c, `CREATE TABLE exec_victim_src (id bigint PRIMARY KEY, a int)`)
	mustExec(t, c, `INSERT INTO exec_victim_src SELECT g, g FROM generate_series(1, 50) g`)
	mustExec(t, c, `TRANSFORM exec_victim_t FROM exec_victim_src SELECT a + 1 AS b`)
	mustExec(t, c, `TRANSFORM exec_victim_g FROM exec_victim_src GROUP BY a SELECT COUNT(*) AS n`)
	for _, target := range []string{"exec_victim_t", "exec_victim_g"} {
		var live string
		if err := c.QueryRow(ctx, `SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil {
			t.Fatal(err)
		}
	}
	mustExec(t, c, `UPDATE exec_victim_src SET a = a + 100 WHERE id <= 20`)
	mustExec(t, c, `DELETE FROM exec_victim_src WHERE id > 45`)
	mustExec(t, c, `INSERT INTO exec_victim_src VALUES (1000, 7)`)
	if _, err := c.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	h.sameAs(t, c, `SELECT id, b FROM exec_victim_t`, `SELECT id, a + 1 FROM exec_victim_src`)
	h.sameAs(t, c, `SELECT a, n FROM exec_victim_g`, `SELECT a, count(*) FROM exec_victim_src GROUP BY a`)
	execAssertNothingGained(t, h)
}

// The same with a user operator: public.= on (bigint, bigint) is an exact
// match for key comparisons of a bigint key and must never be selected.
func TestExecShadowingOperatorNeverRunsAsWorkers(t *testing.T) {
	eachWorkers(t, execShadowingOperator)
}

func execShadowingOperator(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	m := execMallory(t, h)
	mustExec(t, m, `CREATE FUNCTION public.exec_eq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO public.exec_trap (who) VALUES (current_user);
  RETURN a OPERATOR(pg_catalog.=) b;
END $f$`)
	mustExec(t, m, `CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.exec_eq)`)
	c := h.owner(t)
	mustExec(t, c, `CREATE TABLE exec_victim_src (id text PRIMARY KEY, a int)`)
	mustExec(t, c, `INSERT INTO exec_victim_src SELECT g::text, g FROM generate_series(1, 50) g`)
	mustExec(t, c, `TRANSFORM exec_victim_t FROM exec_victim_src SELECT a * 2 AS b`)
	var live string
	if err := c.QueryRow(ctx, `SELECT trellis.await_live('exec_victim_t', 60000)`).Scan(&live); err != nil {
		t.Fatal(err)
	}
	mustExec(t, c, `UPDATE exec_victim_src SET a = a + 1`)
	if _, err := c.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	// The harness's own comparison runs as the superuser with public in
	// its path: clear the trap first, then compare with pg_catalog's =.
	mustExec(t, c, `SET search_path = pg_catalog, public`)
	h.sameAs(t, c, `SELECT id, b FROM public.exec_victim_t`, `SELECT id, a * 2 FROM public.exec_victim_src`)
	execAssertNothingGained(t, h)
}

// execConnectAs connects to db directly (not through the proxy) as role;
// the test cluster trusts local connections.
func execConnectAs(t *testing.T, db, role string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgcluster.ForTest(t).URL(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, ""
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// Key types carry code: a domain's CHECK, an enum's or a user type's I/O
// functions run wherever the workers cast or render a key. Such keys are
// refused at define, naming the column and type.
func TestExecUserKeyTypesRefused(t *testing.T) {
	eachWorkers(t, execUserKeyTypes)
}

func execUserKeyTypes(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	m := execMallory(t, h)
	mustExec(t, m, `CREATE FUNCTION public.exec_check(v int) RETURNS boolean LANGUAGE plpgsql AS $f$
`+execTrap+`  RETURN true;
END $f$`)
	mustExec(t, m, `CREATE DOMAIN public.exec_kd AS int CHECK (public.exec_check(VALUE))`)
	mustExec(t, m, `CREATE TYPE public.exec_mood AS ENUM ('calm', 'angry')`)
	mustExec(t, m, `CREATE TABLE exec_dom (id public.exec_kd PRIMARY KEY, a int)`)
	mustExec(t, m, `CREATE TABLE exec_enum (id public.exec_mood PRIMARY KEY, a int)`)
	mustExec(t, m, `CREATE TABLE exec_arr (id int[] PRIMARY KEY, a int)`)
	mustExec(t, m, `CREATE TABLE exec_grp (id int PRIMARY KEY, mood public.exec_mood, d public.exec_kd, f float8)`)
	mustExec(t, m, `TRUNCATE public.exec_trap`)
	mc := connectURL(t, h.url("exec_mallory", "", h.db, ""))
	for _, c := range []struct{ stmt, variant string }{
		{`TRANSFORM exec_t1 FROM exec_dom SELECT a + 1 AS b`, "UnsupportedPrimaryKeyType"},
		{`TRANSFORM exec_t2 FROM exec_enum SELECT a + 1 AS b`, "UnsupportedPrimaryKeyType"},
		{`TRANSFORM exec_t3 FROM exec_arr SELECT a + 1 AS b`, "UnsupportedPrimaryKeyType"},
		{`TRANSFORM exec_t4 FROM exec_grp GROUP BY mood SELECT COUNT(*) AS n`, "UnsupportedGroupByKeyType"},
	} {
		_, err := mc.Exec(ctx, c.stmt)
		if err == nil {
			t.Errorf("%s: accepted, want %s", c.stmt, c.variant)
			continue
		}
		pe := pgErrOf(t, err)
		if pe.Code != "0A000" || !strings.Contains(pe.Detail, c.variant) || pe.Hint == "" {
			t.Errorf("%s: %s %q detail %q hint %q, want 0A000 %s", c.stmt, pe.Code, pe.Message, pe.Detail, pe.Hint, c.variant)
		}
	}
	// A domain GROUP BY key is read as its base type (the wire describes
	// it so, and the target and ledger store that type): no cast to the
	// domain, so its CHECK never runs, and it is accepted.
	mustExec(t, mc, `TRANSFORM exec_by_d FROM exec_grp GROUP BY d SELECT COUNT(*) AS n`)
	// A built-in key still works for her.
	mustExec(t, mc, `TRANSFORM exec_ok FROM exec_grp SELECT f * 2 AS f2`)
	for _, target := range []string{"exec_ok", "exec_by_d"} {
		var live string
		if err := mc.QueryRow(ctx, `SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil {
			t.Fatal(err)
		}
	}
	// Her own inserts run her domain CHECK as herself, which is fine: clear
	// the trap, then let the workers drain them.
	mustExec(t, mc, `INSERT INTO exec_grp SELECT g, 'calm', g % 3, g FROM generate_series(1, 30) g`)
	mustExec(t, m, `TRUNCATE public.exec_trap`)
	if _, err := mc.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	h.sameAs(t, mc, `SELECT d::int, n FROM exec_by_d`, `SELECT d::int, count(*) FROM exec_grp GROUP BY d`)
	execAssertNothingGained(t, h)
}

// execStatus reads a transform's status and capture_failure error from
// the catalog (as the workers' role).
func execStatus(t *testing.T, h *trellisHarness, target string) (status, failure string) {
	t.Helper()
	err := h.pool.QueryRow(context.Background(), `SELECT status, coalesce(status_detail #>> '{capture_failure,error}', '')
		FROM trellis._definitions WHERE target_table = 'public.' || $1`, target).Scan(&status, &failure)
	if err != nil {
		t.Fatal(err)
	}
	return status, failure
}

// Row security on a source applies to its readers; the workers read with
// it off. A source whose policies apply to the defining role is refused,
// and one that gains them after define, or whose owner loses SELECT,
// pauses its transforms before another row flows.
func TestExecRowSecurityAndRevocation(t *testing.T) {
	eachWorkers(t, execRowSecurityAndRevocation)
}

func execRowSecurityAndRevocation(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	execMallory(t, h)
	c := h.owner(t)
	mustExec(t, c, `CREATE TABLE exec_secret (id bigint PRIMARY KEY, tenant text, v int)`)
	mustExec(t, c, `INSERT INTO exec_secret SELECT g, CASE WHEN g % 2 = 0 THEN 'exec_mallory' ELSE 'other' END, g FROM generate_series(1, 20) g`)
	mustExec(t, c, `GRANT SELECT ON exec_secret TO exec_mallory`)
	mustExec(t, c, `CREATE TABLE exec_rls (id bigint PRIMARY KEY, tenant text, v int)`)
	mustExec(t, c, `INSERT INTO exec_rls SELECT id, tenant, v FROM exec_secret`)
	mustExec(t, c, `GRANT SELECT ON exec_rls TO exec_mallory`)
	mustExec(t, c, `ALTER TABLE exec_rls ENABLE ROW LEVEL SECURITY`)
	mustExec(t, c, `CREATE POLICY exec_own ON exec_rls FOR SELECT USING (tenant = current_user)`)
	mc := connectURL(t, h.url("exec_mallory", "", h.db, ""))

	_, err := mc.Exec(ctx, `TRANSFORM exec_rls_copy FROM exec_rls SELECT v AS v`)
	if err == nil {
		t.Fatal("a source under row security was accepted")
	}
	if pe := pgErrOf(t, err); pe.Code != "0A000" || !strings.Contains(pe.Detail, "SourceHasRowSecurity") {
		t.Fatalf("row security: %s %s %s", pe.Code, pe.Message, pe.Detail)
	}

	mustExec(t, mc, `TRANSFORM exec_copy FROM exec_secret SELECT v AS v`)
	mustExec(t, mc, `TRANSFORM exec_copy2 FROM exec_secret SELECT v * 2 AS v2`)
	for _, target := range []string{"exec_copy", "exec_copy2"} {
		var live string
		if err := mc.QueryRow(ctx, `SELECT trellis.await_live($1, 60000)`, target).Scan(&live); err != nil {
			t.Fatal(err)
		}
	}
	// Revoked: paused, and no row written after the REVOKE reaches her.
	mustExec(t, c, `REVOKE SELECT ON exec_secret FROM exec_mallory`)
	eventually(t, 30*time.Second, "exec_copy paused after the REVOKE", func() bool {
		st, f := execStatus(t, h, "exec_copy")
		return st == "paused" && strings.Contains(f, "may no longer read")
	})
	mustExec(t, c, `INSERT INTO exec_secret VALUES (1000, 'other', 424242)`)
	mustExec(t, c, `UPDATE exec_secret SET v = -v WHERE id = 1`)
	if _, err := c.Exec(ctx, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`); err != nil {
		t.Fatal(err)
	}
	var leaked int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM exec_copy WHERE v IN (424242, -1)`).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked != 0 {
		t.Fatalf("%d rows written after the REVOKE reached exec_copy", leaked)
	}
	// RESUME as her is refused while she cannot read the source.
	if _, err := mc.Exec(ctx, `RESUME TRANSFORM exec_copy`); err == nil {
		t.Fatal("RESUME without SELECT was accepted")
	}
	// Granted again, then row security turned on: paused again.
	mustExec(t, c, `GRANT SELECT ON exec_secret TO exec_mallory`)
	mustExec(t, mc, `RESUME TRANSFORM exec_copy`)
	if st, _ := execStatus(t, h, "exec_copy2"); st != "paused" {
		t.Fatalf("exec_copy2 is %s after the REVOKE", st)
	}
	mustExec(t, mc, `RESUME TRANSFORM exec_copy2`)
	mustExec(t, c, `ALTER TABLE exec_secret ENABLE ROW LEVEL SECURITY`)
	mustExec(t, c, `CREATE POLICY exec_own ON exec_secret FOR SELECT USING (tenant = current_user)`)
	eventually(t, 30*time.Second, "exec_copy paused under row security", func() bool {
		st, f := execStatus(t, h, "exec_copy")
		return st == "paused" && strings.Contains(f, "row level security")
	})
}
