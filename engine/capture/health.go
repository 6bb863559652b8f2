package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
	"github.com/trellis-proxy/trellis-proxy/grammar"
)

// Capture health and schema changes (engine spec §12.9): the staging worker
// compares what each definition bound at define time (column numbers, types,
// the table's OID, inheritance) with the live catalog on every pass and
// pauses exactly the affected definitions with a capture_failure; capture
// triggers themselves never fail an application's statement because a key
// column was renamed, dropped or re-typed (they log a 'schema' marker
// instead).

// CaptureFailure is what an automatic pause records in
// _definitions.status_detail under "capture_failure" (surface §5.1).
type CaptureFailure struct {
	Error   string `json:"error"`
	Table   string `json:"table"`
	Column  string `json:"column,omitempty"`
	OldType string `json:"old_type,omitempty"`
	NewType string `json:"new_type,omitempty"`
	Remedy  string `json:"remedy"`
}

// bindSQL records, for every read of an applying definition not bound yet,
// the column numbers, types and collations of the columns it reads (its key
// columns included), by name as the catalog stands now. A name that does
// not resolve is bound with a NULL attnum, which the check reports.
const bindSQL = `
UPDATE %[1]s r SET bindings = (
  SELECT coalesce(jsonb_agg(jsonb_build_object('name', c.name, 'attnum', a.attnum, 'typid', a.atttypid,
           'typmod', a.atttypmod, 'coll', a.attcollation, 'type', format_type(a.atttypid, a.atttypmod)) ORDER BY c.name), '[]')
  FROM (SELECT DISTINCT x AS name FROM jsonb_array_elements_text(r.columns ||
          CASE WHEN r.role = 'to_one' THEN '[]'::jsonb  -- a joined table's columns include its key
               ELSE coalesce((SELECT jsonb_agg(k -> 'name') FROM jsonb_array_elements(d.compiled -> 'key') k), '[]') END) x) c
  LEFT JOIN pg_attribute a ON a.attrelid = r.table_oid AND a.attname = c.name AND a.attnum > 0 AND NOT a.attisdropped)
FROM %[2]s d
WHERE d.id = r.definition_id AND r.bindings IS NULL AND %[3]s`

// problemSQL lists what changed under applying definitions: per read, the
// table (gone, recreated, joined a hierarchy) and every bound column whose
// attnum, name, type or collation moved.
const problemSQL = `
SELECT d.id, d.compiled #>> '{spec,target,name}', r.table_name,
  CASE WHEN NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = r.table_oid) THEN
         CASE WHEN to_regclass(r.table_name) IS NULL THEN 'table_gone' ELSE 'table_recreated' END
       WHEN to_regclass(r.table_name) IS DISTINCT FROM r.table_oid THEN 'table_renamed'
       WHEN EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = r.table_oid OR inhparent = r.table_oid)
         OR (SELECT relispartition OR relkind = 'p' FROM pg_class WHERE oid = r.table_oid) THEN 'hierarchy'
       WHEN NOT ` + ownerReads + ` THEN 'owner_cannot_read'
       WHEN ` + ownerUnderRowSecurity + ` THEN 'row_security'
  END AS table_problem,
  b.name, b.type, a.attname, format_type(a.atttypid, a.atttypmod), coalesce(a.attisdropped, true),
  (SELECT format_type(n.atttypid, n.atttypmod) FROM pg_attribute n WHERE n.attrelid = r.table_oid
     AND n.attname = b.name AND n.attnum > 0 AND NOT n.attisdropped),
  b.attnum IS NULL, coalesce(pg_get_userbyid(d.owner_role)::text, '')
FROM %[2]s d JOIN %[1]s r ON r.definition_id = d.id
LEFT JOIN LATERAL (SELECT x ->> 'name' AS name, x ->> 'type' AS type, (x ->> 'attnum')::int2 AS attnum,
                          (x ->> 'typid')::oid AS typid, (x ->> 'typmod')::int4 AS typmod, (x ->> 'coll')::oid AS coll
                   FROM jsonb_array_elements(r.bindings) x) b ON true
LEFT JOIN pg_attribute a ON a.attrelid = r.table_oid AND a.attnum = b.attnum
WHERE %[3]s AND r.bindings IS NOT NULL
  AND (NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = r.table_oid)
       OR to_regclass(r.table_name) IS DISTINCT FROM r.table_oid
       OR EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = r.table_oid OR inhparent = r.table_oid)
       OR (SELECT relispartition OR relkind = 'p' FROM pg_class WHERE oid = r.table_oid)
       OR NOT ` + ownerReads + `
       OR ` + ownerUnderRowSecurity + `
       OR (b.name IS NOT NULL AND (b.attnum IS NULL OR a.attnum IS NULL OR a.attisdropped OR a.attname <> b.name
           OR a.atttypid <> b.typid OR a.atttypmod <> b.typmod OR a.attcollation <> b.coll)))
ORDER BY d.id, r.table_name, b.name`

