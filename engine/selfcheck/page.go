package selfcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func (sc *Checker) selfCheckPageKeys() int64 {
	if sc.cfg.PageKeys > 0 {
		return int64(sc.cfg.PageKeys)
	}
	return defaultPageKeys
}

// selfCheckPage runs one page (§9.2): the capture audit, the status, a
// convergence wait, the comparison in one REPEATABLE READ snapshot and, in
// standard mode, a re-check of the differing keys behind a fresh wait.
func (sc *Checker) selfCheckPage(ctx context.Context, j *scJob) (*scPage, error) {
	var status string
	var raw []byte
	var version int64
	err := sc.workers.QueryRow(ctx, fmt.Sprintf(`SELECT CASE WHEN verified THEN status ELSE 'unverified' END, compiled, version FROM %s WHERE id = $1`, sc.tbl("_definitions")), j.def).
		Scan(&status, &raw, &version)
	if err != nil {
		return nil, err
	}
	faults, err := sc.captureAudit(ctx, j.def)
	if err != nil {
		return nil, err
	}
	if len(faults) > 0 {
		return &scPage{divs: faults, done: true, outcome: "capture_broken"}, nil
	}
	if status != "live" {
		return &scPage{done: true, outcome: "not_live", notLive: status}, nil
	}
	cd, err := sc.host.Compiled(j.def, version, raw)
	if err != nil {
		return nil, err
	}
	paused, err := sc.pausedColumns(ctx, j.def)
	if err != nil {
		return nil, err
	}
	cs := sqlgen.SelfCheck(cd.C, paused)
	token, caught, err := sc.scWait(ctx, j)
	if err != nil || !caught {
		return &scPage{done: true, outcome: "not_caught_up", token: token}, err
	}
	p := &scPage{token: token}
	var rows []scRow
	err = sc.scSnapshot(ctx, func(tx pgx.Tx) error {
		var err error
		rows, p.hi, p.n, err = scPageRows(ctx, tx, cs, j.cursor, sc.selfCheckPageKeys())
		return err
	})
	if err != nil {
		return nil, err
	}
	p.done = p.n < sc.selfCheckPageKeys()
	if len(rows) > 0 && j.mode == "standard" {
		rows, err = sc.recheck(ctx, j, cd, cs, rows)
		if errors.Is(err, errNotCaughtUp) {
			return &scPage{done: true, outcome: "not_caught_up", token: token}, nil
		}
		if err != nil {
			return nil, err
		}
	}
	for _, r := range rows {
		p.divs = append(p.divs, r.divergences(cs.Cols)...)
	}
	return p, nil
}

// recheck re-compares differing keys behind a fresh wait, in a new
// snapshot, and keeps those that still differ while no change of theirs is
// in flight in that snapshot (a change still in flight is not reported).
// A key in flight is re-checked again, up to three rounds; one still in
// flight after them is left out, not reported.
func (sc *Checker) recheck(ctx context.Context, j *scJob, cd *sqlgen.Def, cs *sqlgen.Check, rows []scRow) ([]scRow, error) {
	var out []scRow
	for round := 0; round < 3 && len(rows) > 0; round++ {
		if _, caught, err := sc.scWait(ctx, j); err != nil || !caught {
			if err == nil {
				err = errNotCaughtUp
			}
			return nil, err
		}
		keys := make([]string, len(rows))
		for i, r := range rows {
			keys[i] = r.key
		}
		var pending map[string]bool
		var all bool
		err := sc.scSnapshot(ctx, func(tx pgx.Tx) error {
			var err error
			if rows, err = scDiff(ctx, tx, cs, keys); err != nil {
				return err
			}
			pending, all, err = sc.inFlight(ctx, tx, j.def, cd, cs)
			return err
		})
		if err != nil {
			return nil, err
		}
		var again []scRow
		for _, r := range rows {
			if all || pending[r.key] {
				again = append(again, r)
			} else {
				out = append(out, r)
			}
		}
		rows = again
	}
	return out, nil
}

