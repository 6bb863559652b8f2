package integration

// Issue 14, item 2 and D21: catalog rows are untrusted input. The catalog
// functions _define and _lifecycle_alter are callable by any role over a
// direct connection, and store the statement text and compiled form the
// caller hands them. An ordinary role crafts both; the workers must compile
// from the statement they re-parse, never run her SQL fragments, and the
// dump must never carry her text to an administrator's replay.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// catalogSetup gives exec_mallory a source and a live transform of her own,
// defined through the proxy as a user would, and a victim's transform
// beside it. It returns mallory's direct connection and her definition's id.
func catalogSetup(t *testing.T, h *trellisHarness, workers string) (*pgx.Conn, int64) {
	t.Helper()
	ctx := context.Background()
	m := execMallory(t, h)
	if workers != "" {
		// The workers capture her table's changes (docs/security.md).
		mustExec(t, h.client(t), `GRANT exec_mallory TO `+pgx.Identifier{workers}.Sanitize())
	}
	mustExec(t, m, `CREATE TABLE public.cat_src (id int PRIMARY KEY, v text)`)
	mustExec(t, m, `INSERT INTO public.cat_src SELECT g, 'v' || g FROM generate_series(1, 20) g`)
	viaProxy := connectURL(t, h.url("exec_mallory", "", h.db, ""))
	mustExec(t, viaProxy, `TRANSFORM cat_t FROM public.cat_src SELECT upper(v) AS w`)
	su := h.client(t)
	mustExec(t, su, `CREATE TABLE public.cat_victim_src (id int PRIMARY KEY, a int)`)
	mustExec(t, su, `INSERT INTO public.cat_victim_src SELECT g, g FROM generate_series(1, 20) g`)
	if workers != "" {
		mustExec(t, su, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'cat_victim_owner') THEN CREATE ROLE cat_victim_owner; END IF; END $$`)
		mustExec(t, su, `ALTER TABLE public.cat_victim_src OWNER TO cat_victim_owner`)
		mustExec(t, su, `GRANT cat_victim_owner TO `+pgx.Identifier{workers}.Sanitize())
	}
	mustExec(t, su, `TRANSFORM cat_victim FROM public.cat_victim_src SELECT a * 2 AS b`)
	h.waitStatus(t, "cat_t", "live")
	h.waitStatus(t, "cat_victim", "live")
	var id int64
	if err := h.pool.QueryRow(ctx, `SELECT id FROM trellis._definitions WHERE target_table = 'public.cat_t'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return m, id
}

// catalogSecret is what a crafted field expression tries to read: the
// password hashes of pg_authid and a server file.
const catalogSecret = `(SELECT pg_catalog.string_agg(rolname || ':' || coalesce(rolpassword, ''), ',') FROM pg_catalog.pg_authid) || pg_catalog.pg_read_file('PG_VERSION')`

// catalogAssertNothingLeaked fails if mallory's target holds a role name
// (pg_authid), or her transform was not paused by the workers, and checks
// that the victim's transform still converges.
func catalogAssertNothingLeaked(t *testing.T, h *trellisHarness, target string) {
	t.Helper()
	ctx := context.Background()
	// Given the time to run her SQL (a rebuild, a page), or to be paused.
	deadline := time.Now().Add(20 * time.Second)
	status, failure := execStatus(t, h, target)
	for !(status == "paused" && strings.Contains(failure, "does not match its statement")) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		status, failure = execStatus(t, h, target)
	}
	var leaked int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM public.`+pgx.Identifier{target}.Sanitize()+
		` t WHERE t::text LIKE '%postgres%' OR t::text LIKE '%exec_mallory%'`).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked > 0 {
		t.Errorf("%d rows of %s carry pg_authid's contents", leaked, target)
	}
	if status != "paused" || !strings.Contains(failure, "does not match its statement") {
		t.Errorf("%s: status %q (%q), want paused: its catalog row does not match its statement", target, status, failure)
	}
	su := h.client(t)
	mustExec(t, su, `UPDATE public.cat_victim_src SET a = a + 1`)
	mustExec(t, su, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	h.sameAs(t, su, `SELECT id, b FROM public.cat_victim`, `SELECT id, a * 2 FROM public.cat_victim_src`)
	execAssertNothingGained(t, h)
}

// A crafted compiled form through _lifecycle_alter: her live transform's
// field is made to read pg_authid, and a rebuild requested.
func TestCatalogCraftedAlterNeverRuns(t *testing.T) { eachWorkers(t, catalogCraftedAlter) }

func catalogCraftedAlter(t *testing.T, h *trellisHarness) {
	m, id := catalogSetup(t, h, h.workers)
	ctx := context.Background()
	var stmt, compiled, reads string
	if err := h.pool.QueryRow(ctx, `SELECT d.definition_sql, jsonb_set(d.compiled, '{spec,fields,0,expr}', to_jsonb($2::text))::text, r.columns::text
		FROM trellis._definitions d JOIN trellis._definition_reads r ON r.definition_id = d.id WHERE d.id = $1`, id, catalogSecret).
		Scan(&stmt, &compiled, &reads); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, `SELECT trellis._lifecycle_alter('exec_mallory'::regrole, $1, $2, $3::jsonb, $4::jsonb, '{}', '{w}')`, id, stmt, compiled, reads)
	mustExec(t, m, `UPDATE public.cat_src SET v = v || '!'`)
	catalogAssertNothingLeaked(t, h, "cat_t")
}

// A crafted compiled form through _define: a new transform whose stored
// statement is harmless and whose compiled field reads pg_authid.
func TestCatalogCraftedDefineNeverRuns(t *testing.T) { eachWorkers(t, catalogCraftedDefine) }

func catalogCraftedDefine(t *testing.T, h *trellisHarness) {
	m, id := catalogSetup(t, h, h.workers)
	ctx := context.Background()
	var stmt, compiled string
	if err := h.pool.QueryRow(ctx, `SELECT replace(d.definition_sql, 'cat_t', 'cat_evil'),
		  jsonb_set(jsonb_set(jsonb_set(d.compiled, '{spec,fields,0,expr}', to_jsonb($2::text)),
		    '{spec,target,name}', '"cat_evil"'), '{target_text}', '"public.cat_evil"')::text
		FROM trellis._definitions d WHERE d.id = $1`, id, catalogSecret).Scan(&stmt, &compiled); err != nil {
		t.Fatal(err)
	}
	target := `{"cols":[{"n":"id","t":23,"m":-1,"nn":true},{"n":"w","t":25,"m":-1}],"pk":["id"]}`
	ledger := `{"cols":[{"n":"k","t":25,"m":-1,"nn":true}],"pk":["k"]}`
	mustExec(t, m, `SELECT trellis._define('exec_mallory'::regrole, 'public', 'cat_evil', $1::jsonb, $2::jsonb, 'one_to_one',
		'public.cat_src', 'public.cat_src'::regclass, $3, $4::jsonb, '["v"]', 'source', NULL)`, target, ledger, stmt, compiled)
	mustExec(t, m, `SELECT pg_notify('trellis_wake', 'define')`)
	catalogAssertNothingLeaked(t, h, "cat_evil")
}

// Statement text with a second statement after the TRANSFORM: the dump
// must not hand it to an administrator, whose replay would run it.
func TestCatalogCraftedStatementNeverDumped(t *testing.T) { eachWorkers(t, catalogCraftedStatement) }

func catalogCraftedStatement(t *testing.T, h *trellisHarness) {
	m, id := catalogSetup(t, h, h.workers)
	ctx := context.Background()
	var stmt, compiled, reads string
	if err := h.pool.QueryRow(ctx, `SELECT d.definition_sql || '; ALTER ROLE exec_mallory SUPERUSER', d.compiled::text, r.columns::text
		FROM trellis._definitions d JOIN trellis._definition_reads r ON r.definition_id = d.id WHERE d.id = $1`, id).
		Scan(&stmt, &compiled, &reads); err != nil {
		t.Fatal(err)
	}
	mustExec(t, m, `SELECT trellis._lifecycle_alter('exec_mallory'::regrole, $1, $2, $3::jsonb, $4::jsonb, '{}', '{}')`, id, stmt, compiled, reads)
	su := h.client(t)
	var dump string
	if err := su.QueryRow(ctx, `SELECT trellis.dump_definitions_sql()`).Scan(&dump); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dump, "ALTER ROLE") {
		t.Errorf("the dump carries mallory's statement:\n%s", dump)
	}
	catalogAssertNothingLeaked(t, h, "cat_t")
	// The administrator's replay (through the proxy, as documented) of the
	// dump into an instance without its transforms: it recreates the
	// victim's and runs nothing of mallory's.
	for _, target := range []string{"cat_t", "cat_victim"} {
		mustExec(t, su, `PAUSE TRANSFORM `+target)
		mustExec(t, su, `DROP TRANSFORM `+target)
	}
	if _, err := su.Exec(ctx, dump, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("replaying the dump: %v\n%s", err, dump)
	}
	h.waitStatus(t, "cat_victim", "live")
	var replayed int
	if err := su.QueryRow(ctx, `SELECT count(*) FROM trellis.status WHERE target = 'cat_t'`).Scan(&replayed); err != nil || replayed != 0 {
		t.Errorf("the replay recreated mallory's transform %d times (%v)", replayed, err)
	}
	execAssertNothingGained(t, h)
}

// JOIN targets (issue 16) through crafted catalog calls: a compiled form
// that joins the victim's table under a statement that joins nothing is
// paused, never run; naming the victim's table as a joined read is refused
// by _define for want of SELECT on it.
func TestCatalogCraftedJoinNeverReads(t *testing.T) { eachWorkers(t, catalogCraftedJoin) }

func catalogCraftedJoin(t *testing.T, h *trellisHarness) {
	m, id := catalogSetup(t, h, h.workers)
	ctx := context.Background()
	join := `[{"table": {"schema": "public", "name": "cat_victim_src"}, "parent": 0, "columns": ["id"], "parent_columns": ["id"],
		"text": "public.cat_victim_src", "key": [{"name": "id", "type": "integer", "full_type": "integer"}]}]`
	var stmt, compiled string
	if err := h.pool.QueryRow(ctx, `SELECT replace(d.definition_sql, 'cat_t', 'cat_evil_join'),
		  jsonb_set(jsonb_set(jsonb_set(jsonb_set(d.compiled, '{spec,fields,0,expr}', to_jsonb('("__j1"."a")::text'::text)),
		    '{spec,joins}', $2::jsonb), '{spec,target,name}', '"cat_evil_join"'), '{target_text}', '"public.cat_evil_join"')::text
		FROM trellis._definitions d WHERE d.id = $1`, id, join).Scan(&stmt, &compiled); err != nil {
		t.Fatal(err)
	}
	target := `{"cols":[{"n":"id","t":23,"m":-1,"nn":true},{"n":"w","t":25,"m":-1}],"pk":["id"]}`
	ledger := `{"cols":[{"n":"k","t":25,"m":-1,"nn":true}],"pk":["k"]}`
	// Naming the victim's table as a read: refused, she may not SELECT it.
	_, err := m.Exec(ctx, `SELECT trellis._define('exec_mallory'::regrole, 'public', 'cat_evil_join', $1::jsonb, $2::jsonb, 'one_to_one',
		'public.cat_src', 'public.cat_src'::regclass, $3, $4::jsonb, '["v"]', 'source',
		jsonb_build_array(jsonb_build_object('table', 'public.cat_victim_src', 'oid', 'public.cat_victim_src'::regclass::oid, 'columns', '["id", "a"]'::jsonb)))`,
		target, ledger, stmt, compiled)
	if pe := pgErrOf(t, err); pe.Code != "42501" || !strings.Contains(pe.Detail, "MissingPrivilege") {
		t.Fatalf("joined read of the victim's table: %s %s %q", pe.Code, pe.Message, pe.Detail)
	}
	// Not naming it: recorded, but the workers compile her statement, which
	// joins nothing, and pause the row that does not match it.
	mustExec(t, m, `SELECT trellis._define('exec_mallory'::regrole, 'public', 'cat_evil_join', $1::jsonb, $2::jsonb, 'one_to_one',
		'public.cat_src', 'public.cat_src'::regclass, $3, $4::jsonb, '["v"]', 'source', NULL)`, target, ledger, stmt, compiled)
	mustExec(t, m, `SELECT pg_notify('trellis_wake', 'define')`)
	deadline := time.Now().Add(20 * time.Second)
	status, failure := execStatus(t, h, "cat_evil_join")
	for !(status == "paused" && strings.Contains(failure, "does not match its statement")) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		status, failure = execStatus(t, h, "cat_evil_join")
	}
	if status != "paused" || !strings.Contains(failure, "does not match its statement") {
		t.Fatalf("crafted join: status %q (%q), want paused", status, failure)
	}
	var leaked int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM public.cat_evil_join WHERE w ~ '^[0-9]+$'`).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked > 0 {
		t.Fatalf("%d rows of the victim's table reached her target", leaked)
	}
	execAssertNothingGained(t, h)
}
