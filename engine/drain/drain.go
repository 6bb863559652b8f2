package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/build"
	"github.com/trellis-proxy/trellis-proxy/engine/derive"
	"github.com/trellis-proxy/trellis-proxy/engine/quarantine"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
)

// Drainer runs drain workers: pages of sealed batches, fanned out to the
// transforms that read them, and build and self-check steps between pages.
type Drainer struct {
	*build.Builder
}

// New returns the drain workers' code over b (drain workers run build
// steps between pages).
func New(b *build.Builder) *Drainer { return &Drainer{Builder: b} }

func (e *Drainer) WakeDrainers() {
	worker.Poke(e.WakeDrain)
	e.SignalDrained()
}

// DrainLoop is one drain worker: pages of the oldest sealed batch first,
// then build tasks, else sleep until woken (NOTIFY) or PollInterval.
func (e *Drainer) DrainLoop(ctx context.Context, id string, buildsFirst bool) error {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		did, err := e.drainOnce(ctx, id, buildsFirst)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !base.Transient(err) {
				e.LogFailure("drain step failed", err, "worker", id)
			} else {
				e.Log.Debug("drain step retried", "worker", id, "err", err)
			}
			backoff = min(max(backoff*2, 10*time.Millisecond), time.Second)
			worker.SleepCtx(ctx, backoff)
			continue
		}
		backoff = 0
		if did {
			continue
		}
		e.States.Set(id, "drain", "idle")
		ch := e.DrainedCh()
		t := time.NewTimer(e.Cfg.PollInterval)
		select {
		case <-ctx.Done():
		case <-e.WakeDrain:
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
	return nil
}

func (e *Drainer) drainOnce(ctx context.Context, id string, buildsFirst bool) (bool, error) {
	// Odd workers prefer build tasks so a steady write load cannot starve a
	// build; even workers prefer pages so builds cannot starve convergence.
	// Each step records its own state and detail when it claims its work
	// (workerStates.working).
	first, second := e.DrainPage, e.BuildStep
	if buildsFirst {
		first, second = e.BuildStep, e.DrainPage
	}
	did, err := first(ctx, id)
	if did || err != nil {
		return did, err
	}
	if did, err := second(ctx, id); did || err != nil {
		return did, err
	}
	// Self-checks run only when no page or build work is waiting.
	return e.Checks.Step(ctx, id)
}

// DrainPage claims the first open bucket of the oldest undrained batch and
// applies one page of it in one transaction. The claim is the bucket row's
// lock, held until commit: a dead worker's claim ends with its transaction,
// and the cursor advances atomically with the writes it covers.
func (e *Drainer) DrainPage(ctx context.Context, id string) (did bool, err error) {
	t0 := time.Now()
	defer func() {
		if did || err != nil {
			e.Metrics().PageDone(time.Since(t0), err)
		}
	}()
	did, at, err := e.drainPageTry(ctx, id, nil)
	if err == nil || base.Transient(err) || errors.Is(err, derive.ErrLockShort) || ctx.Err() != nil {
		return did, err
	}
	if quarantine.Poisonous(err) {
		// Isolate (§12.12): the same bucket again, each definition's keys under
		// a savepoint and, when they fail, each key alone; keys that fail alone
		// are charged and skipped, the rest of the page commits.
		e.Log.Info("page failed; probing its keys", "batch", at.batch, "bucket", at.bucket, "err", err)
		did, _, err = e.drainPageTry(ctx, id, &at)
		if err == nil || base.Transient(err) || errors.Is(err, derive.ErrLockShort) || ctx.Err() != nil {
			return did, err
		}
	}
	// A holdup: nothing attributable. Record it on the bucket and back off,
	// loudly (§12.12 "Holdup", drain_failure).
	e.LogFailure("page failed with nothing attributable; bucket held back", err, "batch", at.batch, "bucket", at.bucket)
	_, _ = e.Workers.Exec(context.Background(), fmt.Sprintf(`UPDATE %s SET attempts = attempts + 1, last_error = $3,
		last_sqlstate = nullif($4, ''), failed_since = coalesce(failed_since, now()), failed_last = now(), next_attempt_at = now() + least(interval '10 ms' * power(2, least(attempts, 10)), interval '10 s')
		WHERE batch_seq = $1 AND bucket = $2`, e.Tbl("_batch_buckets")), at.batch, at.bucket, quarantine.ErrMessage(err), base.Code(err))
	return false, err
}

