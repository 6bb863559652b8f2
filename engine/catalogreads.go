package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// What code outside the engine may know of the catalog (issue 15, enforced
// by internal/depcheck): the read views (catalog/reads), the catalog
// functions, and the functions of this file. None of them names a storage
// table to its caller.

// SelfCheckRun is a self-check job's own accounting.
type SelfCheckRun struct {
	Took        time.Duration // created (queued) to finished; 0 while it runs
	Pages       int64
	Rows        int64 // rows compared
	Divergences int64
}

// SelfCheckRun reads the accounting of self-check job id (benchmarks and
// tools: trellis.self_checks shows no page count).
func (e *Engine) SelfCheckRun(ctx context.Context, id int64) (SelfCheckRun, error) {
	var r SelfCheckRun
	var secs float64
	err := e.w.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(extract(epoch FROM finished_at - created_at), 0)::float8, pages::int8,
		rows_compared, divergence_count::int8 FROM %s WHERE id = $1`, e.w.Tbl("_self_checks")), id).Scan(&secs, &r.Pages, &r.Rows, &r.Divergences)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, pgerr.Newf(pgerr.UndefinedObject, "self-check %d does not exist", id).
			WithClass("not_found", "SelfCheckNotFound").WithHint("it was replaced by a newer check of its target, or its transform was dropped")
	}
	r.Took = time.Duration(secs * float64(time.Second))
	return r, err
}
