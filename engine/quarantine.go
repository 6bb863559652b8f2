package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// Quarantine finds the keys and columns that make a page or build step
// fail, and holds them apart (per transform).
type Quarantine struct {
	*Deriver
}

// Quarantine (engine spec §12.12, surface §6, §13 fuses).
const (
	// deathsToPoison is how many failing re-derivations hold a key for one
	// definition.
	deathsToPoison = 5
	// heldKeysToQuarantine is how many held keys quarantine a definition.
	heldKeysToQuarantine = 5
	// failingRowsToPause is how many failing rows pause a 1-1 column.
	failingRowsToPause = 5
	// buildAttemptsToPause is the charged chunk attempt that pauses a build.
	buildAttemptsToPause = 5
)

// poisonous reports whether a failure can be attributed to the rows being
// applied (§12.12 "poisonous"): a data exception raised by a formula (class
// 22: division by zero, a cast, an out-of-range value) or a constraint on
// the target refusing a row (class 23). Everything else that is not
// transient is a holdup of the whole page.
func poisonous(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")
}


// keyFailure is one (definition, key) that failed alone in a probe.
type keyFailure struct {
	def        int64
	table, key string
	err        error
	column     string // the 1-1 field that fails alone for the key, if one does
}

func errMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// poisonedKeys returns, per definition, the page's keys held for it, and
// lowers each hold's origin to the least origin it skips (NULL wins), so the
// skipped changes stay pending for convergence. Outside a probe it also
// clears the death counts of the page's keys: a page that commits applied
// them cleanly.
func (e *Quarantine) poisonedKeys(ctx context.Context, tx pgx.Tx, defs []readerDef, keys []pageKey, meta map[pageKey]keyMeta, probe bool) (map[int64]map[pageKey]bool, error) {
	if len(keys) == 0 || len(defs) == 0 {
		return nil, nil
	}
	ts := make([]string, len(keys))
	ks := make([]string, len(keys))
	for i, k := range keys {
		ts[i], ks[i] = k.table, k.key
	}
	ids := make([]int64, 0, len(defs))
	for _, d := range defs {
		ids = append(ids, d.cd.id)
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(t, k)),
		cleared AS (DELETE FROM %[1]s kd USING u WHERE NOT $4 AND kd.src_table = u.t AND kd.key = u.k RETURNING 1)
		SELECT p.definition_id, p.src_table, p.Key FROM %[2]s p JOIN u ON p.src_table = u.t AND p.Key = u.k
		WHERE p.definition_id = ANY($3::int8[])`, e.tbl("_key_deaths"), e.tbl("_poison")), ts, ks, ids, probe)
	if err != nil {
		return nil, err
	}
	var out map[int64]map[pageKey]bool
	var ud []int64
	var ut, uk []string
	var uo []*string
	for rows.Next() {
		var d int64
		var k pageKey
		if err := rows.Scan(&d, &k.table, &k.key); err != nil {
			rows.Close()
			return nil, err
		}
		if out == nil {
			out = map[int64]map[pageKey]bool{}
		}
		if out[d] == nil {
			out[d] = map[pageKey]bool{}
		}
		out[d][k] = true
		ud, ut, uk, uo = append(ud, d), append(ut, k.table), append(uk, k.key), append(uo, meta[k].origin)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(ud) > 0 {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s p SET origin_lsn =
			CASE WHEN p.origin_lsn IS NULL OR s.o IS NULL THEN NULL ELSE least(p.origin_lsn, s.o::pg_lsn) END
			FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[]) AS s(d, t, k, o)
			WHERE p.definition_id = s.d AND p.src_table = s.t AND p.Key = s.k
			  AND p.origin_lsn IS NOT NULL AND (s.o IS NULL OR s.o::pg_lsn < p.origin_lsn)`, e.tbl("_poison")), ud, ut, uk, uo); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// probeApply applies keys of one definition under a savepoint; when that