type bucketRef struct {
	batch  int64
	bucket int16
}

// drainPageTry claims a bucket (the given one when only is set, for a probe)
// and applies one page of it as worker id; it returns the bucket it worked
// on.
func (e *Drainer) drainPageTry(ctx context.Context, id string, only *bucketRef) (bool, bucketRef, error) {
	probe := only != nil
	var ref bucketRef
	conn, err := e.Workers.Acquire(ctx)
	if err != nil {
		return false, ref, err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, ref, err
	}
	defer tx.Rollback(context.Background())
	onlyBatch, onlyBucket := int64(-1), int16(-1)
	if only != nil {
		onlyBatch, onlyBucket = only.batch, only.bucket
	}
	var batch int64
	var bucket, bucketCount int16
	var afterTable, afterKey *string
	var hasTruncate, keyed bool
	var batchKeys int64
	err = tx.QueryRow(ctx, fmt.Sprintf(`
		SELECT bb.batch_seq, bb.bucket, bb.after_table, bb.after_key, b.bucket_count, b.has_truncate, bb.keyed, b.row_count
		FROM %[1]s bb JOIN (%[3]s) b ON bb.batch_seq = b.seq
		WHERE bb.state = 'open' AND (coalesce(bb.next_attempt_at, '-infinity') <= now() OR $1)
		  AND ($2 < 0 OR (bb.batch_seq = $2 AND bb.bucket = $3))
		ORDER BY bb.pages, bb.batch_seq, bb.bucket LIMIT 1 FOR UPDATE OF bb SKIP LOCKED`,
		e.Tbl("_batch_buckets"), e.Tbl("_batches"), e.drainableBatchesSQL()), probe, onlyBatch, onlyBucket).
		Scan(&batch, &bucket, &afterTable, &afterKey, &bucketCount, &hasTruncate, &keyed, &batchKeys)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, ref, nil
	}
	if err != nil {
		return false, ref, err
	}
	ref = bucketRef{batch, bucket}
	e.States.Working(id, "draining", fmt.Sprintf("batch %d bucket %d", batch, bucket))
	var waited time.Duration
	t0 := time.Now()
	pctx, tally := derive.WithTally(ctx)
	perr := e.applyPage(pctx, tx, pageAt{batch: batch, bucket: bucket, bucketCount: bucketCount,
		afterTable: afterTable, afterKey: afterKey, hasTruncate: hasTruncate, keyed: keyed, batchKeys: batchKeys}, probe, &waited)
	if perr == nil {
		perr = tx.Commit(ctx)
		if perr == nil {
			e.ReportTally(tally, waited, t0) // per-transform figures (engine/derive/tally.go)
			if waited > 0 {
				// Its oldest change waited this long before the page read it,
				// then for the page itself: capture to visible.
				e.Metrics().ChangeVisible(waited + time.Since(t0))
			}
			return true, ref, nil
		}
	}
	tx.Rollback(context.Background())
	return false, ref, perr
}

// pageAt is the bucket a page drains and where its cursor stands.
type pageAt struct {
	batch                int64
	bucket, bucketCount  int16
	afterTable, afterKey *string
	hasTruncate          bool
	keyed                bool  // its keys are in _batch_keys (bulk.go)
	batchKeys            int64 // the batch's changed keys (_batches.row_count)
}

// batchWindow is the FROM and WHERE of batch $1's log rows; keyed, each
// row's keys as k.key (a row holds one key, a rederive's, or a statement's
// keys in an array, capture's).
func (e *Drainer) batchWindow(keyed bool) string {
	unnest := ""
	if keyed {
		unnest = " CROSS JOIN LATERAL unnest(coalesce(c.keys, ARRAY[c.key])) AS k(key)"
	}
	return fmt.Sprintf(`FROM %[1]s c%[3]s,
		  (SELECT snap FROM %[2]s WHERE seq = $1 - 1) prev,
		  (SELECT snap FROM %[2]s WHERE seq = $1) cur
		WHERE c.txid >= pg_snapshot_xmin(prev.snap) AND c.txid < pg_snapshot_xmax(cur.snap)
		  AND pg_visible_in_snapshot(c.txid, cur.snap) AND NOT pg_visible_in_snapshot(c.txid, prev.snap)`,
		e.Tbl("_change_log"), e.Tbl("_batches"), unnest)
}

