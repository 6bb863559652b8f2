package drain

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// fanOut is a JOIN target's share of a page of keys of one of its joined
// tables (joins spec §5 items 2 and 6): it finds every FROM key whose
// joined row reads one of the changed rows, through every item that joins
// the table, and re-derives them in this page (rederiveInline) or, when
// they are too many or cannot be re-derived here at once, stages a
// 'fanout' row of the FROM table for each, drained in a later batch.
//
// Why this is exact: the keys are the changed rows' identities, old and
// new (capture logs both), and a join is on the joined table's identity,
// so every FROM row that read a changed row before the change or reads it
// after points at one of those keys. A FROM row pointing at one when the
// lookup runs is re-derived, here or in a later batch, by a live read of
// the joined rows under its key's ledger lock, after the change committed.
// A FROM row that comes to point at one later does so by a write of its
// own (or of an item on its path), whose capture re-derives or fans out
// after that write committed. Staged rows carry the page's least origin
// and next hop, and inline re-derives write under the page's, so
// await_converged covers a dimension write as it covers a write of the
// FROM table.
//
// A truncate of a joined table stages every FROM key whose path reaches
// it with non-NULL join values: each that may have had a match through
// it, read after the truncate committed (a truncate batch is a fence).
func (e *Drainer) fanOut(ctx context.Context, tx pgx.Tx, d derive.ReaderDef, ks []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta, truncate, probe bool, ps pageShare) error {
	c := d.Def.C
	if truncate { // only the table itself is truncated, never an alternate-key log name
		origin := ps.tOrigin
		if ps.tUnknown {
			origin = nil
		}
		for i, j := range c.Spec.Joins {
			if j.Text != d.Table || e.Plant.FanOutSkipItem == i+1 {
				continue
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (src_table, key, op, definition_id, origin_lsn, hop) `,
				e.Tbl("_change_log"))+d.Def.FanOutAll[i], d.Def.ID, origin, ps.tHop+1); err != nil {
				return err
			}
		}
	}
	if len(ks) == 0 {
		return nil
	}
	if e.Plant.PageHook != nil {
		e.Plant.PageHook("fan-out " + c.Spec.Target.Name)
		defer e.Plant.PageHook("fanned out " + c.Spec.Target.Name)
	}
	// A key staged by a fan-out did not change: nothing reading its row
	// as a joined item needs re-deriving (and a self-join over cyclic
	// rows would otherwise stage itself forever).
	keys := make([]string, 0, len(ks))
	var origin *string
	unknown := false
	var hop int16
	for _, k := range ks {
		m := meta[k]
		if m.FanDefs != nil {
			continue
		}
		keys = append(keys, k.Key)
		if m.Origin == nil {
			unknown = true
		} else if origin == nil || lsnLess(*m.Origin, *origin) {
			origin = m.Origin
		}
		hop = max(hop, m.Hop)
	}
	if unknown {
		origin = nil
	}
	if len(keys) == 0 {
		return nil
	}
	// Each join's lookup, with its arguments: a join on the identity takes
	// the table's own keys, one on another unique key the values logged
	// under its alternate name.
	type lookup struct {
		sql  string
		args []any
	}
	var lookups []lookup
	for i, j := range c.Spec.Joins {
		if j.LogTable() != d.Table || e.Plant.FanOutSkipItem == i+1 {
			continue
		}
		ks := keys
		if e.Plant.FanOutNewOnly {
			var err error
			if ks, err = presentKeys(ctx, tx, j, keys); err != nil {
				return err
			}
		}
		mk, mn := j.MatchKey()
		args, _, _ := model.KeyArgs(ks, mk, mn)
		lookups = append(lookups, lookup{d.Def.FanOut[i], append(args, d.Def.ID, origin, hop+1)})
	}
	if limit := e.inlineLimit(d, probe); limit > 0 {
		// The FROM keys, at most limit+1 of them: more than limit are staged.
		roots := map[string]bool{}
		for _, l := range lookups {
			rows, err := tx.Query(ctx, `SELECT f.key FROM (`+l.sql+`) AS f(src_table, key, op, definition_id, origin_lsn, hop) LIMIT `+
				model.Itoa(limit+1), l.args...)
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, k := range got {
				roots[k] = true
			}
		}
		if len(roots) == 0 {
			return nil
		}
		if len(roots) <= limit {
			done, err := e.rederiveInline(ctx, tx, d, slices.Collect(maps.Keys(roots)))
			if done || err != nil {
				return err
			}
		}
	}
	for _, l := range lookups {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (src_table, key, op, definition_id, origin_lsn, hop) `,
			e.Tbl("_change_log"))+l.sql, l.args...); err != nil {
			return err
		}
	}
	return nil
}

// inlineLimit is how many FROM keys a fan-out may re-derive in its own
// page (Config.FanOutInlineKeys), 0 when it must stage them: in a probe
// (which isolates the page's own keys) and for a definition whose shares
// are failing (the staged keys' own pages isolate the failure).
func (e *Drainer) inlineLimit(d derive.ReaderDef, probe bool) int {
	if probe || d.Failing || e.Cfg.FanOutInlineKeys < 0 {
		return 0
	}
	return e.Cfg.FanOutInlineKeys
}

