package intercept

import (
	"context"
	"strconv"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// setLockTimeout lowers the transaction's lock_timeout to want (in ms) for
// one Trellis statement, unless the session's own value is already shorter
// (surface §13); it returns the value in force before and whether it
// changed. set_config(..., true) is SET LOCAL: it ends with the transaction
// and is undone by a rollback past it, so a failed statement leaves nothing.
// A bare interval literal reads every unit lock_timeout is shown in
// (0, 100ms, 30s, 1min, 1h, 1d).
const setLockTimeout = `SELECT s.old, set_config('lock_timeout', s.eff, true), s.eff <> s.old
FROM (SELECT l.old, CASE WHEN l.old::interval > interval '0' AND l.old::interval <= $1::int8 * interval '1 ms'
                         THEN l.old ELSE $1::int8 || 'ms' END AS eff
      FROM (SELECT current_setting('lock_timeout') AS old OFFSET 0) l) s`

// underLockTimeout runs one Trellis statement (fn) with its lock waits
// bounded by --lock-timeout or the session's shorter lock_timeout, and gives
// the session back the value it had. The restore is skipped when the
// proxy's own COMMIT follows (keep is false): the setting ends with it.
func (x *execution) underLockTimeout(ctx context.Context, what string, pos int, keep bool, fn func() error) error {
	want := x.i.cfg.LockTimeout
	if want <= 0 {
		return fn()
	}
	res, err := x.up.Query(ctx, setLockTimeout, strconv.FormatInt(max(want.Milliseconds(), 1), 10))
	if err != nil {
		return err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 3 {
		return pgerr.New(pgerr.InternalError, "setting lock_timeout returned no row")
	}
	old, eff, changed := string(res.Rows[0][0]), string(res.Rows[0][1]), string(res.Rows[0][2]) == "t"
	if err := fn(); err != nil {
		return lockTimedOut(err, what, eff, pos)
	}
	if !changed || !keep {
		return nil
	}
	// A local value equal to the one in force: what the session shows and
	// what COMMIT or ROLLBACK leave are the client's own again.
	_, err = x.up.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", old)
	return err
}

// lockTimedOut turns a lock wait the timeout ended into an error that says
// which statement gave up and what to do.
func lockTimedOut(err error, what, eff string, pos int) error {
	pe, ok := pgerr.As(err)
	if !ok || pe.Code != pgerr.LockNotAvailable || pe.Variant != "" {
		return err
	}
	out := pgerr.Newf(pgerr.LockNotAvailable, "%s gave up waiting for a lock after lock_timeout %s; nothing it did was kept", what, eff).
		WithClass("timeout", "LockTimeout").WithDetail("%s", pe.Message).
		WithHint("another session holds a lock on a table or transform this statement needs (pg_locks, pg_stat_activity); retry when that transaction ends, or raise --lock-timeout (or the session's lock_timeout)")
	out.Position = pos
	if pos == 0 {
		out.Position = pe.Position
	}
	out.Err = pe
	return out
}