func (e *Drainer) applyPage(ctx context.Context, tx pgx.Tx, pa pageAt, probe bool, waited *time.Duration) error {
	if err := worker.SetLockTimeout(ctx, tx, e.Cfg.PageLockTimeout); err != nil {
		return err
	}
	// Truncates first, in the bucket's first page (a truncate batch has one bucket).
	var tr pageTruncates
	if pa.afterTable == nil && pa.hasTruncate {
		var err error
		if tr, err = e.readTruncates(ctx, tx, pa.batch); err != nil {
			return err
		}
	}
	at, ak := "", ""
	if pa.afterTable != nil {
		at = *pa.afterTable
	}
	if pa.afterKey != nil {
		ak = *pa.afterKey
	}
	keys, meta, po, err := e.readPageKeys(ctx, tx, pa, at, ak, tr, waited)
	if err != nil {
		return err
	}
	// Chained targets inherit the page's least origin and next hop (§12.7).
	o := "unknown"
	if !po.unknown && po.origin != nil {
		o = *po.origin
	}
	if (len(keys) > 0 || len(tr.tables) > 0) && !e.Plant.NoOriginInheritance {
		if _, err := tx.Exec(ctx, "SELECT set_config('trellis.origin', $1, true), set_config('trellis.hop', $2, true), set_config('trellis.origin_at', $3, true)",
			o, fmt.Sprint(po.hop+1), originAtSetting(po.originAt)); err != nil {
			return err
		}
	}
	if err := e.applyPageShares(ctx, tx, pa, keys, meta, tr, probe); err != nil {
		return err
	}
	if err := e.finishPage(ctx, tx, pa, keys, at, ak); err != nil {
		return err
	}
	if e.Plant.PageHook != nil {
		e.Plant.PageHook("before-commit")
	}
	return nil
}

// pageTruncates are the truncates of a truncate batch's page: the tables,
// their least origin (unknown when any has none) and greatest hop.
type pageTruncates struct {
	tables  []string
	origin  *string
	unknown bool
	hop     int16
}

func (e *Drainer) readTruncates(ctx context.Context, tx pgx.Tx, batch int64) (pageTruncates, error) {
	var tr pageTruncates
	rows, err := tx.Query(ctx, `SELECT c.src_table, bool_or(c.origin_lsn IS NULL), min(c.origin_lsn)::text, max(c.hop) `+
		e.batchWindow(false)+` AND c.key IS NULL AND c.op = 'truncate' GROUP BY c.src_table ORDER BY 1`, batch)
	if err != nil {
		return tr, err
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var unk bool
		var o *string
		var h int16
		if err := rows.Scan(&t, &unk, &o, &h); err != nil {
			return tr, err
		}
		tr.tables = append(tr.tables, t)
		tr.unknown = tr.unknown || unk
		if o != nil && (tr.origin == nil || lsnLess(*o, *tr.origin)) {
			tr.origin = o
		}
		tr.hop = max(tr.hop, h)
	}
	return tr, rows.Err()
}

// pageOrigin is what a page's writes pass down a chain: the least origin
// of its keys and truncates (unknown when any has none), the greatest hop
// and the oldest original write (0: none).
type pageOrigin struct {
	origin   *string
	unknown  bool
	hop      int16
	originAt float64
}