// A transform reads only what its owner may read (D9, issue 14): the
// owner losing SELECT on a table it reads (a REVOKE after define, the role
// dropped) or row security coming to apply to the owner (the workers read
// with row_security off) pauses it, as a schema change does. Row security
// applies to a role unless it is a superuser or has BYPASSRLS, or owns the
// table (membership counts) and the table does not FORCE it.
const (
	ownerReads = `coalesce((SELECT has_table_privilege(d.owner_role, r.table_oid, 'SELECT')
	                FROM pg_roles o WHERE o.oid = d.owner_role), false)`
	ownerUnderRowSecurity = `coalesce((SELECT c.relrowsecurity AND NOT (o.rolsuper OR o.rolbypassrls)
	                AND (c.relforcerowsecurity OR NOT pg_has_role(d.owner_role, c.relowner, 'USAGE'))
	                FROM pg_class c, pg_roles o WHERE c.oid = r.table_oid AND o.oid = d.owner_role), false)`
)

const ApplyingStatuses = `d.status IN ('waiting_to_backfill', 'backfilling', 'live')`

// CheckSchemas binds new definitions' columns and pauses every applying
// definition whose read tables or columns changed (§12.9 "Columns",
// "Relations gone", hierarchies). It runs on the staging connection every
// pass; it reads only catalogs, never rows. acted: it bound, paused or
// rebuilt something (the pass is not steady).
func (e *Capturer) CheckSchemas(ctx context.Context, conn *pgx.Conn) (acted bool, err error) {
	acted, err = e.bindReads(ctx, conn)
	if err != nil {
		return false, err
	}
	_, order, err := e.readProblems(ctx, conn, ApplyingStatuses)
	if err != nil {
		return false, err
	}
	for _, id := range order {
		acted = true
		// One definition's pause failing (a lock wait) holds only it; the
		// checks of the others go on (D21).
		if err := e.autoPause(ctx, conn, id); err != nil {
			if conn.IsClosed() || ctx.Err() != nil {
				return false, err
			}
			e.LogFailure("auto-pause failed; retried next pass", err, "definition", id)
		}
	}
	tampered, err := e.checkTamper(ctx, conn)
	if err != nil {
		return false, err
	}
	rewritten, err := e.checkRewrites(ctx, conn)
	return acted || tampered || rewritten, err
}

// bindReads records the bindings of reads that have none yet (bindSQL). A
// read row its owner's open transaction holds (an ALTER TRANSFORM right
// after the define) is waited for no longer than an install waits, and
// bound at a later pass: the staging worker never waits for another role's
// transaction (D21).
func (e *Capturer) bindReads(ctx context.Context, conn *pgx.Conn) (acted bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.Background())
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
		return false, err
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(bindSQL, e.Tbl("_definition_reads"), e.Tbl("_definitions"), ApplyingStatuses))
	if err == nil {
		err = tx.Commit(ctx)
	}
	if worker.LeftForLater(ctx, conn, err) {
		return true, nil // not steady: bound at a later pass
	}
	return err == nil && tag.RowsAffected() > 0, err
}

