package quarantine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// Quarantine finds the keys and columns that make a page or build step
// fail, and holds them apart (per transform).
type Quarantine struct {
	*derive.Deriver
}

// New returns the quarantine over d.
func New(d *derive.Deriver) *Quarantine { return &Quarantine{Deriver: d} }

// Quarantine (engine spec §12.12, surface §6, §13 fuses).
const (
	// deathsToPoison is how many failing re-derivations hold a key for one
	// definition.
	deathsToPoison = 5
	// HeldKeysToQuarantine is how many held keys quarantine a definition.
	HeldKeysToQuarantine = 5
	// failingRowsToPause is how many failing rows pause a 1-1 column.
	failingRowsToPause = 5
	// buildAttemptsToPause is the charged chunk attempt that pauses a build.
	buildAttemptsToPause = 5
)

// Poisonous reports whether a failure can be attributed to the rows being
// applied (§12.12 "poisonous"): a data exception raised by a formula (class
// 22: division by zero, a cast, an out-of-range value) or a constraint on
// the target refusing a row (class 23). Everything else that is not
// transient is a holdup of the whole page.
func Poisonous(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")
}

// KeyFailure is one (definition, key) that failed alone in a probe.
type KeyFailure struct {
	Def        int64
	Table, Key string
	Err        error
	column     string // the 1-1 field that fails alone for the key, if one does
}

// ErrMessage is the message of a Postgres error, else the error text.
func ErrMessage(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message
	}
	return err.Error()
}

// PoisonedKeys returns, per definition, the page's keys held for it, and
// lowers each hold's origin to the least origin it skips (NULL wins), so the
// skipped changes stay pending for convergence. Outside a probe it also
// clears the death counts of the page's keys: a page that commits applied
// them cleanly.
func (e *Quarantine) PoisonedKeys(ctx context.Context, tx pgx.Tx, defs []derive.ReaderDef, keys []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta, probe bool) (map[int64]map[derive.PageKey]bool, error) {
	if len(keys) == 0 || len(defs) == 0 {
		return nil, nil
	}
	ts := make([]string, len(keys))
	ks := make([]string, len(keys))
	for i, k := range keys {
		ts[i], ks[i] = k.Table, k.Key
	}
	ids := make([]int64, 0, len(defs))
	for _, d := range defs {
		ids = append(ids, d.Def.ID)
	}
	rows, err := tx.Query(ctx, fmt.Sprintf(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[]) AS u(t, k)),
		cleared AS (DELETE FROM %[1]s kd USING u WHERE NOT $4 AND kd.src_table = u.t AND kd.key = u.k RETURNING 1)
		SELECT p.definition_id, p.src_table, p.Key FROM %[2]s p JOIN u ON p.src_table = u.t AND p.Key = u.k
		WHERE p.definition_id = ANY($3::int8[])`, e.Tbl("_key_deaths"), e.Tbl("_poison")), ts, ks, ids, probe)
	if err != nil {
		return nil, err
	}
	var out map[int64]map[derive.PageKey]bool
	var ud []int64
	var ut, uk []string
	var uo []*string
	for rows.Next() {
		var d int64
		var k derive.PageKey
		if err := rows.Scan(&d, &k.Table, &k.Key); err != nil {
			rows.Close()
			return nil, err
		}
		if out == nil {
			out = map[int64]map[derive.PageKey]bool{}
		}
		if out[d] == nil {
			out[d] = map[derive.PageKey]bool{}
		}
		out[d][k] = true
		ud, ut, uk, uo = append(ud, d), append(ut, k.Table), append(uk, k.Key), append(uo, meta[k].Origin)
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
			  AND p.origin_lsn IS NOT NULL AND (s.o IS NULL OR s.o::pg_lsn < p.origin_lsn)`, e.Tbl("_poison")), ud, ut, uk, uo); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ProbeApply applies keys of one definition under a savepoint; when that