// readPageKeys reads the page's keys past (at, ak) with each key's origin,
// hop and age; waited becomes the oldest key's wait.
func (e *Drainer) readPageKeys(ctx context.Context, tx pgx.Tx, pa pageAt, at, ak string, tr pageTruncates,
	waited *time.Duration) ([]derive.PageKey, map[derive.PageKey]derive.KeyMeta, pageOrigin, error) {
	po := pageOrigin{origin: tr.origin, unknown: tr.unknown, hop: tr.hop}
	rows, err := e.pageKeys(ctx, tx, pa, at, ak)
	if err != nil {
		return nil, nil, po, err
	}
	defer rows.Close()
	var keys []derive.PageKey
	meta := map[derive.PageKey]derive.KeyMeta{}
	for rows.Next() {
		var k derive.PageKey
		var unk bool
		var o *string
		var h int16
		var age, at, e2eAge float64
		var fanned bool
		var fanDefs []int64
		if err := rows.Scan(&k.Table, &k.Key, &unk, &o, &h, &age, &at, &e2eAge, &fanned, &fanDefs); err != nil {
			return nil, nil, po, err
		}
		if d := time.Duration(age * float64(time.Second)); d > *waited {
			*waited = d
		}
		keys = append(keys, k)
		m := derive.KeyMeta{Origin: o, Hop: h, Age: e2eAge}
		if unk {
			m.Origin = nil
		}
		if fanned {
			m.FanDefs = fanDefs
		}
		meta[k] = m
		po.originAt = minAt(po.originAt, at)
		po.unknown = po.unknown || unk
		if o != nil && (po.origin == nil || lsnLess(*o, *po.origin)) {
			po.origin = o
		}
		po.hop = max(po.hop, h)
	}
	return keys, meta, po, rows.Err()
}

// applyPageShares applies the page's keys, grouped by table, to every
// definition reading them, each definition's share on its own, under the
// fence (§12.6 steps 2-3).
func (e *Drainer) applyPageShares(ctx context.Context, tx pgx.Tx, pa pageAt, keys []derive.PageKey, meta map[derive.PageKey]derive.KeyMeta,
	tr pageTruncates, probe bool) error {
	byTable := map[string][]derive.PageKey{}
	var tables []string
	for i, k := range keys {
		if e.Plant.DropEveryNthKey > 0 && i%e.Plant.DropEveryNthKey == e.Plant.DropEveryNthKey-1 {
			continue
		}
		if _, ok := byTable[k.Table]; !ok {
			tables = append(tables, k.Table)
		}
		byTable[k.Table] = append(byTable[k.Table], k)
	}
	for _, t := range tr.tables {
		if _, ok := byTable[t]; !ok {
			tables = append(tables, t)
			byTable[t] = nil
		}
	}
	if len(tables) == 0 {
		return nil
	}
	// Fence: readers applying now, share-locked against pause/drop/alter, in id order.
	defs, skipped, err := e.readers(ctx, tx, withAltBases(tables))
	if err != nil {
		return err
	}
	defs, skipped = altShares(tables, defs, skipped)
	if err := e.deferKeys(ctx, tx, skipped, byTable, meta, tr.tables, tr.origin, tr.unknown, tr.hop); err != nil {
		return err
	}
	if e.Log.Enabled(ctx, slog.LevelDebug) {
		var rs []string
		for _, d := range defs {
			rs = append(rs, fmt.Sprintf("%d@%d", d.Def.ID, d.Def.Version))
		}
		ks := keys
		if len(ks) > 40 {
			ks = ks[:40]
		}
		e.Log.Debug("page", "batch", pa.batch, "bucket", pa.bucket, "keys", len(keys), "readers", rs, "first", ks, "probe", probe)
	}
	// Keys held for a definition are skipped by it alone (§12.12 evict).
	held, err := e.PoisonedKeys(ctx, tx, defs, keys, meta, probe)
	if err != nil {
		return err
	}
	for _, d := range defs {
		ks := fannedFor(d, byTable[d.Table], meta)
		if h := held[d.Def.ID]; len(h) > 0 {
			kept := make([]derive.PageKey, 0, len(ks))
			for _, k := range ks {
				if !h[k] {
					kept = append(kept, k)
				}
			}
			ks = kept
		}
		if err := e.applyShare(ctx, tx, d, ks, meta, probe, slices.Contains(tr.tables, d.Table), pageShare{
			truncated: tr.tables, tOrigin: tr.origin, tUnknown: tr.unknown, tHop: tr.hop}); err != nil {
			return fmt.Errorf("applying %s: %w", d.Def.C.TargetText, err)
		}
	}
	return nil
}

