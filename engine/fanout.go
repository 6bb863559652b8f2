package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// fanOut is a JOIN target's share of a page of keys of one of its joined
// tables (joins spec §5 items 2 and 6): instead of re-deriving, it stages
// a 'rederive' row of the FROM table for every FROM key whose joined row
// reads one of the changed rows, through every item that joins the table.
//
// Why this is exact: the keys are the changed rows' identities, old and
// new (capture logs both), and a join is on the joined table's identity,
// so every FROM row that read a changed row before the change or reads it
// after points at one of those keys. A FROM row pointing at one when this
// statement runs is staged here, and its re-derive (a later batch: the
// rows commit with this page) reads the joined rows live under its key's
// ledger lock. A FROM row that comes to point at one later does so by a
// write of its own (or of an item on its path), whose capture re-derives
// or fans out after that write committed. Staged rows carry the page's
// least origin and next hop, so await_converged covers a dimension write
// as it covers a write of the FROM table.
//
// A truncate of a joined table stages every FROM key whose path reaches
// it with non-NULL join values: each that may have had a match through
// it, read after the truncate committed (a truncate batch is a fence).
func (e *Engine) fanOut(ctx context.Context, tx pgx.Tx, d readerDef, ks []pageKey, meta map[pageKey]keyMeta, truncate bool, ps pageShare) error {
	c := d.cd.C
	if truncate {
		origin := ps.tOrigin
		if ps.tUnknown {
			origin = nil
		}
		for i, j := range c.Spec.Joins {
			if j.Text != d.table || e.plant.fanOutSkipItem == i+1 {
				continue
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (src_table, key, op, definition_id, origin_lsn, hop) `,
				e.tbl("_change_log"))+d.cd.FanOutAll[i], d.cd.id, origin, ps.tHop+1); err != nil {
				return err
			}
		}
	}
	if len(ks) == 0 {
		return nil
	}
	if e.plant.pageHook != nil {
		e.plant.pageHook("fan-out " + c.Spec.Target.Name)
		defer e.plant.pageHook("fanned out " + c.Spec.Target.Name)
	}
	keys := make([]string, len(ks))
	var origin *string
	unknown := false
	var hop int16
	for i, k := range ks {
		keys[i] = k.key
		m := meta[k]
		if m.origin == nil {
			unknown = true
		} else if origin == nil || lsnLess(*m.origin, *origin) {
			origin = m.origin
		}
		hop = max(hop, m.hop)
	}
	if unknown {
		origin = nil
	}
	for i, j := range c.Spec.Joins {
		if j.Text != d.table || e.plant.fanOutSkipItem == i+1 {
			continue
		}
		changed := keys
		if e.plant.fanOutNewOnly {
			var err error
			if changed, err = e.plantExistingKeys(ctx, tx, j, keys); err != nil {
				return err
			}
		}
		args, _, _ := model.KeyArgs(changed, j.Key, j.KeyNullable)
		args = append(args, d.cd.id, origin, hop+1)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (src_table, key, op, definition_id, origin_lsn, hop) `,
			e.tbl("_change_log"))+d.cd.FanOut[i], args...); err != nil {
			return err
		}
	}
	return nil
}

// plantExistingKeys is the fanOutNewOnly fault: of keys, those whose row
// exists now in j's table, so a row that moved away or was deleted fans
// out to nothing (the FROM rows that read it keep its old values).
func (e *Engine) plantExistingKeys(ctx context.Context, tx pgx.Tx, j model.Join, keys []string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT k FROM unnest($1::text[]) AS u(k) WHERE EXISTS (SELECT 1 FROM `+j.Table.Quoted()+
		` AS x WHERE `+model.KeySQL("x", j.Key, j.KeyNullable)+` = u.k)`, keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