// fails with a poisonous error it re-derives each key under its own
// savepoint, keeps the ones that apply and charges the ones that fail alone
// (§12.12 isolate, count, evict). Transient and halting errors end the page.
func (e *Quarantine) ProbeApply(ctx context.Context, tx pgx.Tx, d derive.ReaderDef, keys []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta) error {
	if len(keys) == 0 {
		return nil
	}
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = k.Key
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT trellis_probe"); err != nil {
		return err
	}
	err := e.ApplyKeys(ctx, tx, d.Def, ks)
	if err == nil {
		if _, err = tx.Exec(ctx, "RELEASE SAVEPOINT trellis_probe"); err != nil {
			return err
		}
		return e.clearDeaths(ctx, tx, d.Def.ID, keys)
	}
	if !Poisonous(err) {
		return err
	}
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_probe"); err != nil {
		return err
	}
	var failed []KeyFailure
	var applied []derive.PageKey
	for _, k := range keys {
		if _, err := tx.Exec(ctx, "SAVEPOINT trellis_probe_key"); err != nil {
			return err
		}
		kerr := e.ApplyKeys(ctx, tx, d.Def, []string{k.Key})
		if kerr != nil && !Poisonous(kerr) {
			return kerr
		}
		if kerr != nil {
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_probe_key"); err != nil {
				return err
			}
			f := KeyFailure{Def: d.Def.ID, Table: k.Table, Key: k.Key, Err: kerr}
			if err := e.attributeColumn(ctx, tx, d.Def, &f); err != nil {
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
	if err := e.clearDeaths(ctx, tx, d.Def.ID, applied); err != nil {
		return err
	}
	if err := e.chargeColumns(ctx, tx, d.Def, failed); err != nil {
		return err
	}
	return e.ChargeFailures(ctx, tx, d.Def, failed, meta)
}

// attributeColumn evaluates each unpaused field of a 1-1 definition alone
// for a key that failed, and names the first that raises (§12.12 "the probe
// can also evaluate each compiled field alone").
func (e *Quarantine) attributeColumn(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, f *KeyFailure) error {
	if cd.C.Spec.IsAggregate() || len(cd.FieldProbe) == 0 {
		return nil
	}
	args, _, _ := model.KeyArgs([]string{f.Key}, cd.C.Key, cd.C.KeyNullable)
	for _, fl := range cd.C.Spec.Fields {
		q, ok := cd.FieldProbe[fl.Name]
		if !ok {
			continue
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT trellis_probe_col"); err != nil {
			return err
		}
		_, ferr := tx.Exec(ctx, q, args...)
		if ferr != nil && !Poisonous(ferr) {
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
			f.column, f.Err = fl.Name, ferr
			return nil
		}
	}
	return nil
}

// chargeColumns records failing rows per (definition, column); a column
// with 5 distinct failing rows is paused: it is no longer written and keeps
// its values (surface §6.1). Its keys then apply without it.
func (e *Quarantine) chargeColumns(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, failed []KeyFailure) error {
	cols := map[string]bool{}
	for _, f := range failed {
		if f.column == "" {
			continue
		}
		cols[f.column] = true
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, column_name, src_table, key, error, sqlstate)
			VALUES ($1, $2, $3, $4, $5, nullif($6, ''))
			ON CONFLICT (definition_id, column_name, src_table, key) DO UPDATE SET error = excluded.error,
			  sqlstate = excluded.sqlstate, failed_at = now()`, e.Tbl("_column_failures")),
			f.Def, f.column, f.Table, f.Key, ErrMessage(f.Err), base.Code(f.Err)); err != nil {
			return err
		}
	}
	for col := range cols {
		tag, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %[1]s (definition_id, column_name, last_error, sqlstate)
			SELECT $1, $2, (array_agg(f.error ORDER BY f.failed_at DESC))[1], (array_agg(f.sqlstate ORDER BY f.failed_at DESC))[1]
			FROM %[2]s f WHERE f.definition_id = $1 AND f.column_name = $2
			HAVING count(*) >= $3
			ON CONFLICT (definition_id, column_name) DO NOTHING`, e.Tbl("_paused_columns"), e.Tbl("_column_failures")),
			cd.ID, col, failingRowsToPause)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			// Readers of the column downstream pause with it (grammar §4.3).
			var cascaded []string
			if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT %s._pause_cascade($1, $2)`, base.Ident(e.Cfg.Schema)), cd.ID, col).Scan(&cascaded); err != nil {
				return err
			}
			e.Log.Warn("column paused: its formula fails on too many rows", "definition", cd.ID, "target", cd.C.TargetText, "column", col,
				"cascaded", cascaded)
		}
	}
	return nil
}

// clearDeaths forgets the death counts of keys a definition applied cleanly.
func (e *Quarantine) clearDeaths(ctx context.Context, tx pgx.Tx, def int64, keys []derive.PageKey) error {
	if len(keys) == 0 {
		return nil
	}
	ts := make([]string, len(keys))
	ks := make([]string, len(keys))
	for i, k := range keys {
		ts[i], ks[i] = k.Table, k.Key
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s kd USING unnest($2::text[], $3::text[]) AS u(t, k)
		WHERE kd.definition_id = $1 AND kd.src_table = u.t AND kd.key = u.k`, e.Tbl("_key_deaths")), def, ts, ks)
	return err
}