// fanOutLockTimeout bounds an inline re-derive's wait for ledger and target
// rows: on a conflict the keys are staged instead. The page may already
// hold the same definition's entries from its share of another table, so a
// second lock round in one page must give way rather than wait (two pages
// doing so in opposite orders would otherwise deadlock).
const fanOutLockTimeout = 50 * time.Millisecond

// rederiveInline re-derives a fan-out's FROM keys in the page, under their
// ledger locks, instead of staging them for a later batch: the same
// re-derive a later page would run (a live read of every joined row under
// the key's ledger lock, engine/derive), one batch sooner and without the
// staged log rows. Why this stays exact: the lookup ran after the joined
// change committed (its batch was sealed after the commit), and the
// re-derive reads live after its locks, so it reads the change, as the
// staged key's page would. done false: nothing was written (a key held in
// quarantine, a lock not granted at once, a data error, a ledger entry
// deleted under it), and the caller stages the keys, whose own pages
// isolate what failed.
func (e *Drainer) rederiveInline(ctx context.Context, tx pgx.Tx, d derive.ReaderDef, roots []string) (done bool, err error) {
	var held bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE definition_id = $1 AND src_table = $2 AND key = ANY($3::text[]))`,
		e.Tbl("_poison")), d.Def.ID, d.Def.C.SourceText, roots).Scan(&held); err != nil {
		return false, err
	}
	if held {
		return false, nil
	}
	// One round trip each way: the savepoint with the short lock wait, the
	// page's lock wait back with the release.
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_fanout; "+worker.LockTimeoutSQL(fanOutLockTimeout)); err != nil {
		return false, err
	}
	err = e.ApplyKeys(ctx, tx, d.Def, roots)
	if err == nil {
		if _, err = tx.Exec(ctx, worker.LockTimeoutSQL(e.Cfg.PageLockTimeout)+"; RELEASE SAVEPOINT trellis_fanout"); err == nil {
			return true, nil
		}
	}
	if ctx.Err() != nil {
		return false, err
	}
	// The rollback also restores the page's lock_timeout.
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_fanout"); rerr != nil {
		return false, err
	}
	e.Log.Debug("fan-out staged instead of re-derived in the page", "definition", d.Def.ID, "keys", len(roots), "sqlstate", base.Code(err))
	return false, nil
}

// presentKeys keeps the keys of j's table that name a row now: the
// fanOutNewOnly plant, a fan-out that forgets rows that moved away.
func presentKeys(ctx context.Context, tx pgx.Tx, j model.Join, keys []string) ([]string, error) {
	mk, mn := j.MatchKey()
	args, unnest, _ := model.KeyArgs(keys, mk, mn)
	rows, err := tx.Query(ctx, "SELECT u.k FROM "+unnest+" WHERE EXISTS (SELECT 1 FROM "+j.Table.Quoted()+
		" AS x WHERE "+model.KeyLookup(`"x"`, "u", mk, mn)+")", args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// withAltBases adds to a page's tables the table each alternate-key log
// name (model.AltLogTable) logs for, whose readers take its keys.
func withAltBases(tables []string) []string {
	out := tables
	for _, t := range tables {
		if b := model.AltBase(t); b != "" && !slices.Contains(out, b) {
			out = append(slices.Clip(out), b)
		}
	}
	return out
}

// altShares gives each joined reader of a table a share of the page's
// alternate-key log tables of it too (fanOut picks the join each names),
// skipped where its reader of the table was skipped; readers of a table
// the page holds no keys or truncate of (added by withAltBases) go.
func altShares(tables []string, defs []derive.ReaderDef, skipped []derive.SkippedReader) ([]derive.ReaderDef, []derive.SkippedReader) {
	alts := map[string][]string{}
	for _, t := range tables {
		if b := model.AltBase(t); b != "" {
			alts[b] = append(alts[b], t)
		}
	}
	if len(alts) == 0 {
		return defs, skipped
	}
	var outD []derive.ReaderDef
	for _, d := range defs {
		if slices.Contains(tables, d.Table) {
			outD = append(outD, d)
		}
		if d.Joined {
			for _, t := range alts[d.Table] {
				a := d
				a.Table = t
				outD = append(outD, a)
			}
		}
	}
	var outS []derive.SkippedReader
	for _, s := range skipped {
		if slices.Contains(tables, s.Table) {
			outS = append(outS, s)
		}
		for _, t := range alts[s.Table] {
			outS = append(outS, derive.SkippedReader{ID: s.ID, Table: t})
		}
	}
	return outD, outS
}

// fannedFor keeps of a page's keys those d applies: a key only a JOIN
// fan-out staged (keyMeta.fanDefs) re-derives for the definitions that
// staged it, and fans out for none (fanOut skips it too).
func fannedFor(d derive.ReaderDef, ks []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta) []derive.PageKey {
	var out []derive.PageKey // nil until a key is left out
	for i, k := range ks {
		fd := meta[k].FanDefs
		keep := fd == nil || (!d.Joined && slices.Contains(fd, d.Def.ID))
		switch {
		case keep && out != nil:
			out = append(out, k)
		case !keep && out == nil:
			out = append(make([]derive.PageKey, 0, len(ks)), ks[:i]...)
		}
	}
	if out == nil {
		return ks
	}
	return out
}
