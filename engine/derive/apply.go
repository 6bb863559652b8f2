package derive

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/engine/sqlgen"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Deriver re-derives keys of a definition: the compiled-plan cache and the
// statements that lock ledger entries and write target rows.
type Deriver struct {
	*worker.Env
	cacheMu sync.Mutex
	cache   map[int64]*CompiledDef
	plantJC joinCopies // the joinReadEarly fault's copies
}

// New returns the deriver of env's workers.
func New(env *worker.Env) *Deriver {
	return &Deriver{Env: env, cache: map[int64]*CompiledDef{}}
}

// CompiledDef is a definition's generated SQL (engine/sqlgen), cached by
// (id, version) and the paused fields it was generated for.
type CompiledDef struct {
	ID, Version int64
	pausedKey   string
	*sqlgen.Def
}

func (e *Deriver) CompiledFor(id, version int64, raw []byte) (*CompiledDef, error) {
	return e.CompiledForPaused(id, version, raw, nil)
}

// CompiledForPaused is compiledFor for a definition with paused columns.
func (e *Deriver) CompiledForPaused(id, version int64, raw []byte, paused []string) (*CompiledDef, error) {
	pk := strings.Join(paused, "\x00")
	e.cacheMu.Lock()
	cd := e.cache[id]
	e.cacheMu.Unlock()
	if cd != nil && cd.Version == version && cd.pausedKey == pk {
		return cd, nil
	}
	c := &model.Compiled{}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("definition %d: bad compiled form: %w", id, err)
	}
	ps := map[string]bool{}
	for _, p := range paused {
		ps[p] = true
	}
	cd = &CompiledDef{ID: id, Version: version, pausedKey: pk, Def: sqlgen.Generate(c, ps)}
	e.cacheMu.Lock()
	e.cache[id] = cd
	e.cacheMu.Unlock()
	return cd, nil
}

// ErrLockShort means a concurrent page deleted a ledger entry between our
// insert and our lock: retry the page.
var ErrLockShort = fmt.Errorf("ledger lock incomplete; retrying")

// ApplyKeys re-derives keys of one definition inside tx: lock the entries,
// then, in the next statement, read the source live and write (§12.6).
func (e *Deriver) ApplyKeys(ctx context.Context, tx pgx.Tx, cd *CompiledDef, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	keys = slices.Clone(keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	args, _, bad := model.KeyArgs(keys, cd.C.Key, cd.C.KeyNullable)
	if len(bad) > 0 {
		e.Log.Warn("undecodable keys skipped", "definition", cd.ID, "count", len(bad))
	}
	good := args[0].([]string)
	derive := cd.Derive
	if e.Plant.JoinReadEarly > 0 && len(cd.C.Spec.Joins) > 0 {
		var err error
		if derive, err = e.plantReadJoinsEarly(ctx, cd); err != nil {
			return err
		}
	}
	locked := false
	for attempt := 0; attempt < 5 && !locked; attempt++ {
		if _, err := tx.Exec(ctx, cd.LockInsert, good); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, cd.LockSelect, good).Scan(&n); err != nil {
			return err
		}
		locked = n == len(good)
	}
	if !locked {
		return ErrLockShort
	}
	if e.Plant.PageHook != nil {
		e.Plant.PageHook("locked " + cd.C.Spec.Target.Name)
	}
	if !cd.C.Spec.IsAggregate() {
		_, err := tx.Exec(ctx, derive, args...)
		if err == nil {
			countRederived(ctx, cd.C.Spec.Target.Name, len(good)) // reported only if the page commits
		}
		return err
	}
	rows, err := tx.Query(ctx, derive, args...)
	if err != nil {
		return err
	}
	tids, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.TID])
	if err != nil {
		return err
	}
	if err := TidyGroups(ctx, tx, cd, tids); err != nil {
		return err
	}
	if _, err = tx.Exec(ctx, cd.LedgerGC, good); err == nil {
		countRederived(ctx, cd.C.Spec.Target.Name, len(good))
	}
	return err
}

// TidyGroups finishes the group rows a derive wrote (tids): those left
// without members deleted, recomputed fields (MIN, MAX, …) read again
// from their ledger entries.
func TidyGroups(ctx context.Context, tx pgx.Tx, cd *CompiledDef, tids []pgtype.TID) error {
	if len(tids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, cd.DeleteEmpty, tids); err != nil {
		return err
	}
	if cd.Recompute != "" {
		if _, err := tx.Exec(ctx, cd.Recompute, tids); err != nil {
			return err
		}
	}
	return nil
}

