package build

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
)

// A build chunk's locked path: its keys re-derived slice by slice under
// the step's time budget, a refused row charged like a drained one.

// applyChunk re-derives a build chunk's keys, in the order given, slice by
// slice, until all are done or the step's time is up (until; zero: no
// limit), and returns how many it applied (a prefix of keys, at least one
// slice). When a formula or a target constraint refuses a row, its slice
// is applied again key by key under savepoints: failing keys are charged
// and staged again (origin unknown), so one bad row is held like a drained
// one instead of failing the build.
func (e *Builder) applyChunk(ctx context.Context, tx pgx.Tx, cd *derive.CompiledDef, keys []string, until time.Time) (int, error) {
	return e.applySlices(keys, until, func(slice []string) error {
		if _, err := tx.Exec(ctx, "SAVEPOINT trellis_chunk"); err != nil {
			return err
		}
		err := e.ApplyKeys(ctx, tx, cd, slice)
		if err == nil || !quarantine.Poisonous(err) {
			if err == nil {
				_, err = tx.Exec(ctx, "RELEASE SAVEPOINT trellis_chunk")
			}
			return err
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_chunk"); err != nil {
			return err
		}
		e.Log.Info("build chunk failed; probing its keys", "definition", cd.ID, "err", err)
		meta := map[derive.PageKey]derive.KeyMeta{}
		pks := make([]derive.PageKey, len(slice))
		for i, k := range slice {
			pks[i] = derive.PageKey{Table: cd.C.SourceText, Key: k}
			meta[pks[i]] = derive.KeyMeta{Hop: 1}
		}
		if err := e.ProbeApply(ctx, tx, derive.ReaderDef{Table: cd.C.SourceText, Def: cd}, pks, meta); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT trellis_chunk")
		return err
	})
}

// applySlices calls apply on consecutive slices of keys until all are
// applied or until has passed, and returns how many were. Without a
// deadline slices are PageSize keys; with one, the first is firstSliceKeys
// and each next one what the time left allows at the pace so far, so a
// step ends close to its budget.
func (e *Builder) applySlices(keys []string, until time.Time, apply func([]string) error) (int, error) {
	size := e.Cfg.PageSize
	if !until.IsZero() {
		size = firstSliceKeys
		if e.Plant.FirstSlice > 0 {
			size = e.Plant.FirstSlice
		}
	}
	var done int
	t0 := time.Now()
	for done < len(keys) {
		size = max(1, min(size, e.Cfg.PageSize))
		n := min(size, len(keys)-done)
		if err := apply(keys[done : done+n]); err != nil {
			return done, err
		}
		done += n
		if until.IsZero() {
			continue
		}
		left := time.Until(until)
		if left <= 0 {
			break
		}
		perKey := time.Since(t0) / time.Duration(done)
		size = int(left / max(perKey, time.Microsecond))
	}
	return done, nil
}

// firstSliceKeys is the first slice of a budgeted build step: small enough
// to fit the budget on a loaded box; later slices are sized from its pace.
const firstSliceKeys = 500