// errNotCaughtUp ends a page whose re-check wait timed out.
var errNotCaughtUp = errors.New("self-check: not caught up")

// scWait waits for convergence through a fresh token, up to the job's
// timeout. caught=false: the timeout passed.
func (sc *Checker) scWait(ctx context.Context, j *scJob) (token string, caught bool, err error) {
	token, err = sc.host.WatermarkToken(ctx)
	if err != nil {
		return "", false, err
	}
	err = sc.host.AwaitConverged(ctx, token, time.Duration(j.timeoutMS)*time.Millisecond)
	if pgerr.CodeOf(err) == pgerr.QueryCanceled && ctx.Err() == nil {
		return token, false, nil
	}
	return token, err == nil, err
}

// scSnapshot runs f in a read-only REPEATABLE READ transaction with the
// output settings a key's rendering depends on pinned as capture pins them.
func (sc *Checker) scSnapshot(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := sc.workers.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, sqlgen.PinOutputs()); err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// scRow is one differing key: persisted (tgt) and recomputed (rec) texts.
type scRow struct {
	key            string
	missing, extra bool
	tgt, rec       []*string
}

// scDiff compares the given keys.
func scDiff(ctx context.Context, tx pgx.Tx, cs *sqlgen.Check, keys []string) ([]scRow, error) {
	rows, err := tx.Query(ctx, cs.Diff, cs.DiffArgs(keys)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []scRow
	for rows.Next() {
		r := scRow{tgt: make([]*string, len(cs.Cols)), rec: make([]*string, len(cs.Cols))}
		if err := rows.Scan(r.dest(&r.key, &r.missing, &r.extra)...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// scPageRows runs a page's comparison: its last key, key count and
// differing rows.
func scPageRows(ctx context.Context, tx pgx.Tx, cs *sqlgen.Check, cursor *string, limit int64) (out []scRow, hi *string, n int64, err error) {
	rows, err := tx.Query(ctx, cs.Page, cs.PageArgs(cursor, limit)...)
	if err != nil {
		return nil, nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		r := scRow{tgt: make([]*string, len(cs.Cols)), rec: make([]*string, len(cs.Cols))}
		var key *string
		var missing, extra *bool
		if err := rows.Scan(append([]any{&hi, &n}, r.dest(&key, &missing, &extra)...)...); err != nil {
			return nil, nil, 0, err
		}
		if key != nil {
			r.key, r.missing, r.extra = *key, *missing, *extra
			out = append(out, r)
		}
	}
	return out, hi, n, rows.Err()
}

func (r *scRow) dest(head ...any) []any {
	for i := range r.tgt {
		head = append(head, &r.tgt[i], &r.rec[i])
	}
	return head
}

func (r scRow) divergences(cols []string) []divergence {
	key := r.key
	switch {
	case r.missing:
		return []divergence{{kind: "missing_row", key: &key}}
	case r.extra:
		return []divergence{{kind: "extra_row", key: &key}}
	}
	var out []divergence
	for i, col := range cols {
		if !sameText(r.tgt[i], r.rec[i]) {
			out = append(out, divergence{kind: "cell", key: &key, column: &col, persisted: r.tgt[i], recomputed: r.rec[i]})
		}
	}
	return out
}

func sameText(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func (sc *Checker) pausedColumns(ctx context.Context, def int64) (map[string]bool, error) {
	rows, err := sc.workers.Query(ctx, fmt.Sprintf(`SELECT column_name FROM %s WHERE definition_id = $1`, sc.tbl("_paused_columns")), def)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	out := map[string]bool{}
	for _, c := range cols {
		out[c] = true
	}
	return out, err
}

// captureAudit checks that every table the definition reads carries this
// instance's capture: registered, and its four triggers present and
// ENABLE ALWAYS. Each fault is one capture divergence.
func (sc *Checker) captureAudit(ctx context.Context, def int64) ([]divergence, error) {
	names := make([]string, len(sqlgen.CaptureEvents))
	for i, ev := range sqlgen.CaptureEvents {
		names[i] = sc.host.Instance().TriggerName(ev)
	}
	rows, err := sc.workers.Query(ctx, fmt.Sprintf(`
		SELECT r.table_name,
		       to_regclass(r.table_name) IS NOT NULL,
		       EXISTS (SELECT 1 FROM %s ct WHERE ct.table_name = r.table_name AND ct.table_oid = to_regclass(r.table_name)::oid),
		       ARRAY(SELECT n FROM unnest($2::text[]) n WHERE NOT EXISTS (
		         SELECT 1 FROM pg_trigger g WHERE g.tgrelid = to_regclass(r.table_name) AND g.tgname = n)),
		       ARRAY(SELECT g.tgname::text FROM pg_trigger g WHERE g.tgrelid = to_regclass(r.table_name)
		             AND g.tgname = ANY($2) AND g.tgenabled <> 'A' ORDER BY 1)
		FROM %s r WHERE r.definition_id = $1 ORDER BY r.table_name`,
		sc.tbl("_captured_tables"), sc.tbl("_definition_reads")), def, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []divergence
	for rows.Next() {
		var table string
		var exists, registered bool
		var missing, disabled []string
		if err := rows.Scan(&table, &exists, &registered, &missing, &disabled); err != nil {
			return nil, err
		}
		var detail string
		switch {
		case !exists:
			detail = "the table does not exist"
		case !registered:
			detail = "capture is not installed on the table"
		case len(missing) > 0:
			detail = "capture trigger(s) missing: " + strings.Join(missing, ", ")
		case len(disabled) > 0:
			detail = "capture trigger(s) not ENABLE ALWAYS: " + strings.Join(disabled, ", ")
		default:
			continue
		}
		t := table
		out = append(out, divergence{kind: "capture", table: &t, detail: &detail})
	}
	return out, rows.Err()
}

// pendingSQL lists a definition's source keys still in flight in the
// current snapshot ($1 the source table, $2 the definition).
func (sc *Checker) pendingSQL() string {
	return fmt.Sprintf(`WITH d AS (%[5]s)
SELECT DISTINCT coalesce(u.k, c.key) FROM %[2]s c CROSS JOIN d LEFT JOIN LATERAL unnest(c.keys) AS u(k) ON true
WHERE c.src_table = $1 AND NOT pg_visible_in_snapshot(c.txid, d.snap)
UNION SELECT key FROM %[3]s WHERE definition_id = $2
UNION SELECT key FROM %[4]s WHERE definition_id = $2`,
		sc.tbl("_batches"), sc.tbl("_change_log"), sc.tbl("_poison"), sc.tbl("_deferred"), sc.host.DrainedSnapSQL())
}

// inFlight returns the target keys whose rows may not reflect the source
// yet in tx's snapshot; all=true when that is every key.
func (sc *Checker) inFlight(ctx context.Context, tx pgx.Tx, def int64, cd *sqlgen.Def, cs *sqlgen.Check) (keys map[string]bool, all bool, err error) {
	rows, err := tx.Query(ctx, sc.pendingSQL(), cd.C.SourceText, def)
	if err != nil {
		return nil, false, err
	}
	src, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return nil, false, err
	}
	var list []string
	for _, k := range src {
		if k == nil {
			return nil, true, nil
		}
		list = append(list, *k)
	}
	keys = map[string]bool{}
	if len(list) == 0 {
		return keys, false, nil
	}
	if cs.GroupsOf != "" {
		rows, err := tx.Query(ctx, cs.GroupsOf, list)
		if err != nil {
			return nil, false, err
		}
		if list, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return nil, false, err
		}
	}
	for _, k := range list {
		keys[k] = true
	}
	return keys, false, nil
}
