package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

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
// The workers' sessions live long, so a worker that meets 42501 does not
// trust its session: a pool connection is closed instead of returned (the
// retry runs on a fresh backend), and the staging session is ended (at most
// once per RefreshDenied, so a privilege really missing costs one
// reconnect a minute, not one a pass).

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

// StagingLifetime is the staging session's lifetime (a test may shorten it).
func (e *Env) StagingLifetime() time.Duration {
	if e.Plant.StagingLifetime > 0 {
		return e.Plant.StagingLifetime
	}
	return StagingSessionLifetime
}

// RenewStaging marks the staging session about to end as a renewal: the
// candidate connects again at once.
func (e *Env) RenewStaging() { e.refresh.pending.Store(true) }

// Denied reports whether err is a privilege error (42501).
func Denied(err error) bool { return base.Code(err) == pgerr.InsufficientPrivilege }

// Denials records, for one unit of work on one connection (a page, a build
// step), whether a statement of it failed with a privilege error, even one
// the work handled (a definition's share of a page held for it alone).
type Denials struct{ seen atomic.Bool }

type denialsKey struct{}

// WithDenials returns ctx carrying a fresh record.
func WithDenials(ctx context.Context) (context.Context, *Denials) {
	d := &Denials{}
	return context.WithValue(ctx, denialsKey{}, d), d
}

// NoteDenied records err in ctx's record when it is a privilege error.
func NoteDenied(ctx context.Context, err error) {
	if d, _ := ctx.Value(denialsKey{}).(*Denials); d != nil && Denied(err) {
		d.seen.Store(true)
	}
}

// Seen reports whether a privilege error was recorded.
func (d *Denials) Seen() bool { return d.seen.Load() }

// sessionRefresh spaces renewals of the staging session.
type sessionRefresh struct {
	mu   sync.Mutex
	last time.Time
	// pending: the staging session was ended on purpose; the candidate
	// connects again at once instead of after its takeover pause, so a
	// tenant who makes her own install fail (dropping the trigger on a
	// table whose owner the workers are not a member of) costs every other
	// role's seals a reconnect a minute, not half a second.
	pending atomic.Bool
}

// StagingRefreshDue reports whether the staging session may be renewed
// after a privilege error now, and if so counts this as the renewal.
func (e *Env) StagingRefreshDue() bool {
	e.refresh.mu.Lock()
	defer e.refresh.mu.Unlock()
	if !e.refresh.last.IsZero() && time.Since(e.refresh.last) < RefreshDenied {
		return false
	}
	e.refresh.last = time.Now()
	e.refresh.pending.Store(true)
	return true
}

// TakeStagingRenewal reports whether the staging session just ended was
// ended by StagingRefreshDue's renewal, and clears it.
func (e *Env) TakeStagingRenewal() bool { return e.refresh.pending.Swap(false) }
