package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// SelfCheckMetrics is implemented by a Config.Metrics that also counts
// self-check pages and divergences per target (optional, so the Metrics
// interface stays as other code implements it).
type SelfCheckMetrics interface {
	SelfCheckPage(target string, took time.Duration, divergences int)
}

type noSCMetrics struct{}

func (noSCMetrics) SelfCheckPage(string, time.Duration, int) {}

func (e *Engine) scMetrics() SelfCheckMetrics {
	if m, ok := e.cfg.Metrics.(SelfCheckMetrics); ok {
		return m
	}
	return noSCMetrics{}
}

func (e *Engine) selfCheckPageKeys() int64 {
	if e.cfg.SelfCheckPageKeys > 0 {
		return int64(e.cfg.SelfCheckPageKeys)
	}
	return 10000
}

// selfCheckPage runs one page (§9.2): the capture audit, the status, a
// convergence wait, the comparison in one REPEATABLE READ snapshot and, in
// standard mode, a re-check of the differing keys behind a fresh wait.
func (e *Engine) selfCheckPage(ctx context.Context, j *scJob) (*scPage, error) {
	var status string
	var raw []byte
	var version int64
	err := e.workers.QueryRow(ctx, fmt.Sprintf(`SELECT status, compiled, version FROM %s WHERE id = $1`, e.tbl("_definitions")), j.def).
		Scan(&status, &raw, &version)
	if err != nil {
		return nil, err
	}
	faults, err := e.captureAudit(ctx, j.def)
	if err != nil {
		return nil, err
	}
	if len(faults) > 0 {
		return &scPage{divs: faults, done: true, outcome: "capture_broken"}, nil
	}
	if status != "live" {
		return &scPage{done: true, outcome: "not_live", notLive: status}, nil
	}
	cd, err := e.compiledFor(j.def, version, raw)
	if err != nil {
		return nil, err
	}
	paused, err := e.pausedColumns(ctx, j.def)
	if err != nil {
		return nil, err
	}
	cs := cd.c.selfCheckSQL(paused)
	token, caught, err := e.scWait(ctx, j)
	if err != nil || !caught {
		return &scPage{done: true, outcome: "not_caught_up", token: token}, err
	}
	p := &scPage{token: token}
	var rows []scRow
	err = e.scSnapshot(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, cs.bounds, j.cursor, e.selfCheckPageKeys()).Scan(&p.hi, &p.n); err != nil {
			return err
		}
		if p.n == 0 {
			return nil
		}
		rows, err = scDiff(ctx, tx, cs, j.cursor, p.hi, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	p.done = p.n < e.selfCheckPageKeys()
	if len(rows) > 0 && j.mode == "standard" {
		// A difference may be a change still in flight: wait for a fresh
		// token and compare those keys again; report only what still differs.
		if _, caught, err := e.scWait(ctx, j); err != nil || !caught {
			return &scPage{done: true, outcome: "not_caught_up", token: token}, err
		}
		keys := make([]string, len(rows))
		for i, r := range rows {
			keys[i] = r.key
		}
		err = e.scSnapshot(ctx, func(tx pgx.Tx) error {
			rows, err = scDiff(ctx, tx, cs, nil, nil, keys)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	for _, r := range rows {
		p.divs = append(p.divs, r.divergences(cs.cols)...)
	}
	return p, nil
}

// scWait waits for convergence through a fresh token, up to the job's
// timeout. caught=false: the timeout passed.
func (e *Engine) scWait(ctx context.Context, j *scJob) (token string, caught bool, err error) {
	token, err = e.WatermarkToken(ctx)
	if err != nil {
		return "", false, err
	}
	err = e.AwaitConverged(ctx, token, time.Duration(j.timeoutMS)*time.Millisecond)
	if pgerr.CodeOf(err) == pgerr.QueryCanceled && ctx.Err() == nil {
		return token, false, nil
	}
	return token, err == nil, err
}

// scSnapshot runs f in a read-only REPEATABLE READ transaction with the
// output settings a key's rendering depends on pinned as capture pins them.
func (e *Engine) scSnapshot(ctx context.Context, f func(pgx.Tx) error) error {
	tx, err := e.workers.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var sets []string
	for _, o := range outputPins {
		sets = append(sets, "SET LOCAL "+o.name+" = "+o.value)
	}
	if _, err := tx.Exec(ctx, strings.Join(sets, "; ")); err != nil {
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

func scDiff(ctx context.Context, tx pgx.Tx, cs *checkSQL, lo, hi *string, keys []string) ([]scRow, error) {
	var k any
	if keys != nil {
		k = keys
	}
	rows, err := tx.Query(ctx, cs.diff, lo, hi, k)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []scRow
	for rows.Next() {
		r := scRow{tgt: make([]*string, len(cs.cols)), rec: make([]*string, len(cs.cols))}
		dest := []any{&r.key, &r.missing, &r.extra}
		for i := range cs.cols {
			dest = append(dest, &r.tgt[i], &r.rec[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
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

func (e *Engine) pausedColumns(ctx context.Context, def int64) (map[string]bool, error) {
	rows, err := e.workers.Query(ctx, fmt.Sprintf(`SELECT column_name FROM %s WHERE definition_id = $1`, e.tbl("_paused_columns")), def)
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
func (e *Engine) captureAudit(ctx context.Context, def int64) ([]divergence, error) {
	names := make([]string, len(captureEvents))
	for i, ev := range captureEvents {
		names[i] = e.triggerName(ev)
	}
	rows, err := e.workers.Query(ctx, fmt.Sprintf(`
		SELECT r.table_name,
		       to_regclass(r.table_name) IS NOT NULL,
		       EXISTS (SELECT 1 FROM %s ct WHERE ct.table_name = r.table_name AND ct.table_oid = to_regclass(r.table_name)::oid),
		       ARRAY(SELECT n FROM unnest($2::text[]) n WHERE NOT EXISTS (
		         SELECT 1 FROM pg_trigger g WHERE g.tgrelid = to_regclass(r.table_name) AND g.tgname = n)),
		       ARRAY(SELECT g.tgname::text FROM pg_trigger g WHERE g.tgrelid = to_regclass(r.table_name)
		             AND g.tgname = ANY($2) AND g.tgenabled <> 'A' ORDER BY 1)
		FROM %s r WHERE r.definition_id = $1 ORDER BY r.table_name`,
		e.tbl("_captured_tables"), e.tbl("_definition_reads")), def, names)
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