// fails with a poisonous error it re-derives each key under its own
// savepoint, keeps the ones that apply and charges the ones that fail alone
// (§12.12 isolate, count, evict). Transient and halting errors end the page.
func (e *Quarantine) probeApply(ctx context.Context, tx pgx.Tx, d readerDef, keys []pageKey, meta map[pageKey]keyMeta) error {
	if len(keys) == 0 {
		return nil
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = k.key
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_probe"); err != nil {
		return err
	}
	err := e.applyKeys(ctx, tx, d.cd, ks)
	if err == nil {
		if _, err = tx.Exec(ctx, "RELEASE SAVEPOINT trellis_probe"); err != nil {
			return err
		}
		return e.clearDeaths(ctx, tx, d.cd.id, keys)
	}
	if !poisonous(err) {
		return err
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_probe"); err != nil {
		return err
	}
	var failed []keyFailure
	var applied []pageKey
	for _, k := range keys {
		if _, err := tx.Exec(ctx, "SAVEPOINT trellis_probe_key"); err != nil {
			return err
		}
		kerr := e.applyKeys(ctx, tx, d.cd, []string{k.key})
		if kerr != nil && !poisonous(kerr) {
			return kerr
		}
		if kerr != nil {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_probe_key"); err != nil {
				return err
			}
			f := keyFailure{def: d.cd.id, table: k.table, key: k.key, err: kerr}
			if err := e.attributeColumn(ctx, tx, d.cd, &f); err != nil {
				return err
			}
			failed = append(failed, f)
		} else {
			applied = append(applied, k)
		}
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT trellis_probe_key"); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT trellis_probe"); err != nil {
		return err
	}
	if err := e.clearDeaths(ctx, tx, d.cd.id, applied); err != nil {
		return err
	}
	if err := e.chargeColumns(ctx, tx, d.cd, failed); err != nil {
		return err
	}
	return e.chargeFailures(ctx, tx, d.cd, failed, meta)
}

// attributeColumn evaluates each unpaused field of a 1-1 definition alone
// for a key that failed, and names the first that raises (§12.12 "the probe
// can also evaluate each compiled field alone").
func (e *Quarantine) attributeColumn(ctx context.Context, tx pgx.Tx, cd *compiledDef, f *keyFailure) error {
	if cd.C.Spec.IsAggregate() || len(cd.FieldProbe) == 0 {
		return nil
	}
	args, _, _ := model.KeyArgs([]string{f.key}, cd.C.Key, cd.C.KeyNullable)
	for _, fl := range cd.C.Spec.Fields {
		q, ok := cd.FieldProbe[fl.Name]
		if !ok {
			continue
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT trellis_probe_col"); err != nil {
			return err
		}
		_, ferr := tx.Exec(ctx, q, args...)
		if ferr != nil && !poisonous(ferr) {
			return ferr
		}
		if ferr != nil {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_probe_col"); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT trellis_probe_col"); err != nil {
			return err
		}
		if ferr != nil {
			f.column, f.err = fl.Name, ferr
			return nil
		}
	}
	return nil
}

// chargeColumns records failing rows per (definition, column); a column
// with 5 distinct failing rows is paused: it is no longer written and keeps
// its values (surface §6.1). Its keys then apply without it.
func (e *Quarantine) chargeColumns(ctx context.Context, tx pgx.Tx, cd *compiledDef, failed []keyFailure) error {
	cols := map[string]bool{}
	for _, f := range failed {
		if f.column == "" {
			continue
		}
		cols[f.column] = true
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, column_name, src_table, key, error, sqlstate)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''))
			ON CONFLICT (definition_id, column_name, src_table, key) DO UPDATE SET error = excluded.error,
			  sqlstate = excluded.sqlstate, failed_at = now()`, e.tbl("_column_failures")),
			f.def, f.column, f.table, f.key, errMessage(f.err), base.Code(f.err)); err != nil {
			return err
		}
	}
	for col := range cols {
		tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (definition_id, column_name, last_error, sqlstate)
			SELECT $1, $2, (array_agg(f.error ORDER BY f.failed_at DESC))[1], (array_agg(f.sqlstate ORDER BY f.failed_at DESC))[1]
			FROM %[2]s f WHERE f.definition_id = $1 AND f.column_name = $2
			HAVING count(*) >= $3
			ON CONFLICT (definition_id, column_name) DO NOTHING`, e.tbl("_paused_columns"), e.tbl("_column_failures")),
			cd.id, col, failingRowsToPause)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			// Readers of the column downstream pause with it (grammar §4.3).
			var cascaded []string
			if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT %s._pause_cascade($1, $2)`, base.Ident(e.cfg.Schema)), cd.id, col).Scan(&cascaded); err != nil {
				return err
			}
			e.log.Warn("column paused: its formula fails on too many rows", "definition", cd.id, "target", cd.C.TargetText, "column", col,
				"cascaded", cascaded)
		}
	}
	return nil
}

// clearDeaths forgets the death counts of keys a definition applied cleanly.
func (e *Quarantine) clearDeaths(ctx context.Context, tx pgx.Tx, def int64, keys []pageKey) error {
	if len(keys) == 0 {
		return nil
	}
	ts := make([]string, len(keys))
	ks := make([]string, len(keys))
	for i, k := range keys {
		ts[i], ks[i] = k.table, k.key
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s kd USING unnest($2::text[], $3::text[]) AS u(t, k)
		WHERE kd.definition_id = $1 AND kd.src_table = u.t AND kd.key = u.k`, e.tbl("_key_deaths")), def, ts, ks)
	return err
}