// tamperSQL lists applying definitions whose target or ledger is not the
// workers' role's, or grew code that would run when the workers write it
// (D20): a trigger other than Trellis's capture, a rule, row security, a
// default other than the ledger's member, a check, exclusion or foreign
// key constraint, a generated column, or an index with expressions, a
// predicate other than the ledger's WHERE member, or an operator class
// outside pg_catalog. With the workers' ownership no tenant can add
// these; a superuser can, and this is the second wall.
const tamperSQL = `
SELECT d.id, d.compiled #>> '{spec,target,name}', c.oid::regclass::text
FROM %[1]s d JOIN pg_class c ON c.oid IN (d.target_oid, d.ledger_oid)
WHERE %[2]s AND (
  c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = (SELECT worker_role FROM %[3]s))
  OR c.relrowsecurity OR c.relhasrules
  OR EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND NOT (g.tgname = ANY ($1::name[])))
  OR EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid)
  OR EXISTS (SELECT 1 FROM pg_attrdef a WHERE a.adrelid = c.oid AND NOT (c.oid = d.ledger_oid
       AND pg_get_expr(a.adbin, a.adrelid) = 'false'
       AND (SELECT attname FROM pg_attribute WHERE attrelid = c.oid AND attnum = a.adnum) = 'member'))
  OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype NOT IN ('p', 'u'))
  OR EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND a.attgenerated <> '')
  OR EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND (i.indexprs IS NOT NULL
       OR (i.indpred IS NOT NULL AND NOT (c.oid = d.ledger_oid AND pg_get_expr(i.indpred, i.indrelid) = 'member'))
       OR EXISTS (SELECT 1 FROM unnest(i.indclass::oid[]) oc JOIN pg_opclass o ON o.oid = oc
                  WHERE o.opcnamespace <> 'pg_catalog'::regnamespace))))
ORDER BY d.id`

// checkTamper pauses every definition tamperSQL lists, with a
// capture_failure naming the table.
func (e *Capturer) checkTamper(ctx context.Context, conn *pgx.Conn) (bool, error) {
	if e.Cfg.TestingTargetTriggers {
		return false, nil
	}
	names := make([]string, len(sqlgen.CaptureEvents))
	for i, ev := range sqlgen.CaptureEvents {
		names[i] = e.Inst().TriggerName(ev)
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(tamperSQL, e.Tbl("_definitions"), ApplyingStatuses, e.Tbl("_instance")), names)
	if err != nil {
		return false, err
	}
	type hit struct {
		id            int64
		target, table string
	}
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (hit, error) {
		var h hit
		return h, r.Scan(&h.id, &h.target, &h.table)
	})
	if err != nil {
		return false, err
	}
	done := map[int64]bool{}
	for _, h := range hits {
		if done[h.id] {
			continue
		}
		done[h.id] = true
		t := grammar.QuoteIdentIfNeeded(h.target)
		f := &CaptureFailure{Table: h.table,
			Error:  fmt.Sprintf("table %s of %s is not owned by the workers' role or carries a trigger, rule, policy, default, check, generated column or index Trellis did not make; the workers do not write it", h.table, t),
			Remedy: fmt.Sprintf("remove what was added to %s (or DROP TRANSFORM %s and define it again), then RESUME TRANSFORM %s", h.table, t, t)}
		if held, err := e.PauseFailed(ctx, conn, h.id, f); err != nil || held {
			if err != nil {
				return false, err
			}
			continue // its owner's transaction holds it: a later pass
		}
		e.Log.Warn("transform paused: foreign code on its tables", "definition", h.id, "table", h.table)
	}
	return len(hits) > 0, nil
}

