package integration

// Hostile role vs Trellis's locks and liveness (issue 14 items 8 and 10):
// lock_mallory has only CONNECT and CREATE on public and connects directly
// to Postgres. She takes the advisory keys she can compute and forges a
// worker's application_name; she must not keep a proxy from starting, make
// /readyz or trellis.fleet report her as the staging worker, run
// trellis.migrate(), or make /metrics fail.

import (
	"context"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

// lockKey is the engine's advisory key of a name: what any role that has
// read the source can compute. The engine's own function, so the test
// takes the keys the engine uses, not a copy of their derivation.
func lockKey(name string) int64 { return base.LockKey(name) }

// lockMallory creates lock_mallory (cluster-wide, once) with CONNECT on db
// and CREATE on its public schema, and connects her directly to db.
func lockMallory(t *testing.T, db, appName string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	admin := connectURL(t, pgcluster.ForTest(t).URL(db))
	if _, err := admin.Exec(ctx, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'lock_mallory')
		THEN CREATE ROLE lock_mallory LOGIN; END IF; END $$`); err != nil {
		t.Fatal(err)
	}
	execAll(t, admin, "GRANT CONNECT ON DATABASE "+db+" TO lock_mallory", "GRANT CREATE ON SCHEMA public TO lock_mallory")
	u, err := url.Parse(pgcluster.ForTest(t).URL(db))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User("lock_mallory")
	q := u.Query()
	if appName != "" {
		q.Set("application_name", appName)
	}
	u.RawQuery = q.Encode()
	return connectURL(t, u.String())
}

// eachObsWorkers runs body on a fresh database once with the proxies'
// workers connecting as the cluster's superuser and once as the ordinary
// role of the least-privilege deployment (CREATE on the database only).
func eachObsWorkers(t *testing.T, body func(t *testing.T, db string, workers func(*proxy.Config))) {
	t.Run("workers=superuser", func(t *testing.T) { body(t, obsDB(t), func(*proxy.Config) {}) })
	t.Run("workers=ordinary", func(t *testing.T) {
		db := obsDB(t)
		admin := connectURL(t, pgcluster.ForTest(t).URL(db))
		execAll(t, admin,
			`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+ordinaryWorkers+`') THEN CREATE ROLE `+ordinaryWorkers+` LOGIN; END IF; END $$`,
			`GRANT CREATE ON DATABASE `+pgx.Identifier{db}.Sanitize()+` TO `+ordinaryWorkers)
		u, err := url.Parse(pgcluster.ForTest(t).URL(db))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(ordinaryWorkers)
		body(t, db, func(c *proxy.Config) { c.Upstream = u.String() })
	})
}

// lockTenant creates the ordinary role lock_tenant, whose tables the
// workers may capture (they are a member of it), and returns its name.
func lockTenant(t *testing.T, db string) string {
	t.Helper()
	admin := connectURL(t, pgcluster.ForTest(t).URL(db))
	execAll(t, admin,
		`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'lock_tenant') THEN CREATE ROLE lock_tenant LOGIN; END IF; END $$`,
		`GRANT CREATE ON SCHEMA public TO lock_tenant`,
		`DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+ordinaryWorkers+`') THEN GRANT lock_tenant TO `+ordinaryWorkers+`; END IF; END $$`)
	return "lock_tenant"
}

// lockNoRoleGained checks that mallory is still an ordinary role.
func lockNoRoleGained(t *testing.T, db string) {
	t.Helper()
	admin := connectURL(t, pgcluster.ForTest(t).URL(db))
	var super, createrole bool
	if err := admin.QueryRow(context.Background(), "SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = 'lock_mallory'").
		Scan(&super, &createrole); err != nil || super || createrole {
		t.Fatalf("lock_mallory gained a role attribute: super=%v createrole=%v %v", super, createrole, err)
	}
}

// Mallory holds the migrate key: a second proxy still starts and migrates,
// and trellis.migrate() through it works for the workers' role.
func TestLockMigrateKeyHeld(t *testing.T) { eachObsWorkers(t, lockMigrateKeyHeld) }

func lockMigrateKeyHeld(t *testing.T, db string, workers func(*proxy.Config)) {
	a := startObs(t, db, "lock-a", workers)
	waitReady(t, a)
	m := lockMallory(t, db, "")
	ctx := context.Background()
	if _, err := m.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey("trellis-migrate")); err != nil {
		t.Fatal(err)
	}
	// On the base commit this start hangs in Migrate behind her key.
	b := startObs(t, db, "lock-b", func(c *proxy.Config) { workers(c); c.Staging = "off" })
	c := connectURL(t, b.url("postgres", "", db, ""))
	var report string
	if err := c.QueryRow(ctx, "SELECT trellis.migrate()").Scan(&report); err != nil {
		t.Fatalf("trellis.migrate() while lock_mallory held the migrate key: %v", err)
	}
	lockNoRoleGained(t, db)
}