// finishPage moves the bucket's cursor past the page's last key (or keeps
// it at (at, ak) for an empty page), and on the bucket's last page marks it
// done and flips the batch when it was the last bucket (§12.6 step 5).
func (e *Drainer) finishPage(ctx context.Context, tx pgx.Tx, pa pageAt, keys []derive.PageKey, at, ak string) error {
	last := len(keys) < e.Cfg.PageSize
	lt, lk := &at, &ak
	if len(keys) > 0 {
		lt, lk = &keys[len(keys)-1].Table, &keys[len(keys)-1].Key
	}
	state := "open"
	if last {
		state = "done"
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET after_table = $3, after_key = $4, state = $5, pages = pages + 1,
		attempts = 0, last_error = NULL, last_sqlstate = NULL, next_attempt_at = NULL, failed_since = NULL, failed_last = NULL
		WHERE batch_seq = $1 AND bucket = $2`, e.Tbl("_batch_buckets")), pa.batch, pa.bucket, *lt, *lk, state); err != nil {
		return err
	}
	if !last {
		return nil
	}
	// One statement, so two workers finishing the last two buckets cannot
	// both conclude "not yet" (H8).
	var drained string
	if err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %s
		SET done_mask  = done_mask | (1::bigint << $2),
		    state      = CASE WHEN (done_mask | (1::bigint << $2)) = (1::bigint << bucket_count) - 1 THEN 'drained' ELSE state END,
		    drained_at = CASE WHEN (done_mask | (1::bigint << $2)) = (1::bigint << bucket_count) - 1 THEN now() END
		WHERE seq = $1 RETURNING state`, e.Tbl("_batches")), pa.batch, int(pa.bucket)).Scan(&drained); err != nil {
		return err
	}
	if drained == "drained" {
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", e.Channel("drained")); err != nil {
			return err
		}
	}
	return nil
}

// readers returns the applying definitions reading any of tables, locked
// FOR SHARE in id order (§12.6 step 2), and those it skipped because
// another transaction holds their row (§12.8 "Locks held by a client
// transaction") or holds or waits for their fence (engine/worker/fence.go): a client
// transaction that paused, altered or dropped one transform and stays open
// stalls only that transform's share of the stream, and a lifecycle
// statement waits only for the pages already in flight. A definition seen applying here whose lock is skipped may have
// been paused or dropped by then; deferring its keys is then harmless (the
// staging worker drops them).
func (e *Drainer) readers(ctx context.Context, tx pgx.Tx, tables []string) ([]derive.ReaderDef, []derive.SkippedReader, error) {
	// A heap build's definition is skipped (its keys deferred) without
	// trying its fence: no page writes it until it is live (engine/build/build.go).
	rows, err := tx.Query(ctx, fmt.Sprintf(`WITH cand AS (
		  SELECT d.id, r.table_name, r.role, %[4]s AS heap
		  FROM %[1]s d JOIN %[2]s r ON r.definition_id = d.id
		  WHERE r.table_name = ANY($1) AND d.status IN ('backfilling', 'live')),
		fenced AS MATERIALIZED (
		  SELECT unnest(%[3]s) AS id),
		locked AS (
		  SELECT d.id, d.version, d.compiled FROM %[1]s d
		  WHERE d.id IN (SELECT id FROM fenced) AND d.status IN ('backfilling', 'live') AND d.verified
		    AND NOT %[4]s
		    AND NOT EXISTS (SELECT 1 FROM %[5]s pf WHERE pf.definition_id = d.id AND pf.next_attempt_at > now())
		  ORDER BY d.id FOR SHARE OF d SKIP LOCKED)
		SELECT cand.id, cand.table_name, cand.role, locked.id IS NOT NULL, locked.version, locked.compiled,
		  EXISTS (SELECT 1 FROM %[5]s pf WHERE pf.definition_id = cand.id),
		  NOT EXISTS (SELECT 1 FROM %[1]s t JOIN %[2]s r ON r.table_name = t.target_table WHERE t.id = cand.id)
		FROM cand LEFT JOIN locked ON locked.id = cand.id
		ORDER BY cand.id, cand.role`, e.Tbl("_definitions"), e.Tbl("_definition_reads"),
		e.TryFencesSQL("ARRAY(SELECT DISTINCT id FROM cand WHERE NOT heap ORDER BY id)", false), build.HeapBuilding("d"),
		e.Tbl("_page_failures")), tables)
	if err != nil {
		return nil, nil, err
	}
	type raw struct {
		id      int64
		version *int64
		c       []byte
		table   string
		role    string
		paused  []string
		failing bool
		last    bool
	}
	var rs []raw
	var skipped []derive.SkippedReader
	for rows.Next() {
		var r raw
		var got bool
		if err := rows.Scan(&r.id, &r.table, &r.role, &got, &r.version, &r.c, &r.failing, &r.last); err != nil {
			rows.Close()
			return nil, nil, err
		}
		if !got {
			skipped = append(skipped, derive.SkippedReader{ID: r.id, Table: r.table})
			continue
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	if len(rs) > 0 {
		// Paused fields in a new statement: its snapshot follows the locks,
		// so a field pause or resume that held a definition row FOR UPDATE
		// is seen once it committed (the locking statement returns the
		// row's newest version but evaluates subqueries in its old snapshot).
		ids := make([]int64, len(rs))
		for i, r := range rs {
			ids[i] = r.id
		}
		paused, err := e.PausedOf(ctx, tx, ids)
		if err != nil {
			return nil, nil, err
		}
		for i := range rs {
			rs[i].paused = paused[rs[i].id]
		}
	}
	out := make([]derive.ReaderDef, 0, len(rs))
	for _, r := range rs {
		cd, err := e.CompiledForPaused(r.id, *r.version, r.c, r.paused)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, derive.ReaderDef{Table: r.table, Joined: r.role == "to_one", Def: cd, Failing: r.failing, ChainEnd: r.last})
	}
	// A definition's shares of joined tables come after its share of its
	// FROM table: a fan-out's inline re-derive then takes the second lock
	// round of the page on that definition, the one that gives way
	// (fanOutLockTimeout).
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Def.ID != out[j].Def.ID {
			return out[i].Def.ID < out[j].Def.ID
		}
		return !out[i].Joined && out[j].Joined
	})
	return out, skipped, nil
}

