package build

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
)

// Build planning: a build's key ranges (chunk tasks) cut from the source
// by its key order or its histogram, and the range predicates of a chunk.

// freshChunkRows is the size of a fresh build's chunk: one set-based
// statement per step, so bigger than a locked-path chunk.
func (e *Builder) freshChunkRows(c *model.Compiled, heap bool) int {
	if c.Spec.IsAggregate() && !heap {
		// Aggregate chunks run one at a time (the other worker waits out
		// its lock timeout on the ledger): fewer, bigger ones.
		return 4 * e.Cfg.FreshChunkSize
	}
	return e.Cfg.FreshChunkSize
}

// planStepRows bounds the source keys one plan step walks.
const planStepRows = 100_000

// plan walks the source key after lo and records chunk tasks (lo, hi], at
// most planStepRows keys' worth; finished, it stopped at the current
// maximum (later rows are captured), else next is where the following step
// goes on. It returns the rows it planned.
func (e *Builder) plan(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, build int64, fresh, heap bool, lo *string, until time.Time) (n int64, next *string, finished bool, err error) {
	c := cd.C
	size := e.Cfg.BuildChunkSize
	if fresh {
		size = e.freshChunkRows(c, heap)
	}
	ins := fmt.Sprintf("INSERT INTO %s (definition_id, build_id, kind, lo, hi) VALUES ($1, $2, 'chunk', $3, $4)", e.Tbl("_build_tasks"))
	if c.KeyNullable {
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+c.Source()).Scan(&n); err != nil {
			return 0, nil, false, err
		}
		_, err := tx.Exec(ctx, ins, cd.ID, build, nil, nil)
		return n, nil, err == nil, err
	}
	stepRows := planStepRows
	if e.Plant.PlanStepRows > 0 {
		stepRows = e.Plant.PlanStepRows
	}
	steps := max(1, stepRows/size)
	var total int64
	if fresh && lo == nil && len(c.Key) == 1 && e.Plant.PlanStepRows == 0 {
		var err error
		if total, lo, err = e.planFromHistogram(ctx, tx, cd, build, size); err != nil {
			return 0, nil, false, err
		}
	}
	order := sqlgen.Joinf(len(c.Key), func(i int) string { return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) }, ", ")
	orderW := sqlgen.Joinf(len(c.Key), func(i int) string { return base.Ident(model.SourceAlias) + "." + base.Ident(c.Key[i].Name) + " DESC" }, ", ")
	from := " FROM " + c.Source() + " AS " + base.Ident(model.SourceAlias)
	key := model.KeySQL(base.Ident(model.SourceAlias), c.Key, false)
	for step := 0; ; step++ {
		// Bounded by keys and by the step budget (each chunk boundary is
		// an index walk of a chunk's keys), at least one chunk a step.
		if step == steps || (step > 0 && time.Now().After(until)) {
			return total, lo, false, nil
		}
		// The key size rows on: one walk of the key's index, nothing kept.
		where, args := sqlgen.RangeWhere(c, lo, nil, 2)
		var hi *string
		err := tx.QueryRow(ctx, "SELECT "+key+from+where+" ORDER BY "+order+" OFFSET $1 LIMIT 1",
			append([]any{size - 1}, args...)...).Scan(&hi)
		if err == nil {
			if _, err := tx.Exec(ctx, ins, cd.ID, build, lo, hi); err != nil {
				return 0, nil, false, err
			}
			total += int64(size)
			lo = hi
			continue
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, nil, false, err
		}
		// Fewer than size rows left: the last chunk ends at the current
		// maximum (rows inserted later are captured).
		where, args = sqlgen.RangeWhere(c, lo, nil, 1)
		var n int64
		err = tx.QueryRow(ctx, "SELECT (SELECT "+key+from+where+" ORDER BY "+orderW+" LIMIT 1), (SELECT count(*)"+from+where+")", args...).Scan(&hi, &n)
		if err != nil {
			return 0, nil, false, err
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, ins, cd.ID, build, lo, hi); err != nil {
				return 0, nil, false, err
			}
		}
		return total + n, nil, true, nil
	}
}

// planFromHistogram records the first chunks of a fresh build from the
// key column's histogram (pg_stats, from the source's last ANALYZE) instead
// of walking the key's index for every boundary: every k-th bound, so that
// a chunk holds about size rows. It returns the rows planned (estimated)
// and the last bound, where the walk goes on: keys past it (the table grew
// since its ANALYZE, or the sample missed the top) are planned by walking.
// Stale statistics only make chunks uneven; the ranges still cover every
// key. Nothing is planned without a histogram, or when its buckets are
// bigger than a chunk.
func (e *Builder) planFromHistogram(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, build int64, size int) (int64, *string, error) {
	c := cd.C
	k := c.Key[0]
	// Every bound, rendered as a key (a histogram has at most 10,001).
	var reltuples float64
	var all []string
	err := tx.QueryRow(ctx, `SELECT greatest(cl.reltuples, 0)::float8,
		  coalesce((SELECT array_agg(`+model.KeySQL("h", c.Key, false)+` ORDER BY h.i)
		    FROM unnest(st.histogram_bounds::text::`+k.Type+`[]) WITH ORDINALITY AS h(`+base.Ident(k.Name)+`, i)), '{}')
		FROM pg_catalog.pg_class cl JOIN pg_catalog.pg_namespace n ON n.oid = cl.relnamespace
		LEFT JOIN pg_catalog.pg_stats st ON st.schemaname = n.nspname AND st.tablename = cl.relname AND st.attname = $2 AND NOT st.inherited
		WHERE cl.oid = to_regclass($1)`, c.Source(), k.Name).Scan(&reltuples, &all)
	if errors.Is(err, pgx.ErrNoRows) || len(all) < 2 {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	perBucket := reltuples / float64(len(all)-1)
	if perBucket < 1 || perBucket > float64(size) {
		return 0, nil, nil
	}
	every := max(1, int(float64(size)/perBucket))
	var bounds []string
	for i := every; i <= len(all); i += every { // 1-based, as the ordinality was
		bounds = append(bounds, all[i-1])
	}
	if len(bounds) == 0 {
		return 0, nil, nil
	}
	// The first chunk starts before the smallest key: (NULL, b1].
	if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (definition_id, build_id, kind, lo, hi)
		SELECT $1, $2, 'chunk', lag(b) OVER (ORDER BY i), b FROM unnest($3::text[]) WITH ORDINALITY AS u(b, i)`,
		e.Tbl("_build_tasks")), cd.ID, build, bounds); err != nil {
		return 0, nil, err
	}
	return int64(float64(len(bounds)*every) * perBucket), &bounds[len(bounds)-1], nil
}