// chargeFailures counts a death for each failure; a key at the fifth death
// is held for its definition (_poison, with the page's origin for the key);
// below it the key is staged again (a 'rederive' row with the key's origin,
// so convergence stays pending) and retried in a later batch. Five held keys
// quarantine the definition.
func (e *Quarantine) chargeFailures(ctx context.Context, tx pgx.Tx, cd *compiledDef, failed []keyFailure, meta map[pageKey]keyMeta) error {
	poisoned := 0
	for _, f := range failed {
		m := meta[pageKey{f.table, f.key}]
		var deaths int
		if err := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s AS kd (definition_id, src_table, key, deaths, last_error, last_sqlstate)
			VALUES ($1, $2, $3, 1, $4, $5)
			ON CONFLICT (definition_id, src_table, key) DO UPDATE SET deaths = kd.deaths + 1,
			  last_error = excluded.last_error, last_sqlstate = excluded.last_sqlstate, last_failed_at = now()
			RETURNING deaths`, e.tbl("_key_deaths")), f.def, f.table, f.key, errMessage(f.err), base.Code(f.err)).Scan(&deaths); err != nil {
			return err
		}
		// A key another page held after this one read the holds (its page
		// read _poison before that commit): the death is stale, and kept it
		// would stay forever (a held key is skipped, so nothing applies it
		// cleanly again). The upsert above waited out the holding page's
		// own death-row delete, so this statement sees its hold. The skipped
		// change lowers the hold's origin, as poisonedKeys does.
		tag, err := tx.Exec(ctx, fmt.Sprintf(`WITH held AS (UPDATE %[1]s p SET origin_lsn =
			  CASE WHEN p.origin_lsn IS NULL OR $4::text IS NULL THEN NULL ELSE least(p.origin_lsn, $4::text::pg_lsn) END
			  WHERE p.definition_id = $1 AND p.src_table = $2 AND p.Key = $3 RETURNING 1)
			DELETE FROM %[2]s kd WHERE kd.definition_id = $1 AND kd.src_table = $2 AND kd.key = $3 AND EXISTS (SELECT 1 FROM held)`,
			e.tbl("_poison"), e.tbl("_key_deaths")), f.def, f.table, f.key, m.origin)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			e.log.Info("key failed but is already held; not charged", "definition", f.def, "target", cd.C.TargetText, "table", f.table)
			continue
		}
		if deaths < deathsToPoison {
			e.log.Info("key failed; retried in a later batch", append([]any{"definition", f.def, "target", cd.C.TargetText,
				"table", f.table, "deaths", deaths}, base.ErrAttrs(f.err)...)...)
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (src_table, key, op, definition_id, origin_lsn, hop)
				VALUES ($1, $2, 'rederive', $3, $4::text::pg_lsn, $5)`, e.tbl("_change_log")), f.table, f.key, f.def, m.origin, m.hop); err != nil {
				return err
			}
			continue
		}
		// The key and the error text are row data: trellis.quarantined shows
		// them to those who may see the transform; the log does not.
		e.logFailure("key held (poisoned) for one transform", f.err, "definition", f.def, "target", cd.C.TargetText,
			"table", f.table, "deaths", deaths)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS p (definition_id, src_table, key, error, sqlstate, origin_lsn)
			VALUES ($1, $2, $3, $4, $5, $6::text::pg_lsn)
			ON CONFLICT (definition_id, src_table, key) DO UPDATE SET error = excluded.error, sqlstate = excluded.sqlstate,
			  origin_lsn = CASE WHEN p.origin_lsn IS NULL OR excluded.origin_lsn IS NULL THEN NULL
			                    ELSE least(p.origin_lsn, excluded.origin_lsn) END`, e.tbl("_poison")),
			f.def, f.table, f.key, errMessage(f.err), base.Code(f.err), m.origin); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE definition_id = $1 AND src_table = $2 AND key = $3`,
			e.tbl("_key_deaths")), f.def, f.table, f.key); err != nil {
			return err
		}
		poisoned++
	}
	if poisoned == 0 {
		return nil
	}
	var held int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE definition_id = $1`, e.tbl("_poison")), cd.id).Scan(&held); err != nil {
		return err
	}
	if held < heldKeysToQuarantine {
		return nil
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'quarantined',
		status_detail = coalesce(status_detail, '{}'::jsonb) || jsonb_build_object('quarantine',
		  jsonb_build_object('at', now(), 'held_keys', $2::int8, 'reason', $3::text))
		WHERE id = $1 AND status IN ('live', 'backfilling')`, e.tbl("_definitions")), cd.id, held,
		fmt.Sprintf("%d source keys held", held))
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		e.log.Warn("transform quarantined: too many held keys", "definition", cd.id, "target", cd.C.TargetText, "held_keys", held)
	}
	return nil
}