// deferKeys records the page's keys of each skipped reader's table with
// their least origin (NULL: unknown) and greatest hop, in the page's
// transaction, so convergence keeps them pending; a truncate of the table
// in this page marks the definition for a rebuild (whole).
func (e *Drainer) deferKeys(ctx context.Context, tx pgx.Tx, skipped []derive.SkippedReader, byTable map[string][]derive.PageKey,
	meta map[derive.PageKey]derive.KeyMeta, truncated []string, tOrigin *string, tUnknown bool, tHop int16) error {
	for _, s := range skipped {
		var ts, ks, os []*string
		var ws []bool
		var hs []int16
		for _, k := range byTable[s.Table] {
			m := meta[k]
			t, key := k.Table, k.Key
			ts, ks, os, ws, hs = append(ts, &t), append(ks, &key), append(os, m.Origin), append(ws, false), append(hs, m.Hop)
		}
		if slices.Contains(truncated, s.Table) {
			t, empty := s.Table, ""
			o := tOrigin
			if tUnknown {
				o = nil
			}
			ts, ks, os, ws, hs = append(ts, &t), append(ks, &empty), append(os, o), append(ws, true), append(hs, tHop)
		}
		if len(ts) == 0 {
			continue
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s AS x (definition_id, src_table, key, whole, origin_lsn, hop)
			SELECT $1, u.t, u.k, u.w, u.o::pg_lsn, u.h FROM unnest($2::text[], $3::text[], $4::bool[], $5::text[], $6::int2[]) AS u(t, k, w, o, h)
			ORDER BY u.t COLLATE "C", u.k COLLATE "C"
			ON CONFLICT (definition_id, src_table, key) DO UPDATE SET whole = x.whole OR excluded.whole,
			  origin_lsn = CASE WHEN x.origin_lsn IS NULL OR excluded.origin_lsn IS NULL THEN NULL
			                    ELSE least(x.origin_lsn, excluded.origin_lsn) END,
			  hop = greatest(x.hop, excluded.hop)`, e.Tbl("_deferred")), s.ID, ts, ks, ws, os, hs); err != nil {
			return err
		}
		e.Log.Debug("keys deferred: transform locked by another transaction", "definition", s.ID, "table", s.Table, "keys", len(ts))
	}
	return nil
}

// ResolveDeferred stages again the deferred keys of every definition whose
// row and fence are free: as 'rederive' rows (same origin and hop, so
// convergence stays pending without a gap) while it applies, or a rebuild
// for a deferred truncate; a paused, rebuilding or dropped definition's are
// dropped, its rebuild covers them. busy: it found deferred keys (staged
// again, dropped or left), so the pass that ran it is not steady: the keys
// it moved changed what the pass fingerprinted, and a page may defer as
// many again before the next pass.
func (e *Drainer) ResolveDeferred(ctx context.Context, conn *pgx.Conn) (busy bool, err error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	var any bool
	if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s)", e.Tbl("_deferred"))).Scan(&any); err != nil || !any {
		return false, err
	}
	// A dropped definition's keys go (no foreign key deletes them).
	if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s x WHERE NOT EXISTS (SELECT 1 FROM %s d WHERE d.id = x.definition_id)`,
		e.Tbl("_deferred"), e.Tbl("_definitions"))); err != nil {
		return false, err
	}
	if err := e.PauseFailing(ctx, tx); err != nil {
		return false, err
	}
	// A heap build's keys stay deferred until it is live (engine/build/build.go).
	rows, err := tx.Query(ctx, fmt.Sprintf(`WITH free AS (
		  SELECT d.id, d.status IN ('backfilling', 'live') AS applying FROM %[1]s d
		  WHERE d.id IN (SELECT unnest(%[4]s))
		    AND NOT %[5]s
		    AND NOT EXISTS (SELECT 1 FROM %[6]s pf WHERE pf.definition_id = d.id AND pf.next_attempt_at > now())
		  ORDER BY d.id FOR SHARE OF d SKIP LOCKED),
		moved AS (DELETE FROM %[2]s x USING free WHERE x.definition_id = free.id
		  RETURNING x.definition_id, x.src_table, x.key, x.whole, x.origin_lsn, x.hop, free.applying),
		staged AS (INSERT INTO %[3]s (src_table, key, op, definition_id, origin_lsn, hop)
		  SELECT src_table, key, 'rederive', definition_id, origin_lsn, hop FROM moved WHERE applying AND NOT whole
		  RETURNING 1)
		SELECT DISTINCT definition_id FROM moved WHERE applying AND whole`, e.Tbl("_definitions"), e.Tbl("_deferred"), e.Tbl("_change_log"),
		e.TryFencesSQL("ARRAY(SELECT DISTINCT definition_id FROM "+e.Tbl("_deferred")+" ORDER BY 1)", false), build.HeapBuilding("d"), e.Tbl("_page_failures")))
	if err != nil {
		return false, err
	}
	rebuild, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return false, err
	}
	if len(rebuild) > 0 {
		if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = 'waiting_to_backfill', version = version + 1,
			  build_started_at = NULL, build_rows_done = NULL, build_rows_estimated = NULL,
			  status_detail = coalesce(status_detail, '{}') || jsonb_build_object('rebuild_reason', 'a truncate met it locked by another transaction')
			WHERE id = ANY($1) AND status IN ('backfilling', 'live')`, e.Tbl("_definitions")), rebuild); err != nil {
			return false, err
		}
	}
	return true, tx.Commit(ctx)
}

// lsnLess compares two pg_lsn texts "X/Y".
func lsnLess(a, b string) bool { return parseLSN(a) < parseLSN(b) }

func parseLSN(s string) uint64 {
	var hi, lo uint64
	fmt.Sscanf(s, "%X/%X", &hi, &lo)
	return hi<<32 | lo
}

// minAt is the older of two original-write times (0: none).
func minAt(cur, at float64) float64 {
	if cur == 0 || (at > 0 && at < cur) {
		return at
	}
	return cur
}

// originAtSetting renders the page's oldest original write for
// trellis.origin_at (” when the page has none: its chained changes then
// count from their own staging).
func originAtSetting(at float64) string {
	if at <= 0 {
		return ""
	}
	return strconv.FormatFloat(at, 'f', 6, 64)
}