// checkRewrites (§12.9 "Rewrites"): a captured table whose relfilenode
// changed other than by a captured TRUNCATE was rewritten (ALTER COLUMN
// TYPE ... USING, SET LOGGED, VACUUM FULL, CLUSTER), possibly with values
// changed and no trigger fired: its applying readers are rebuilt. A false
// positive costs a rebuild, never correctness.
func (e *Capturer) checkRewrites(ctx context.Context, conn *pgx.Conn) (found bool, err error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT ct.table_name FROM %s ct JOIN pg_class c ON c.oid = ct.table_oid
		WHERE ct.relfilenode IS NOT NULL AND c.relfilenode <> 0 AND c.relfilenode <> ct.relfilenode`, e.Tbl("_captured_tables")))
	if err != nil {
		return false, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, err
	}
	found = len(tables) > 0
	for _, t := range tables {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
		if err != nil {
			return false, err
		}
		// The table's owner may hold what this needs in a transaction she
		// keeps open (her TRUNCATE's bookkeeping row, her PAUSE's definition
		// row): the staging worker, and every role's seals with it, waits
		// for her no longer than an install does, and the table is checked
		// again at a later pass (D21).
		if err := worker.SetLockTimeout(ctx, tx, e.Cfg.InstallLockTimeout); err != nil {
			tx.Rollback(ctx)
			return false, err
		}
		// Under the row lock a concurrent truncate's update cannot interleave.
		var changed bool
		if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT c.relfilenode <> ct.relfilenode FROM %s ct JOIN pg_class c ON c.oid = ct.table_oid
			WHERE ct.table_name = $1 FOR UPDATE OF ct SKIP LOCKED`, e.Tbl("_captured_tables")), t).Scan(&changed); err != nil || !changed {
			tx.Rollback(ctx)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // gone, or held by its owner's transaction: a later pass
			}
			if err != nil {
				return false, err
			}
			continue
		}
		queued, err := e.RequestRebuild(ctx, tx, t, "table "+t+" was rewritten")
		if err == nil {
			_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s ct SET relfilenode = c.relfilenode FROM pg_class c
				WHERE c.oid = ct.table_oid AND ct.table_name = $1`, e.Tbl("_captured_tables")), t)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		tx.Rollback(ctx)
		if worker.LeftForLater(ctx, conn, err) {
			e.Log.Debug("rewrite check left for a later pass: a reader is held by a client transaction", "table", t, "err", err)
			continue
		}
		if err != nil {
			return false, err
		}
		e.Log.Warn("table rewritten behind capture; readers rebuild", "table", t, "rebuilt", queued)
	}
	return found, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func describeProblem(target, table, owner string, tableProblem, name, oldType, nowName, nowType *string, dropped bool, sameNameType *string, unbound bool) *CaptureFailure {
	t := grammar.QuoteIdentIfNeeded(target)
	redefine := fmt.Sprintf("DROP TRANSFORM %s and define it again over the new shape", t)
	if tableProblem != nil {
		f := &CaptureFailure{Table: table}
		switch *tableProblem {
		case "table_gone":
			f.Error = fmt.Sprintf("table %s read by %s was dropped", table, t)
			f.Remedy = fmt.Sprintf("recreate %s and RESUME TRANSFORM %s, or DROP TRANSFORM %s", table, t, t)
		case "table_recreated":
			f.Error = fmt.Sprintf("table %s read by %s was dropped and recreated", table, t)
			f.Remedy = redefine
		case "table_renamed":
			f.Error = fmt.Sprintf("table %s read by %s was renamed or moved", table, t)
			f.Remedy = fmt.Sprintf("rename it back and RESUME TRANSFORM %s, or %s", t, redefine)
		case "owner_cannot_read":
			f.Error = fmt.Sprintf("the owner of %s, %s, may no longer read %s", t, owner, table)
			f.Remedy = fmt.Sprintf("GRANT SELECT ON %s TO %s; then RESUME TRANSFORM %s", table, grammar.QuoteIdentIfNeeded(owner), t)
		case "row_security":
			f.Error = fmt.Sprintf("row level security on %s applies to %s, the owner of %s: the workers would copy rows the owner may not see", table, owner, t)
			f.Remedy = fmt.Sprintf("ALTER TABLE %s DISABLE ROW LEVEL SECURITY (or let the owner bypass it), then RESUME TRANSFORM %s", table, t)
		case "hierarchy":
			f.Error = fmt.Sprintf("table %s read by %s joined a partition or inheritance hierarchy; statement triggers cannot capture its changes", table, t)
			f.Remedy = fmt.Sprintf("detach it (ALTER TABLE ... DETACH PARTITION / NO INHERIT) and RESUME TRANSFORM %s", t)
		}
		return f
	}
	if name == nil {
		return nil
	}
	col := *name
	f := &CaptureFailure{Table: table, Column: col, OldType: deref(oldType)}
	switch {
	case unbound:
		f.Error = fmt.Sprintf("column %s of %s read by %s does not exist", col, table, t)
		f.Remedy = fmt.Sprintf("add the column back and RESUME TRANSFORM %s, or %s", t, redefine)
	case nowName != nil && !dropped && *nowName != col:
		f.Error = fmt.Sprintf("column %s of %s read by %s was renamed to %s", col, table, t, *nowName)
		f.NewType = deref(nowType)
		f.Remedy = fmt.Sprintf("rename it back (ALTER TABLE %s RENAME COLUMN %s TO %s) and RESUME TRANSFORM %s, or %s",
			table, grammar.QuoteIdentIfNeeded(*nowName), grammar.QuoteIdentIfNeeded(col), t, redefine)
	case dropped && sameNameType != nil:
		f.Error = fmt.Sprintf("column %s of %s read by %s was dropped and added again", col, table, t)
		f.NewType = *sameNameType
		f.Remedy = fmt.Sprintf("RESUME TRANSFORM %s (it re-validates and rebuilds from the new column)", t)
	case dropped:
		f.Error = fmt.Sprintf("column %s of %s read by %s was dropped", col, table, t)
		f.Remedy = fmt.Sprintf("add the column back and RESUME TRANSFORM %s, or %s", t, redefine)
	default:
		f.Error = fmt.Sprintf("column %s of %s read by %s changed type from %s to %s", col, table, t, deref(oldType), deref(nowType))
		f.NewType = deref(nowType)
		f.Remedy = fmt.Sprintf("change it back (ALTER TABLE %s ALTER COLUMN %s TYPE %s) and RESUME TRANSFORM %s; RESUME also works when the new type gives the target the same column types; else %s",
			table, grammar.QuoteIdentIfNeeded(col), deref(oldType), t, redefine)
	}
	return f
}

// autoPause freezes one definition with a capture_failure. Pages stop
// applying it at once (they read only applying definitions); RESUME
// re-validates and rebuilds.
//
// The problem is read again under the definition's row lock, in a new
// statement: the pass's own reading may be stale by then (a column renamed
// and renamed back, or the transform resumed, while this pass waited for
// the lock), and a pause on stale evidence would stop a healthy transform.
func (e *Capturer) autoPause(ctx context.Context, conn *pgx.Conn, id int64) error {
	tx, err := e.BeginFenced(ctx, conn, id)
	if tx == nil {
		return err
	}
	defer tx.Rollback(ctx)
	var locked bool
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s d WHERE id = $1 AND %s FOR UPDATE)`,
		e.Tbl("_definitions"), ApplyingStatuses), id).Scan(&locked); err != nil || !locked {
		return err
	}
	failures, _, err := e.readProblems(ctx, tx, ApplyingStatuses+" AND d.id = $1", id)
	if err != nil || failures[id] == nil {
		return err
	}
	f := failures[id]
	raw, _ := json.Marshal(f)
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s d SET status = 'paused', version = version + 1,
		  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = coalesce(status_detail, '{}') || jsonb_build_object('capture_failure', $2::jsonb)
		WHERE id = $1 AND %s`, e.Tbl("_definitions"), ApplyingStatuses), id, raw)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		e.Log.Warn("transform paused by a schema change", "definition", id, "reason", f.Error)
	}
	return nil
}

// readProblems runs problemSQL for the definitions filter selects and
// describes the first problem of each, in id order.
func (e *Capturer) readProblems(ctx context.Context, q base.Querier, filter string, args ...any) (map[int64]*CaptureFailure, []int64, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(problemSQL, e.Tbl("_definition_reads"), e.Tbl("_definitions"), filter), args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	failures := map[int64]*CaptureFailure{}
	var order []int64
	for rows.Next() {
		var id int64
		var target, table string
		var tableProblem, name, oldType, nowName, nowType, sameNameType *string
		var dropped, unbound bool
		var owner string
		if err := rows.Scan(&id, &target, &table, &tableProblem, &name, &oldType, &nowName, &nowType, &dropped, &sameNameType, &unbound, &owner); err != nil {
			return nil, nil, err
		}
		if failures[id] != nil {
			continue
		}
		f := describeProblem(target, table, owner, tableProblem, name, oldType, nowName, nowType, dropped, sameNameType, unbound)
		if f == nil {
			continue
		}
		failures[id] = f
		order = append(order, id)
	}
	return failures, order, rows.Err()
}

// triggerXmins reads the xmin of each capture trigger of table.
func (e *Capturer) triggerXmins(ctx context.Context, q base.Querier, table string) (map[string]string, error) {
	names := make([]string, len(sqlgen.CaptureEvents))
	for i, ev := range sqlgen.CaptureEvents {
		names[i] = e.Inst().TriggerName(ev)
	}
	var raw []byte
	err := q.QueryRow(ctx, `SELECT coalesce(jsonb_object_agg(tgname, xmin::text), '{}') FROM pg_trigger
		WHERE tgrelid = to_regclass($1) AND tgname = ANY($2)`, table, names).Scan(&raw)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	return out, json.Unmarshal(raw, &out)
}

// captureTampered reports whether capture installed on table was disabled,
// dropped, replaced or re-enabled since its install (§12.9 "Tampering",
// "Disabled and re-enabled between passes"): any trigger row whose xmin is
// not the one recorded at install. A first install, or a table recreated
// since, is not tampering.
func (e *Capturer) captureTampered(ctx context.Context, conn base.Querier, table string) (bool, error) {
	var stored []byte
	var sameOID bool
	err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT trigger_xmins, table_oid = to_regclass($1)::oid FROM %s WHERE table_name = $1`,
		e.Tbl("_captured_tables")), table).Scan(&stored, &sameOID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (stored == nil || !sameOID)) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	want := map[string]string{}
	if err := json.Unmarshal(stored, &want); err != nil {
		return false, err
	}
	now, err := e.triggerXmins(ctx, conn, table)
	if err != nil {
		return false, err
	}
	if len(now) != len(want) {
		return true, nil
	}
	for k, v := range want {
		if now[k] != v {
			return true, nil
		}
	}
	return false, nil
}

