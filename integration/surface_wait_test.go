package integration

import (
	"context"
	"strings"
	"testing"
)

// The proxy's refusal to wait in a transaction with captured writes
// (surface §3.3) asks the engine's catalog function, not the change log: an
// ordinary role, which cannot read storage, gets the refusal and, without
// such writes, the wait.
func TestSurfaceAwaitInTransactionOrdinaryRole(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	su := h.client(t)
	mustExec(t, su, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'waiter') THEN CREATE ROLE waiter LOGIN; END IF; END $$`)
	mustExec(t, su, `GRANT CREATE ON SCHEMA public TO waiter`)
	w := connectURL(t, h.url("waiter", "", h.db, ""))
	mustExec(t, w, `CREATE TABLE waited (id int PRIMARY KEY, v int)`)
	mustExec(t, w, `INSERT INTO waited VALUES (1, 1)`)
	mustExec(t, w, `TRANSFORM waited_x FROM waited SELECT v * 2 AS x`)
	var status string
	if err := w.QueryRow(ctx, `SELECT trellis.await_live('waited_x', 60000)`).Scan(&status); err != nil {
		t.Fatal(err)
	}

	mustExec(t, w, `BEGIN`)
	mustExec(t, w, `SELECT trellis.await_converged(pg_current_wal_insert_lsn()::text, 60000)`)
	mustExec(t, w, `INSERT INTO waited VALUES (2, 2)`)
	_, err := w.Exec(ctx, `SELECT trellis.await_converged(pg_current_wal_insert_lsn()::text, 60000)`)
	pe := pgErrOf(t, err)
	if pe.Code != "25001" || !strings.Contains(pe.Message, "written to captured tables") {
		t.Fatalf("wait after a captured write in the block: %s %s", pe.Code, pe.Message)
	}
	mustExec(t, w, `ROLLBACK`)
}