// joinCopies are the joinReadEarly fault's copies of joined tables, per
// definition: a generation of tables, taken outside any page's ledger
// lock and read until it is joinReadEarly old.
type joinCopies struct {
	mu  sync.Mutex
	at  map[int64]time.Time
	gen map[int64]int
}

// plantCopyGen numbers the joinReadEarly copies across engines.
var plantCopyGen atomic.Int64

// plantReadJoinsEarly is the joinReadEarly fault: the derive rewritten to
// read the definition's current copies of its joined tables, copied again
// (in their own transaction, before this page's lock) once they are
// joinReadEarly old. A dimension change in that window is read stale by
// every re-derive, its own fan-out's among them.
func (e *Deriver) plantReadJoinsEarly(ctx context.Context, cd *CompiledDef) (string, error) {
	jc := &e.plantJC
	jc.mu.Lock()
	if jc.at == nil {
		jc.at, jc.gen = map[int64]time.Time{}, map[int64]int{}
	}
	if time.Since(jc.at[cd.ID]) >= e.Plant.JoinReadEarly {
		// Under a lock timeout: the copy can queue behind a TRUNCATE that
		// waits for a page that waits for this mutex. Timed out, the old
		// copies serve on. Generations are numbered across the process:
		// the engines of one test share a database and must not name the
		// same copy.
		next := plantCopyGen.Add(1)
		err := pgx.BeginFunc(ctx, e.Workers, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '200ms'"); err != nil {
				return err
			}
			for i, j := range cd.C.Spec.Joins {
				if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE %s AS SELECT * FROM %s",
					e.Tbl(fmt.Sprintf("plant_%d_%d_%d", cd.ID, i+1, next)), j.Table.Quoted())); err != nil {
					return err
				}
			}
			return nil
		})
		switch {
		case err == nil:
			jc.gen[cd.ID] = int(next)
			jc.at[cd.ID] = time.Now()
		case jc.gen[cd.ID] == 0:
			jc.mu.Unlock()
			return "", err
		}
	}
	gen := jc.gen[cd.ID]
	jc.mu.Unlock()
	derive := cd.Derive
	for i, j := range cd.C.Spec.Joins {
		as := " AS " + pgx.Identifier{model.JoinAlias(i + 1)}.Sanitize()
		derive = strings.ReplaceAll(derive, j.Table.Quoted()+as, e.Tbl(fmt.Sprintf("plant_%d_%d_%d", cd.ID, i+1, gen))+as)
	}
	if e.Plant.PageHook != nil {
		e.Plant.PageHook("read early " + cd.C.Spec.Target.Name)
	}
	return derive, nil
}

// PausedOf reads the paused fields of definitions, sorted by name.
func (e *Deriver) PausedOf(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64][]string, error) {
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT definition_id, array_agg(column_name ORDER BY column_name)
		FROM %s WHERE definition_id = ANY($1) GROUP BY 1`, e.Tbl("_paused_columns")), ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int64][]string{}
	for rows.Next() {
		var id int64
		var cols []string
		if err := rows.Scan(&id, &cols); err != nil {
			return nil, err
		}
		out[id] = cols
	}
	return out, rows.Err()
}

type PageKey struct {
	Table, Key string
}

type ReaderDef struct {
	Table string
	// Joined: the definition reads table as a JOIN item (a change fans
	// out to the FROM keys reading it, engine/drain/fanout.go), not as its source.
	Joined  bool
	Def     *CompiledDef
	Failing bool // its share of an earlier page failed (_page_failures)
	// ChainEnd: no transform reads its target (the last of its chain).
	ChainEnd bool
}

// SkippedReader is an applying definition a page could not share-lock
// because another transaction holds its row (a client's PAUSE, DROP or
// ALTER still open): the page defers its keys instead of waiting.
type SkippedReader struct {
	ID    int64
	Table string
}

// KeyMeta is what a page knows of one changed key: its least origin (nil
// when any of its rows had an unknown one) and its greatest hop.
type KeyMeta struct {
	Origin *string
	Hop    int16
	// Age is how old the key's oldest original write (its writer's
	// transaction start, inherited down a chain) was when the page read it,
	// in seconds of the database's clock.
	Age float64
	// FanDefs, when set, are the definitions whose JOIN fan-out staged
	// every log row of the key in its batch (op 'fanout'): the key
	// re-derives for them alone and fans out no further.
	FanDefs []int64
}