// recordInstall keeps the trigger xmins of an install, in its transaction.
func (e *Capturer) recordInstall(ctx context.Context, tx pgx.Tx, table string) error {
	x, err := e.triggerXmins(ctx, tx, table)
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(x)
	_, err = tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET trigger_xmins = $2,
		relfilenode = (SELECT relfilenode FROM pg_class WHERE oid = to_regclass($1)) WHERE table_name = $1`,
		e.Tbl("_captured_tables")), table, raw)
	return err
}

// captureCurrent: ok when the table carries current, untampered capture.
// A tampered one (disabled, dropped, replaced or re-enabled since our
// install) is not current; its reinstall rebuilds the readers.
func (e *Capturer) captureCurrent(ctx context.Context, conn *pgx.Conn, p *capturePlan) (bool, error) {
	tampered, err := e.captureTampered(ctx, conn, p.Table)
	if err != nil || tampered {
		return false, err
	}
	return e.captureHealthy(ctx, conn, p)
}

// PauseFailed pauses an applying definition with a capture_failure, unless
// a client transaction holds it (left for a later pass, updateDefinition).
func (e *Capturer) PauseFailed(ctx context.Context, conn *pgx.Conn, id int64, f *CaptureFailure) (held bool, err error) {
	raw, _ := json.Marshal(f)
	return e.UpdateDefinition(ctx, conn, id, fmt.Sprintf(`UPDATE %s d SET status = 'paused', version = version + 1,
		  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
		  status_detail = coalesce(status_detail, '{}') || jsonb_build_object('capture_failure', $2::jsonb)
		WHERE id = $1 AND %s`, e.Tbl("_definitions"), ApplyingStatuses), raw)
}

// UpdateDefinition runs update (its $1 is id) on a definition's row for the
// staging worker, in a transaction of its own, behind the definition's
// fence: a fence a client transaction holds (its owner's PAUSE, ALTER or
// DROP still open) leaves the row for a later pass, and pages in flight are
// waited for only under PageLockTimeout, so the staging worker, and with it
// every role's seals, never waits for another role's transaction (D21).
// held: the row was left.
func (e *Capturer) UpdateDefinition(ctx context.Context, conn *pgx.Conn, id int64, update string, args ...any) (held bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.Background())
	got, err := e.StagingFence(ctx, tx, id)
	if err == nil && !got {
		return true, nil
	}
	if err == nil {
		_, err = tx.Exec(ctx, update, append([]any{id}, args...)...)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if worker.LeftForLater(ctx, conn, err) {
		return true, nil
	}
	return false, err
}