// Mallory reads the staging key in pg_locks while a staging worker holds
// it, and takes it the moment that worker's session ends, under a staging
// worker's application_name (the key derived from the schema name, which
// earlier versions used, too). /readyz and trellis.fleet must not count her
// as the staging worker, and a standby must replace the key and become the
// staging worker: her lock must not stop every transform's progress.
func TestLockStagingKeyTaken(t *testing.T) { eachObsWorkers(t, lockStagingKeyTaken) }

func lockStagingKeyTaken(t *testing.T, db string, workers func(*proxy.Config)) {
	a := startObs(t, db, "lock-a", workers)
	waitReady(t, a)
	m := lockMallory(t, db, "trellis-staging lock-a")
	ctx := context.Background()
	var held int64
	if err := m.QueryRow(ctx, `SELECT (l.classid::int8 << 32) | l.objid::int8 FROM pg_locks l JOIN pg_stat_activity s ON s.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND s.application_name LIKE 'trellis-staging%' LIMIT 1`).Scan(&held); err != nil {
		t.Fatalf("reading the held staging key in pg_locks: %v", err)
	}
	a.stop()
	var got bool
	eventually(t, 30*time.Second, "lock_mallory to take the freed staging key", func() bool {
		if err := m.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", held).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	})
	if _, err := m.Exec(ctx, "SELECT pg_try_advisory_lock($1)", lockKey("trellis-staging:trellis")); err != nil {
		t.Fatal(err)
	}
	c := connectURL(t, pgcluster.ForTest(t).URL(db))
	var holders int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM trellis._staging_holder()").Scan(&holders); err != nil || holders != 0 {
		t.Fatalf("_staging_holder() lists %d holders (%v) with only lock_mallory holding the key", holders, err)
	}
	b := startObs(t, db, "lock-b", workers)
	eventually(t, 30*time.Second, "lock-b to become the staging worker", func() bool {
		code, _ := httpGet(t, b, "/readyz")
		return code == 200
	})
	pc := connectURL(t, b.url(lockTenant(t, db), "", db, ""))
	mustExec(t, pc, `CREATE TABLE lock_src (id int PRIMARY KEY, v int)`)
	mustExec(t, pc, `INSERT INTO lock_src SELECT g, g FROM generate_series(1, 10) g`)
	mustExec(t, pc, `TRANSFORM lock_t FROM lock_src SELECT v + 1 AS w`)
	var status string
	if err := pc.QueryRow(ctx, `SELECT trellis.await_live('lock_t', 30000)`).Scan(&status); err != nil {
		t.Fatalf("a transform while lock_mallory holds the old staging key: %v", err)
	}
	var live bool
	if err := pc.QueryRow(ctx, "SELECT trellis.has_live_staging_worker()").Scan(&live); err != nil || !live {
		t.Fatalf("has_live_staging_worker() = %v (%v)", live, err)
	}
	lockNoRoleGained(t, db)
}

// trellis.migrate() runs as the workers: an ordinary role may not call it.
func TestLockMigrateRefusedToTenant(t *testing.T) {
	db := obsDB(t)
	a := startObs(t, db, "lock-a", nil)
	waitReady(t, a)
	lockMallory(t, db, "")
	c := connectURL(t, a.url("lock_mallory", "", db, ""))
	var report string
	err := c.QueryRow(context.Background(), "SELECT trellis.migrate()").Scan(&report)
	if pe := pgErrOf(t, err); pe.Code != "42501" {
		t.Fatalf("trellis.migrate() as lock_mallory: %s %s", pe.Code, pe.Message)
	}
	lockNoRoleGained(t, db)
}

// One bare name in two schemas: the second TRANSFORM is refused (bare
// names resolve PAUSE, ALTER and release_key, so they are unique), and
// /metrics answers with the first under its bare name. The labels would
// qualify both names for a catalog holding two from before that rule.
func TestLockMetricsSameNameTwoSchemas(t *testing.T) {
	db := obsDB(t)
	a := startObs(t, db, "lock-a", nil)
	waitReady(t, a)
	c := connectURL(t, a.url("postgres", "", db, ""))
	execAll(t, c,
		"CREATE SCHEMA lock_s2",
		"CREATE TABLE public.lock_src (id int PRIMARY KEY, v int)",
		"CREATE TABLE lock_s2.lock_src (id int PRIMARY KEY, v int)",
		"TRANSFORM public.lock_dup FROM public.lock_src SELECT v AS w",
	)
	_, err := c.Exec(context.Background(), "TRANSFORM lock_s2.lock_dup FROM lock_s2.lock_src SELECT v AS w")
	if pe := pgErrOf(t, err); pe.Code != "42710" {
		t.Fatalf("a second lock_dup: %s %s", pe.Code, pe.Message)
	}
	eventually(t, 30*time.Second, "/metrics to list lock_dup", func() bool {
		code, body := httpGet(t, a, "/metrics")
		return code == 200 && strings.Contains(body, `transform="lock_dup"`)
	})
}

// await_live and metrics_text answer lock_mallory only about transforms she
// may see: the victim's does not exist for her, her own does.
func TestLockObservationScoped(t *testing.T) {
	db := obsDB(t)
	a := startObs(t, db, "lock-a", nil)
	waitReady(t, a)
	ctx := context.Background()
	victim := connectURL(t, a.url("postgres", "", db, ""))
	execAll(t, victim,
		"CREATE TABLE lock_vsrc (id int PRIMARY KEY, v int)",
		"INSERT INTO lock_vsrc SELECT g, g FROM generate_series(1, 10) g",
		"TRANSFORM lock_victim FROM lock_vsrc SELECT v AS w",
	)
	var st string
	if err := victim.QueryRow(ctx, "SELECT trellis.await_live('lock_victim', 30000)").Scan(&st); err != nil {
		t.Fatal(err)
	}
	lockMallory(t, db, "")
	m := connectURL(t, a.url("lock_mallory", "", db, ""))
	execAll(t, m,
		"CREATE TABLE lock_msrc (id int PRIMARY KEY, v int)",
		"TRANSFORM lock_mine FROM lock_msrc SELECT v AS w",
	)
	if err := m.QueryRow(ctx, "SELECT trellis.await_live('lock_mine', 30000)").Scan(&st); err != nil {
		t.Fatalf("await_live of her own transform: %v", err)
	}
	err := m.QueryRow(ctx, "SELECT trellis.await_live('lock_victim', 1000)").Scan(&st)
	if pe := pgErrOf(t, err); pe.Code != "42704" {
		t.Fatalf("await_live('lock_victim') as lock_mallory: %s %s", pe.Code, pe.Message)
	}
	eventually(t, 30*time.Second, "metrics_text to list lock_mine", func() bool {
		var text string
		if err := m.QueryRow(ctx, "SELECT trellis.metrics_text()").Scan(&text); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, `transform="lock_victim"`) {
			t.Fatalf("metrics_text() shows lock_mallory the victim's transform")
		}
		return strings.Contains(text, `transform="lock_mine"`)
	})
	var n int
	if err := m.QueryRow(ctx, "SELECT count(*) FROM trellis.status WHERE target = 'lock_victim'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("trellis.status shows lock_mallory %d rows of the victim's transform (%v)", n, err)
	}
	lockNoRoleGained(t, db)
}

