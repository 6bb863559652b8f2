package worker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Privilege errors and stale sessions.
//
// A PostgreSQL session caches the roles its user is a member of, and can
// keep a stale list: roles_is_member_of reads pg_auth_members, then opens
// pg_authid, which takes in pending cache invalidations; when a GRANT of a
// role to the workers commits in that gap, its invalidation is consumed
// mid-build and the list read before it is saved as current. That session
// then fails with 42501 on the granted role's tables until some later role
// change, while every new session sees the grant (found in CI:
// integration TestCatalogCraftedAlterNeverRuns, a victim's capture install
// refused for 60 s; reproduced with gdb holding the backend in the gap).
//
// So a worker session refused a privilege is not trusted again. Every
// workers' session carries deniedTracer, which marks the session when any
// of its statements fails with 42501, even one the worker handled (a
// definition's share of a page held for it alone). A marked pool
// connection is destroyed when next acquired (WatchDenials), so the retry
// runs on a fresh backend; a marked staging session is ended by
// the staging worker, at most once per RefreshDenied, so a privilege
// really missing costs one reconnect a minute, not one a pass.

// RefreshDenied bounds how often the staging session is renewed after a
// privilege error.
const RefreshDenied = time.Minute

// StagingSessionLifetime bounds how long one staging session lives. The
// cache can go stale the other way too (a REVOKE landing mid-rebuild
// leaves a membership the workers no longer have), and nothing refused
// then tells: pool connections are recycled hourly by pgxpool's default
// MaxConnLifetime, and the staging session, which would otherwise live as
// long as the process, is renewed as often.
const StagingSessionLifetime = time.Hour

// Denied reports whether err is a privilege error (42501).
func Denied(err error) bool { return base.Code(err) == pgerr.InsufficientPrivilege }

const deniedMark = "trellis.denied"

// deniedTracer marks a session one of whose statements was refused a
// privilege.
type deniedTracer struct{}

func (deniedTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (deniedTracer) TraceQueryEnd(_ context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil && Denied(data.Err) {
		conn.PgConn().CustomData()[deniedMark] = true
	}
}

// SessionDenied reports whether a statement of conn's session was refused a
// privilege (a session of a config WatchDenials prepared).
func SessionDenied(conn *pgx.Conn) bool {
	d, _ := conn.PgConn().CustomData()[deniedMark].(bool)
	return d
}

// WatchDenials prepares the workers' pool config: its sessions (and the
// staging session, made from a copy of its connection config) are marked
// when refused a privilege, and a marked one is destroyed when next
// acquired, the acquire going on with another (PrepareConn runs in the
// acquiring goroutine; AfterRelease would start a goroutine per release).
func WatchDenials(pc *pgxpool.Config, log *slog.Logger) {
	pc.ConnConfig.Tracer = deniedTracer{}
	pc.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) {
		if SessionDenied(c) {
			log.Info("a worker session was refused a privilege; replaced by a fresh one")
			return false, nil
		}
		return true, nil
	}
}

// stagingRenewal spaces and signals renewals of the staging session.
type stagingRenewal struct {
	mu         sync.Mutex
	lastDenied time.Time
	// pending: the staging session was ended on purpose; the candidate
	// connects again at once instead of after its takeover pause, so a
	// tenant who makes her own install fail (dropping the trigger on a
	// table whose owner the workers are not a member of) costs every other
	// role's seals a reconnect a minute, not half a second.
	pending atomic.Bool
}

// StagingRenewalDue reports whether the staging session conn should end
// now: it was refused a privilege, and none was renewed for that within
// RefreshDenied. A yes counts as that renewal.
func (e *Env) StagingRenewalDue(conn *pgx.Conn) bool {
	if !SessionDenied(conn) {
		return false
	}
	e.renewal.mu.Lock()
	defer e.renewal.mu.Unlock()
	if !e.renewal.lastDenied.IsZero() && time.Since(e.renewal.lastDenied) < RefreshDenied {
		return false
	}
	e.renewal.lastDenied = time.Now()
	return true
}

// StagingLifetime is the staging session's lifetime (a test may shorten it).
func (e *Env) StagingLifetime() time.Duration {
	if e.Plant.StagingLifetime > 0 {
		return e.Plant.StagingLifetime
	}
	return StagingSessionLifetime
}

// RenewStaging marks the staging session about to end as a renewal: the
// candidate connects again at once.
func (e *Env) RenewStaging() { e.renewal.pending.Store(true) }

// TakeStagingRenewal reports whether the staging session just ended was
// ended by RenewStaging, and clears it.
func (e *Env) TakeStagingRenewal() bool { return e.renewal.pending.Swap(false) }