// chargeBuildFailure records a failed build task: attempts, last error and
// SQLSTATE, the next attempt; the fifth charged attempt pauses the
// definition with a backfill_failure (surface §5.2, §13).
func (e *Quarantine) chargeBuildFailure(ctx context.Context, taskID, defID, build int64, serr error) {
	tx, err := e.workers.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		e.log.Warn("recording a build failure", "definition", defID, "err", err)
		return
	}
	defer tx.Rollback(context.Background())
	var attempts int
	var next time.Time
	if err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = $2, last_sqlstate = $3,
		next_attempt_at = `+retryAfterSQL+`
		WHERE id = $1 RETURNING attempts, next_attempt_at`, e.tbl("_build_tasks")), taskID, errMessage(serr), base.Code(serr)).
		Scan(&attempts, &next); err != nil {
		e.log.Warn("recording a build failure", "definition", defID, "err", err)
		return
	}
	var srcTable string
	_ = tx.QueryRow(ctx, fmt.Sprintf(`SELECT source_table FROM %s WHERE id = $1`, e.tbl("_definitions")), defID).Scan(&srcTable)
	if attempts >= buildAttemptsToPause {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'paused',
			status_detail = coalesce(status_detail, '{}'::jsonb) || jsonb_build_object('backfill_failure', jsonb_build_object(
			  'source_table', source_table, 'attempts', $3::int, 'last_error', $4::text, 'sqlstate', nullif($5::text, ''),
			  'next_attempt_at', NULL, 'paused', true))
			WHERE id = $1 AND build_id = $2 AND status = 'backfilling'`, e.tbl("_definitions")),
			defID, build, attempts, errMessage(serr), base.Code(serr)); err != nil {
			e.log.Warn("pausing a failing build", "definition", defID, "err", err)
			return
		}
		e.logFailure("build paused after repeated failures", serr, "definition", defID, "source", srcTable, "attempts", attempts)
	} else {
		e.logFailure("build task failed", serr, "definition", defID, "task", taskID, "attempts", attempts, "next_attempt_at", next)
	}
	if err := tx.Commit(ctx); err != nil {
		e.log.Warn("recording a build failure", "definition", defID, "err", err)
	}
}

// retryAfterSQL is when a charged retry (a build task, a trash drop) runs
// next: 1 s doubling to 5 min with the row's attempts so far (surface §13).
const retryAfterSQL = "now() + make_interval(secs => least(power(2, attempts)::float8, 300))"
