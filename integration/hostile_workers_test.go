package integration

// The hostile suites run twice: with the workers connecting as the
// cluster's superuser (the embedded default) and as an ordinary role with
// CREATE on the database only (the least-privilege deployment of
// docs/security.md). An attack must gain nothing either way.

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// ordinaryWorkers is the workers' role of the least-privilege variant.
const ordinaryWorkers = "hostile_workers"

// eachWorkers runs body once per workers' role, each on a fresh harness.
func eachWorkers(t *testing.T, body func(t *testing.T, h *trellisHarness)) {
	for _, w := range []struct{ name, role string }{{"superuser", ""}, {"ordinary", ordinaryWorkers}} {
		t.Run("workers="+w.name, func(t *testing.T) { body(t, startTrellisWorkers(t, w.role)) })
	}
}

// tenant creates role (a login, never a superuser) with CREATE on public.
// With an ordinary workers' role it also makes the workers a member of it,
// which capturing its tables needs (docs/security.md, "Roles").
func (h *trellisHarness) tenant(t *testing.T, role string) {
	t.Helper()
	admin := execConnectAs(t, h.db, "postgres")
	r := pgx.Identifier{role}.Sanitize()
	mustExec(t, admin, `DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+role+`') THEN CREATE ROLE `+r+` LOGIN; END IF; END $$`)
	mustExec(t, admin, `ALTER ROLE `+r+` NOSUPERUSER`)
	mustExec(t, admin, `GRANT CREATE ON SCHEMA public TO `+r)
	if h.workers != "" {
		mustExec(t, admin, `GRANT `+r+` TO `+pgx.Identifier{h.workers}.Sanitize())
	}
}

// owner connects through the proxy as the role that owns the victim's
// tables: the superuser when the workers are one (as these tests were
// first written), otherwise the ordinary role hostile_owner, since a
// least-privilege deployment's application does not own its tables as a
// superuser.
func (h *trellisHarness) owner(t *testing.T) *pgx.Conn {
	t.Helper()
	if h.workers == "" {
		return h.client(t)
	}
	h.tenant(t, "hostile_owner")
	return connectURL(t, h.url("hostile_owner", "", h.db, ""))
}
