package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
)

// A PostgreSQL session can keep a stale cache of its role memberships: a
// GRANT to the workers that commits while a worker session is rebuilding
// the cache is missed by that session until some later role change (the
// cause of a CI failure, engine/worker/denied.go). The race itself needs a
// debugger to hit on purpose; these tests pin what the engine does about
// it: a worker refused a privilege never reuses its session, so once the
// privilege is there, work resumes on a fresh backend.

// deniedSetup creates public.<table>, owned by the NOLOGIN role owner, and
// returns the superuser's direct connection to the harness's database.
func deniedSetup(t *testing.T, h *trellisHarness, owner, table string) *pgx.Conn {
	t.Helper()
	admin := execConnectAs(t, h.db, "postgres")
	mustExec(t, admin, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+owner+`') THEN CREATE ROLE `+owner+`; END IF; END $$`)
	mustExec(t, admin, `CREATE TABLE public.`+table+` (id int PRIMARY KEY, a int)`)
	mustExec(t, admin, `INSERT INTO public.`+table+` SELECT g, g FROM generate_series(1, 20) g`)
	mustExec(t, admin, `ALTER TABLE public.`+table+` OWNER TO `+owner)
	mustExec(t, admin, `GRANT CREATE ON SCHEMA public TO `+ordinaryWorkers) // the targets
	return admin
}

// A drain page whose share is refused SELECT on the source closes its
// connection instead of returning it to the pool.
func TestDeniedPageReplacesItsSession(t *testing.T) {
	h := startTrellisWorkers(t, ordinaryWorkers)
	admin := deniedSetup(t, h, "denied_page_owner", "denied_page_src")
	mustExec(t, admin, `GRANT denied_page_owner TO `+ordinaryWorkers)
	su := h.client(t)
	mustExec(t, su, `TRANSFORM denied_page_t FROM public.denied_page_src SELECT a * 2 AS b`)
	h.waitStatus(t, "denied_page_t", "live")
	mustExec(t, su, `UPDATE public.denied_page_src SET a = a + 1 WHERE id = 1`)
	mustExec(t, su, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	before := pgcluster.Backends(t, admin, h.db, "trellis-worker ")
	if len(before) == 0 {
		t.Fatal("no worker sessions in pg_stat_activity")
	}

	mustExec(t, admin, `REVOKE denied_page_owner FROM `+ordinaryWorkers)
	mustExec(t, admin, `UPDATE public.denied_page_src SET a = a + 1 WHERE id = 2`)
	eventually(t, 30*time.Second, "a worker session refused a privilege to be replaced", func() bool {
		now := pgcluster.Backends(t, admin, h.db, "trellis-worker ")
		for _, pid := range before {
			if !slices.Contains(now, pid) {
				return true
			}
		}
		return false
	})

	mustExec(t, admin, `GRANT denied_page_owner TO `+ordinaryWorkers)
	var status string
	if err := h.pool.QueryRow(context.Background(), `SELECT status FROM trellis._definitions
		WHERE target_table = 'public.denied_page_t'`).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status == "paused" { // its held pages' failures may have paused it
		mustExec(t, su, `RESUME TRANSFORM denied_page_t`)
	}
	h.waitStatus(t, "denied_page_t", "live")
	mustExec(t, su, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	h.sameAs(t, su, `SELECT id, b FROM public.denied_page_t`, `SELECT id, a * 2 FROM public.denied_page_src`)
}

// A capture install refused a privilege ends the staging session, so the
// next install runs on a fresh backend (once: a second refusal within
// worker.RefreshDenied keeps the session); once the privilege is granted
// the transform goes live.
func TestDeniedInstallRenewsStagingSession(t *testing.T) {
	h := startTrellisWorkers(t, ordinaryWorkers)
	admin := deniedSetup(t, h, "denied_install_owner", "denied_install_src")
	var staging []int32
	eventually(t, 30*time.Second, "the staging session", func() bool {
		staging = pgcluster.Backends(t, admin, h.db, "trellis-staging ")
		return len(staging) == 1
	})
	// Defined while the workers may capture the table, and refused in the
	// same transaction: the install, after the commit, is refused.
	mustExec(t, admin, `GRANT denied_install_owner TO `+ordinaryWorkers)
	su := h.client(t)
	tx, err := su.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx.Conn(), `TRANSFORM denied_install_t FROM public.denied_install_src SELECT a * 2 AS b`)
	mustExec(t, tx.Conn(), `REVOKE denied_install_owner FROM `+ordinaryWorkers)
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the staging session to be renewed after its install was refused", func() bool {
		now := pgcluster.Backends(t, admin, h.db, "trellis-staging ")
		return len(now) == 1 && now[0] != staging[0]
	})
	mustExec(t, admin, `GRANT denied_install_owner TO `+ordinaryWorkers)
	h.waitStatus(t, "denied_install_t", "live")
	mustExec(t, admin, `UPDATE public.denied_install_src SET a = a + 1`)
	mustExec(t, su, `SELECT trellis.await_converged(trellis.watermark_token(), 30000)`)
	h.sameAs(t, su, `SELECT id, b FROM public.denied_install_t`, `SELECT id, a * 2 FROM public.denied_install_src`)
}
