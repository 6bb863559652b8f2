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
	eachWorkersMember(t, nil, body)
}

// eachWorkersMember is eachWorkers for a body that makes the ordinary
// workers a member of roles: the harness grants those before the workers
// connect, and the body's own GRANTs (tenant, catalogSetup) then find the
// membership and change nothing.
//
// A membership granted while the workers run can stay unseen by one of
// their sessions for good. PostgreSQL caches a session's role memberships
// (acl.c, roles_is_member_of) and, when a GRANT commits while the session is
// computing that list, absorbs the GRANT's invalidation at a syscache miss
// in the middle of the computation (opening pg_authid for another role's
// rolinherit) and then caches the list it read before the GRANT. Until some
// role changes again, every check on the new role's tables fails there with
// 42501: catalogSetup granted cat_victim_owner while the staging worker was
// checking its privileges on exec_mallory's new table, and its long-lived
// session then refused LOCK TABLE cat_victim_src for the whole wait.
func eachWorkersMember(t *testing.T, members []string, body func(t *testing.T, h *trellisHarness)) {
	for _, w := range []struct{ name, role string }{{"superuser", ""}, {"ordinary", ordinaryWorkers}} {
		t.Run("workers="+w.name, func(t *testing.T) {
			var m []string
			if w.role != "" {
				m = members
			}
			body(t, startTrellisOpts(t, w.role, m, false))
		})
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