// fenceKey is the advisory key earlier versions used as a definition's
// fence (the class derived from the schema name, the id's low 31 bits):
// any role could compute it.
func fenceKey(schema string, id int64) (int32, int32) {
	h := fnv.New32a()
	h.Write([]byte("trellis-definition-fence:" + schema))
	return int32(h.Sum32()), int32(id & 0x7fffffff)
}

// Mallory tries to take another role's transform's fence: by the advisory
// key earlier versions used, by locking the fence relation, and through the
// catalog function that takes it. None may hold it, and the victim's
// transform keeps converging with no keys left deferred.
func TestLockFenceUnforgeable(t *testing.T) { eachWorkers(t, lockFenceUnforgeable) }

func lockFenceUnforgeable(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	su := h.owner(t)
	mustExec(t, su, `CREATE TABLE lock_fsrc (id int PRIMARY KEY, a int)`)
	mustExec(t, su, `INSERT INTO lock_fsrc SELECT g, g FROM generate_series(1, 50) g`)
	mustExec(t, su, `TRANSFORM lock_fvictim FROM lock_fsrc SELECT a * 3 AS b`)
	h.waitStatus(t, "lock_fvictim", "live")
	var id int64
	if err := h.pool.QueryRow(ctx, `SELECT id FROM trellis._definitions WHERE target_table = 'public.lock_fvictim'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	m := execMallory(t, h)
	class, obj := fenceKey("trellis", id)
	if _, err := m.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, class, obj); err != nil {
		t.Fatal(err)
	}
	tx, err := m.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE trellis_fence.d`+strconv.FormatInt(id, 10)+` IN ACCESS EXCLUSIVE MODE`); err == nil || sqlstate(err) != "42501" {
		t.Errorf("LOCK TABLE of the fence: want 42501, got %v", err)
	}
	tx.Rollback(ctx)
	if _, err := m.Exec(ctx, `SELECT trellis._fence_definition($1)`, id); err == nil || sqlstate(err) != "42501" {
		t.Errorf("_fence_definition: want 42501, got %v", err)
	}
	mustExec(t, su, `UPDATE lock_fsrc SET a = a + 1`)
	mustExec(t, su, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	h.sameAs(t, su, `SELECT id, b FROM lock_fvictim`, `SELECT id, a * 3 FROM lock_fsrc`)
	var deferred int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM trellis._deferred WHERE definition_id = $1`, id).Scan(&deferred); err != nil || deferred != 0 {
		t.Fatalf("%d keys of the victim deferred (%v)", deferred, err)
	}
	// The owner's own lifecycle statements still take the fence.
	mustExec(t, su, `PAUSE TRANSFORM lock_fvictim`)
	mustExec(t, su, `RESUME TRANSFORM lock_fvictim`)
	h.waitStatus(t, "lock_fvictim", "live")
	execAssertNothingGained(t, h)
}

// Mallory leaves a PAUSE of her own transform in an open transaction (it
// holds that transform's fence) and renames a column of her source, which
// the staging worker must pause her transform for. The staging worker must
// not wait for her transaction: the victim's writes keep converging and a
// new transform of the victim's goes live while hers stays open.
func TestLockStagingNeverWaitsForTenantTransaction(t *testing.T) {
	eachWorkers(t, lockStagingNeverWaitsForTenantTransaction)
}

func lockStagingNeverWaitsForTenantTransaction(t *testing.T, h *trellisHarness) {
	ctx := context.Background()
	m, mp, su := lockTenants(t, h, "lock_msrc", "lock_vsrc", "lock_vt")
	mustExec(t, mp, `TRANSFORM lock_mt FROM public.lock_msrc SELECT a + 1 AS b`)
	h.waitStatus(t, "lock_mt", "live")
	mustExec(t, mp, `BEGIN`)
	mustExec(t, mp, `PAUSE TRANSFORM lock_mt`)
	defer mp.Exec(ctx, `ROLLBACK`)
	mustExec(t, m, `ALTER TABLE public.lock_msrc RENAME COLUMN a TO a_renamed`)
	time.Sleep(500 * time.Millisecond) // a few staging passes meet her open transaction
	h.victimConverges(t, su, "lock_vsrc", "lock_vt", 30000, "mallory holds PAUSE open after a rename")
	mustExec(t, su, `TRANSFORM lock_vt2 FROM lock_vsrc SELECT a - 1 AS c`)
	var status string
	if err := su.QueryRow(ctx, `SELECT trellis.await_live('lock_vt2', 30000)`).Scan(&status); err != nil {
		t.Fatalf("a new transform while mallory's transaction is open: %v", err)
	}
	// Once she ends it, her transform is paused for the rename.
	mustExec(t, mp, `ROLLBACK`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _ := execStatus(t, h, "lock_mt")
		if st == "paused" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock_mt is %s after the rename, want paused", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A tenant's open transaction on her own transform cannot stall the
// staging worker's verification of it (D21): she defines a transform (a
// row the workers must verify) and, before they do, holds PAUSE TRANSFORM
// in a transaction she keeps open. The staging worker must leave her row
// for a later pass rather than wait for her lock: the victim's writes keep
// converging and a new transform of the victim's still goes live. Once she
// ends the transaction her row is verified and her transform builds.
//
// The ALTER variant holds the row through ALTER TRANSFORM instead. When
// the staging worker verifies the row before her statement takes it (a
// race she usually wins), the run says so and exercises nothing.
func TestLockVerifyNeverWaitsForTenantTransaction(t *testing.T) {
	eachHold(t, []string{"PAUSE TRANSFORM lock_vmt", "ALTER TRANSFORM lock_vmt ADD a * 3 AS c"}, lockVerifyNeverWaits)
}

func lockVerifyNeverWaits(t *testing.T, h *trellisHarness, hold string) {
	ctx := context.Background()
	_, mp, su := lockTenants(t, h, "lock_vmsrc", "lock_vvsrc", "lock_vvt")
	// Define, then at once hold the row in an open transaction: the
	// staging worker meets the row unverified and locked.
	mustExec(t, mp, `TRANSFORM lock_vmt FROM public.lock_vmsrc SELECT a + 1 AS b`)
	mustExec(t, mp, `BEGIN`)
	mustExec(t, mp, hold)
	defer mp.Exec(ctx, `ROLLBACK`)
	var verified bool
	if err := h.pool.QueryRow(ctx, `SELECT verified FROM trellis._definitions WHERE target_table = 'public.lock_vmt'`).Scan(&verified); err != nil {
		t.Fatal(err)
	}
	if verified {
		t.Log("the staging worker verified her row before her PAUSE took it; the wait below is not exercised this run")
	}
	time.Sleep(500 * time.Millisecond) // a few staging passes meet her open transaction
	h.victimConverges(t, su, "lock_vvsrc", "lock_vvt", 10000, "mallory holds her unverified transform")
	mustExec(t, su, `TRANSFORM lock_vvt2 FROM lock_vvsrc SELECT a - 1 AS c`)
	var status string
	if err := su.QueryRow(ctx, `SELECT trellis.await_live('lock_vvt2', 10000)`).Scan(&status); err != nil {
		t.Fatalf("a new transform while mallory's transaction is open: %v", err)
	}
	// She ends it: her row is verified and her transform goes live.
	mustExec(t, mp, `ROLLBACK`)
	h.waitStatus(t, "lock_vmt", "live")
}

// A tenant's open transaction cannot stall the staging worker's rewrite
// check (D21): she rewrites her own captured table behind capture's back
// (VACUUM FULL, which fires no trigger) and at once holds, in a
// transaction she keeps open, either a TRUNCATE of it (capture's truncate
// trigger then holds the table's bookkeeping row) or a PAUSE of her
// transform (its definition row). The rewrite check must leave her table
// for a later pass rather than wait: the victim's writes keep converging.
// Once she ends the transaction her transform is rebuilt or paused as
// usual.
func TestLockRewriteCheckNeverWaitsForTenantTransaction(t *testing.T) {
	eachHold(t, []string{"TRUNCATE public.lock_rmsrc", "PAUSE TRANSFORM lock_rmt"}, lockRewriteCheckNeverWaits)
}

func lockRewriteCheckNeverWaits(t *testing.T, h *trellisHarness, hold string) {
	ctx := context.Background()
	_, mp, su := lockTenants(t, h, "lock_rmsrc", "lock_rvsrc", "lock_rvt")
	mustExec(t, mp, `TRANSFORM lock_rmt FROM public.lock_rmsrc SELECT a + 1 AS b`)
	h.waitStatus(t, "lock_rmt", "live")
	mustExec(t, mp, `VACUUM FULL public.lock_rmsrc`)
	mustExec(t, mp, `BEGIN`)
	mustExec(t, mp, hold)
	defer mp.Exec(ctx, `ROLLBACK`)
	time.Sleep(500 * time.Millisecond) // a few staging passes meet her open transaction
	h.victimConverges(t, su, "lock_rvsrc", "lock_rvt", 10000, "mallory holds "+hold+" open after a rewrite")
	// She ends it: the rewrite check rebuilds her transform.
	mustExec(t, mp, `ROLLBACK`)
	h.waitStatus(t, "lock_rmt", "live")
	h.sameAs(t, mp, `SELECT id, b FROM lock_rmt`, `SELECT id, a + 1 FROM public.lock_rmsrc`)
}

// lockTenants sets up two roles for a lock test: mallory (exec_mallory)
// with her table public.<msrc>(id, a) of 20 rows, connected directly (m)
// and through the proxy (mp), and the victim (the owner's role, su) with
// <vsrc>(id, a) of 20 rows and its transform <vt> (a * 2 AS b) live.
func lockTenants(t *testing.T, h *trellisHarness, msrc, vsrc, vt string) (m, mp, su *pgx.Conn) {
	t.Helper()
	m = execMallory(t, h)
	mustExec(t, m, `CREATE TABLE public.`+msrc+` (id int PRIMARY KEY, a int)`)
	mustExec(t, m, `INSERT INTO public.`+msrc+` SELECT g, g FROM generate_series(1, 20) g`)
	mp = connectURL(t, h.url("exec_mallory", "", h.db, ""))
	su = h.owner(t)
	mustExec(t, su, `CREATE TABLE `+vsrc+` (id int PRIMARY KEY, a int)`)
	mustExec(t, su, `INSERT INTO `+vsrc+` SELECT g, g FROM generate_series(1, 20) g`)
	mustExec(t, su, `TRANSFORM `+vt+` FROM `+vsrc+` SELECT a * 2 AS b`)
	h.waitStatus(t, vt, "live")
	return m, mp, su
}

// victimConverges writes the victim's source and checks that the write
// converges within timeoutMS and its target is exact, while what stays
// as it is.
func (h *trellisHarness) victimConverges(t *testing.T, su *pgx.Conn, vsrc, vt string, timeoutMS int, what string) {
	t.Helper()
	mustExec(t, su, `UPDATE `+vsrc+` SET a = a + 1`)
	if _, err := su.Exec(context.Background(), `SELECT trellis.await_converged(trellis.watermark_token(), $1)`, timeoutMS); err != nil {
		t.Fatalf("the victim's write while %s: %v", what, err)
	}
	h.sameAs(t, su, `SELECT id, b FROM `+vt, `SELECT id, a * 2 FROM `+vsrc)
}

// eachHold runs body for each statement mallory holds open, named by its
// first word, with both workers' roles.
func eachHold(t *testing.T, holds []string, body func(t *testing.T, h *trellisHarness, hold string)) {
	for _, hold := range holds {
		t.Run(strings.Fields(hold)[0], func(t *testing.T) {
			eachWorkers(t, func(t *testing.T, h *trellisHarness) { body(t, h, hold) })
		})
	}
}

// A tenant self-checks her own transform (she owns the transform, the
// workers own its target), and a self-check started in a transaction she
// keeps open holds her transform's row, not the staging worker: she
// defines a transform and at once starts a self-check of it in an open
// transaction, so the staging worker meets her row unverified and locked
// at every pass: it is never seen blocked by her backend (each pass that
// waited for her row would cost every role PageLockTimeout, 2 s), the
// victim's writes converge, and her transform builds once she ends it.
func TestLockSelfCheckStartNeverStallsStaging(t *testing.T) {
	eachWorkers(t, func(t *testing.T, h *trellisHarness) {
		ctx := context.Background()
		_, mp, su := lockTenants(t, h, "lock_smsrc", "lock_svsrc", "lock_svt")
		mustExec(t, mp, `TRANSFORM lock_smt FROM public.lock_smsrc SELECT a + 1 AS b`)
		var her int32
		if err := mp.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&her); err != nil {
			t.Fatal(err)
		}
		mustExec(t, mp, `BEGIN`)
		mustExec(t, mp, `SELECT id FROM trellis.self_check('lock_smt', 0)`)
		defer mp.Exec(ctx, `ROLLBACK`)
		// Sampled for a second: the staging session is never blocked by her.
		for range 40 {
			var blocked int
			if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name LIKE 'trellis-staging%' AND $1 = ANY (pg_blocking_pids(pid))`, her).Scan(&blocked); err != nil {
				t.Fatal(err)
			}
			if blocked > 0 {
				t.Fatal("the staging worker waits for mallory's open self-check start")
			}
			time.Sleep(25 * time.Millisecond)
		}
		h.victimConverges(t, su, "lock_svsrc", "lock_svt", 10000, "mallory holds a self-check start open")
		mustExec(t, mp, `ROLLBACK`)
		h.waitStatus(t, "lock_smt", "live")
	})
}