// ChargeFailures counts a death for each failure; a key at the fifth death
// is held for its definition (_poison, with the page's origin for the key);
// below it the key is staged again (a 'rederive' row with the key's origin,
// so convergence stays pending) and retried in a later batch. Five held keys
// quarantine the definition.
func (e *Quarantine) ChargeFailures(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, failed []KeyFailure, meta map[derive.PageKey]derive.KeyMeta) error {
	poisoned := 0
	for _, f := range failed {
		m := meta[derive.PageKey{Table: f.Table, Key: f.Key}]
		var deaths int
		if err := tx.QueryRow(ctx, fmt.Sprintf(`INSERT INTO %s AS kd (definition_id, src_table, key, deaths, last_error, last_sqlstate)
			VALUES ($1, $2, $3, 1, $4, $5)
			ON CONFLICT (definition_id, src_table, key) DO UPDATE SET deaths = kd.deaths + 1,
			  last_error = excluded.last_error, last_sqlstate = excluded.last_sqlstate, last_failed_at = now()
			RETURNING deaths`, e.Tbl("_key_deaths")), f.Def, f.Table, f.Key, ErrMessage(f.Err), base.Code(f.Err)).Scan(&deaths); err != nil {
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
			e.Tbl("_poison"), e.Tbl("_key_deaths")), f.Def, f.Table, f.Key, m.Origin)
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			e.Log.Info("key failed but is already held; not charged", "definition", f.Def, "target", cd.C.TargetText, "table", f.Table)
			continue
		}
		if deaths < deathsToPoison {
			e.Log.Info("key failed; retried in a later batch", append([]any{"definition", f.Def, "target", cd.C.TargetText,
				"table", f.Table, "deaths", deaths}, base.ErrAttrs(f.Err)...)...)
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (src_table, key, op, definition_id, origin_lsn, hop)
				VALUES ($1, $2, 'rederive', $3, $4::text::pg_lsn, $5)`, e.Tbl("_change_log")), f.Table, f.Key, f.Def, m.Origin, m.Hop); err != nil {
				return err
			}
			continue
		}
		// The key and the error text are row data: trellis.quarantined shows
		// them to those who may see the transform; the log does not.
		e.LogFailure("key held (poisoned) for one transform", f.Err, "definition", f.Def, "target", cd.C.TargetText,
			"table", f.Table, "deaths", deaths)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS p (definition_id, src_table, key, error, sqlstate, origin_lsn)
			VALUES ($1, $2, $3, $4, $5, $6::text::pg_lsn)
			ON CONFLICT (definition_id, src_table, key) DO UPDATE SET error = excluded.error, sqlstate = excluded.sqlstate,
			  origin_lsn = CASE WHEN p.origin_lsn IS NULL OR excluded.origin_lsn IS NULL THEN NULL
			                    ELSE least(p.origin_lsn, excluded.origin_lsn) END`, e.Tbl("_poison")),
			f.Def, f.Table, f.Key, ErrMessage(f.Err), base.Code(f.Err), m.Origin); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE definition_id = $1 AND src_table = $2 AND key = $3`,
			e.Tbl("_key_deaths")), f.Def, f.Table, f.Key); err != nil {
			return err
		}
		poisoned++
	}
	if poisoned == 0 {
		return nil
	}
	var held int64
	if err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE definition_id = $1`, e.Tbl("_poison")), cd.ID).Scan(&held); err != nil {
		return err
	}
	if held < HeldKeysToQuarantine {
		return nil
	}
	tag, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'quarantined',
		status_detail = coalesce(status_detail, '{}'::jsonb) || jsonb_build_object('quarantine',
		  jsonb_build_object('at', now(), 'held_keys', $2::int8, 'reason', $3::text))
		WHERE id = $1 AND status IN ('live', 'backfilling')`, e.Tbl("_definitions")), cd.ID, held,
		fmt.Sprintf("%d source keys held", held))
	if err != nil {
		return err
	}
	if tag.RowsAffected() > 0 {
		e.Log.Warn("transform quarantined: too many held keys", "definition", cd.ID, "target", cd.C.TargetText, "held_keys", held)
	}
	return nil
}

// ChargeBuildFailure records a failed build task: attempts, last error and
// SQLSTATE, the next attempt; the fifth charged attempt pauses the
// definition with a backfill_failure (surface §5.2, §13).
func (e *Quarantine) ChargeBuildFailure(ctx context.Context, taskID, defID, build int64, serr error) {
	tx, err := e.Workers.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		e.Log.Warn("recording a build failure", "definition", defID, "err", err)
		return
	}
	defer tx.Rollback(context.Background())
	var attempts int
	var next time.Time
	if err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = $2, last_sqlstate = $3,
		next_attempt_at = `+RetryAfterSQL+`
		WHERE id = $1 RETURNING attempts, next_attempt_at`, e.Tbl("_build_tasks")), taskID, ErrMessage(serr), base.Code(serr)).
		Scan(&attempts, &next); err != nil {
		e.Log.Warn("recording a build failure", "definition", defID, "err", err)
		return
	}
	var srcTable string
	_ = tx.QueryRow(ctx, fmt.Sprintf(`SELECT source_table FROM %s WHERE id = $1`, e.Tbl("_definitions")), defID).Scan(&srcTable)
	if attempts >= buildAttemptsToPause {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'paused',
			status_detail = coalesce(status_detail, '{}'::jsonb) || jsonb_build_object('backfill_failure', jsonb_build_object(
			  'source_table', source_table, 'attempts', $3::int, 'last_error', $4::text, 'sqlstate', nullif($5::text, ''),
			  'next_attempt_at', NULL, 'paused', true))
			WHERE id = $1 AND build_id = $2 AND status = 'backfilling'`, e.Tbl("_definitions")),
			defID, build, attempts, ErrMessage(serr), base.Code(serr)); err != nil {
			e.Log.Warn("pausing a failing build", "definition", defID, "err", err)
			return
		}
		e.LogFailure("build paused after repeated failures", serr, "definition", defID, "source", srcTable, "attempts", attempts)
	} else {
		e.LogFailure("build task failed", serr, "definition", defID, "task", taskID, "attempts", attempts, "next_attempt_at", next)
	}
	if err := tx.Commit(ctx); err != nil {
		e.Log.Warn("recording a build failure", "definition", defID, "err", err)
	}
}

// RetryAfterSQL is when a charged retry (a build task, a trash drop) runs
// next: 1 s doubling to 5 min with the row's attempts so far (surface §13).
const RetryAfterSQL = "now() + make_interval(secs => least(power(2, attempts)::float8, 300))"
