package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
)

// Locks a tenant cannot take (D21, docs/security.md "Locks and liveness").
//
// Advisory locks have no privileges: any role that can connect takes any
// key, and pg_locks shows every held key to every role, so neither a
// predictable nor a secret-derived key keeps a tenant out (she reads the key
// from pg_locks while a worker holds it). A relation lock is checked: LOCK
// TABLE needs UPDATE/DELETE/TRUNCATE on the table for the modes above ROW
// EXCLUSIVE. What a role may take on a table it has no privilege on is
// what parsing a statement takes before the executor checks privileges
// (ACCESS SHARE, ROW SHARE, ROW EXCLUSIVE, held to the end of her
// transaction by PREPARE), and ACCESS SHARE through pg_relation_size(oid).
// SHARE UPDATE EXCLUSIVE conflicts with itself and with none of those, so
// it is a mutex only the catalog's owner can hold.

// SetLockTimeout bounds the lock waits of the rest of tx.
func SetLockTimeout(ctx context.Context, tx pgx.Tx, d time.Duration) error {
	_, err := tx.Exec(ctx, LockTimeoutSQL(d))
	return err
}

// LockTimeoutSQL is SetLockTimeout's statement, for a caller that sends it
// with others in one round trip.
func LockTimeoutSQL(d time.Duration) string {
	return fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", d.Milliseconds())
}

// LeftForLater reports whether a staging step's failure is a lock wait
// cut short (or another transient error) on a healthy session: the step
// is left for a later pass rather than waited for (D21).
func LeftForLater(ctx context.Context, conn *pgx.Conn, err error) bool {
	return err != nil && base.Transient(err) && !conn.IsClosed() && ctx.Err() == nil
}

func IsLockTimeout(err error) bool {
	return base.Code(err) == "55P03"
}
