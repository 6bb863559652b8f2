package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/worker"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Lifecycle operations interleaved with the differential test's writers
// (correctness spec §4.4 "operator statements", §7 "mid-burst operator
// statements", "source schema change under load"): PAUSE then RESUME,
// PAUSE and DROP then define again, request_backfill, a read column renamed
// and renamed back (its readers pause with a capture_failure and are
// resumed), PAUSE t.col then RESUME t.col (every field the pause reaches by
// cascade must keep its values while paused), and one leaf paused to the
// end, whose target must stay exactly as it was when the pause committed.

// lifecycle is the operator: one goroutine sending lifecycle statements
// while the writers run.
type lifecycle struct {
	dr  *diffRun
	set *engineSet
	r   *rand.Rand
	// rc draws the column pauses, apart from r so the other operations of
	// a seed are drawn as they were before column pauses existed.
	rc *rand.Rand
	// ddl serialises the operator's schema changes with definitions made
	// by the test's main goroutine (a define during a rename would fail).
	ddl sync.Mutex
	// renameUntil: until then a writer's 42703 is Postgres's own answer to
	// its statement naming a column the operator renamed.
	renameUntil atomic.Int64
	mu          sync.Mutex
	frozen      map[string]string // definition -> snapshot table of its target
	ops         map[string]int
	journal     []string
	added       int // fields ALTER ... ADD named so far
}

func newLifecycle(dr *diffRun, set *engineSet, seed uint64) *lifecycle {
	return &lifecycle{dr: dr, set: set, r: rand.New(rand.NewPCG(seed, 77)), rc: rand.New(rand.NewPCG(seed, 78)),
		frozen: map[string]string{}, ops: map[string]int{}}
}

func (l *lifecycle) note(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.journal = append(l.journal, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

func (l *lifecycle) count(op string) {
	l.mu.Lock()
	l.ops[op]++
	l.mu.Unlock()
}

func (l *lifecycle) isFrozen(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.frozen[name]
	return ok
}

// writerMayFail reports whether a writer's error is the expected refusal
// of a statement naming a column renamed away.
func (l *lifecycle) writerMayFail(err error) bool {
	return l != nil && pgerr.CodeOf(err) == "42703" && time.Now().UnixNano() < l.renameUntil.Load()
}

// statement runs Trellis statements in one transaction through the engine,
// retrying what a serializable database default or a busy page can cause.
func (l *lifecycle) statement(texts ...string) error {
	ctx := context.Background()
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		err = l.statementOnce(ctx, texts)
		switch c := pgerr.CodeOf(err); {
		case err == nil:
			return nil
		case c == "40001" || c == "40P01" || c == "55P03" ||
			c == "0A000" && strings.Contains(err.Error(), "cached plan must not change result type"):
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond) // the package source: main goroutine and operator both retry
			continue
		}
		return err
	}
	return err
}

func (l *lifecycle) statementOnce(ctx context.Context, texts []string) error {
	e := l.set.any()
	tx, err := l.dr.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, text := range texts {
		st, err := grammar.Parse(text)
		if err != nil {
			return fmt.Errorf("parse %q: %w", text, err)
		}
		if _, err := e.Apply(ctx, tx, st, ApplyOptions{InTransactionBlock: len(texts) > 1}); err != nil {
			return fmt.Errorf("%s: %w", text, err)
		}
	}
	return tx.Commit(ctx)
}

func (l *lifecycle) define(d *dDef) error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		err = l.dr.define(l.set, d)
		if c := pgerr.CodeOf(err); c != "40001" && c != "40P01" {
			return err
		}
	}
	return err
}

// leaves are the definitions no other definition reads and not frozen.
func (l *lifecycle) leaves() []*dDef {
	var out []*dDef
	for _, d := range l.dr.defs {
		read := false
		for _, o := range l.dr.defs {
			if o.upstream == d {
				read = true
			}
		}
		if !read && !l.isFrozen(d.name) {
			out = append(out, d)
		}
	}
	return out
}

func (l *lifecycle) defined(defined func(string) bool) []*dDef {
	var out []*dDef
	for _, d := range l.dr.defs {
		if defined(d.name) && !l.isFrozen(d.name) {
			out = append(out, d)
		}
	}
	return out
}

// run sends one operation every 100-400 ms until stop; defined says which
// definitions exist yet (half are defined while writers run).
func (l *lifecycle) run(stop context.Context, defined func(string) bool) error {
	froze := false
	for stop.Err() == nil {
		worker.SleepCtx(stop, time.Duration(100+l.r.IntN(300))*time.Millisecond)
		if stop.Err() != nil {
			return nil
		}
		defs := l.defined(defined)
		if len(defs) == 0 {
			continue
		}
		d := defs[l.r.IntN(len(defs))]
		if l.rc.IntN(100) < 25 {
			if err := l.pauseColumn(defs[l.rc.IntN(len(defs))]); err != nil {
				return err
			}
			continue
		}
		var err error
		switch x := l.r.IntN(100); {
		case x < 30:
			err = l.pauseResume(d)
		case x < 50:
			var leaves []*dDef
			for _, c := range l.leaves() {
				if defined(c.name) {
					leaves = append(leaves, c)
				}
			}
			if len(leaves) > 0 {
				err = l.dropRedefine(leaves[l.r.IntN(len(leaves))])
			}
		case x < 60:
			err = l.requestBackfill()
		case x < 80:
			err = l.renameAndBack()
		case x < 92:
			err = l.alter(d)
		default:
			leaves := l.leaves()
			if !froze && len(leaves) > 1 && defined(leaves[0].name) {
				froze = true
				err = l.freeze(leaves[0])
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (l *lifecycle) pauseResume(d *dDef) error {
	l.note("PAUSE %s", d.name)
	if err := l.statement("PAUSE TRANSFORM " + d.name); err != nil {
		return err
	}
	worker.SleepCtx(context.Background(), time.Duration(l.r.IntN(300))*time.Millisecond)
	l.note("RESUME %s", d.name)
	if err := l.resume(d.name); err != nil {
		return err
	}
	l.count("pause_resume")
	return nil
}

// pauseColumn pauses one field of d (PAUSE TRANSFORM d.f, cascading to
// every field that reads it), snapshots every paused field, lets the
// writers run, checks that no paused field was written, and resumes the
// field (releasing the cascade). A row that appeared meanwhile (a new key
// or group, or one deleted and inserted again) has the paused field NULL:
// it was never written.
func (l *lifecycle) pauseColumn(d *dDef) error {
	if len(d.fields) == 0 {
		return nil
	}
	f := d.fields[l.rc.IntN(len(d.fields))]
	addr := base.Ident(d.name) + "." + base.Ident(f.name)
	l.note("PAUSE %s", addr)
	err := l.statement("PAUSE TRANSFORM " + addr)
	if pe, ok := pgerr.As(err); ok && pe.Variant == "ColumnNotFound" {
		return nil // an ALTER dropped it from the stored definition
	}
	if err != nil {
		return err
	}
	snaps, err := l.snapshotPausedFields()
	if err != nil {
		return err
	}
	worker.SleepCtx(context.Background(), time.Duration(l.rc.IntN(400))*time.Millisecond)
	var written []string
	for _, sn := range snaps {
		n, err := l.countWritten(sn)
		if err != nil {
			return err
		}
		if n > 0 {
			written = append(written, fmt.Sprintf("%s.%s: %d rows", sn.def.name, sn.col, n))
		}
		if _, err := l.dr.pool.Exec(context.Background(), "DROP TABLE "+sn.table); err != nil {
			return err
		}
	}
	if len(written) > 0 {
		return fmt.Errorf("paused fields written after PAUSE %s: %s", addr, strings.Join(written, ", "))
	}
	l.note("RESUME %s", addr)
	if err := l.resumeColumn(d, addr); err != nil {
		return err
	}
	l.count("pause_column")
	return nil
}

// pausedSnap is one paused field's values when its pause committed.
type pausedSnap struct {
	def   *dDef
	col   string
	keys  []string
	table string
}

// snapshotPausedFields copies the key and value of every field paused now
// (pages that began before the pause committed have committed too: the
// pause waited for them on the definition's fence).
func (l *lifecycle) snapshotPausedFields() ([]pausedSnap, error) {
	ctx := context.Background()
	rows, err := l.dr.pool.Query(ctx, `SELECT d.compiled #>> '{spec,target,name}', pc.column_name
		FROM trellis._paused_columns pc JOIN trellis._definitions d ON d.id = pc.definition_id ORDER BY 1, 2`)
	if err != nil {
		return nil, err
	}
	type paused struct{ def, col string }
	var all []paused
	for rows.Next() {
		var p paused
		if err := rows.Scan(&p.def, &p.col); err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []pausedSnap
	for i, p := range all {
		var d *dDef
		for _, o := range l.dr.defs {
			if o.name == p.def {
				d = o
			}
		}
		if d == nil || l.isFrozen(d.name) {
			continue // frozen targets are compared whole at the end
		}
		keys, _ := d.outCols()
		var cols []string
		for _, k := range keys {
			cols = append(cols, base.Ident(k))
		}
		sn := pausedSnap{def: d, col: p.col, keys: keys, table: fmt.Sprintf("paused_snap_%d", i)}
		if _, err := l.dr.pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s AS SELECT %s, %s::text AS v FROM %s",
			sn.table, strings.Join(cols, ", "), base.Ident(p.col), base.Ident(d.name))); err != nil {
			return nil, err
		}
		out = append(out, sn)
	}
	return out, nil
}

// countWritten counts the rows whose paused field differs from the
// snapshot: a changed value, or a value where the row is new.
func (l *lifecycle) countWritten(sn pausedSnap) (int64, error) {
	var on []string
	for _, k := range sn.keys {
		on = append(on, fmt.Sprintf("t.%s IS NOT DISTINCT FROM s.%s", base.Ident(k), base.Ident(k)))
	}
	var n int64
	err := l.dr.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s t LEFT JOIN %s s ON %s
		WHERE t.%s IS NOT NULL AND (s.v IS NULL OR t.%s::text <> s.v)`,
		base.Ident(sn.def.name), sn.table, strings.Join(on, " AND "), base.Ident(sn.col), base.Ident(sn.col))).Scan(&n)
	return n, err
}

// resumeColumn resumes a paused field once its definition is live again
// (a rebuild an earlier operation started may still run; a definition a
// capture_failure paused is resumed first).
func (l *lifecycle) resumeColumn(d *dDef, addr string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := l.statement("RESUME TRANSFORM " + addr)
		pe, ok := pgerr.As(err)
		switch {
		case err == nil:
			return nil
		case ok && pe.Variant == "ColumnNotPaused":
			return nil
		case ok && pe.Variant == "DefinitionNotLive" && time.Now().Before(deadline):
			if st, _, _ := storedStatus(l.dr.t, l.set.any(), d.name); st == "paused" {
				if err := l.resume(d.name); err != nil {
					return err
				}
			}
			time.Sleep(50 * time.Millisecond)
		default:
			return fmt.Errorf("RESUME %s: %w", addr, err)
		}
	}
}

// resume resumes a paused definition; one that a concurrent step already
// resumed is fine.
func (l *lifecycle) resume(name string) error {
	err := l.statement("RESUME TRANSFORM " + name)
	if pe, ok := pgerr.As(err); ok && pe.Variant == "TransformNotPaused" {
		return nil
	}
	return err
}

func (l *lifecycle) dropRedefine(d *dDef) error {
	l.ddl.Lock()
	defer l.ddl.Unlock()
	l.note("PAUSE+DROP %s", d.name)
	var err error
	if l.r.IntN(2) == 0 {
		err = l.statement("PAUSE TRANSFORM "+d.name, "DROP TRANSFORM "+d.name)
	} else if err = l.statement("PAUSE TRANSFORM " + d.name); err == nil {
		err = l.statement("DROP TRANSFORM " + d.name)
	}
	if err != nil {
		return err
	}
	worker.SleepCtx(context.Background(), time.Duration(l.r.IntN(200))*time.Millisecond)
	l.note("define %s again", d.name)
	if err := l.define(d); err != nil {
		return fmt.Errorf("redefine %s: %w", d.name, err)
	}
	l.count("drop_redefine")
	return nil
}

func (l *lifecycle) requestBackfill() error {
	t := l.dr.tables[l.r.IntN(len(l.dr.tables))]
	l.note("request_backfill(%s)", t)
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		_, err = l.dr.pool.Exec(context.Background(), `SELECT trellis._request_backfill(current_user::regrole, to_regclass($1)::oid, $1, NULL)`, t)
		if c := pgerr.CodeOf(err); c != "40001" && c != "40P01" {
			break
		}
	}
	if c := pgerr.CodeOf(err); err != nil && c != "55000" { // 55000: nothing applying reads it now
		return fmt.Errorf("request_backfill(%s): %w", t, err)
	}
	l.count("request_backfill")
	return nil
}

// sameType are formulas grouped by result type: ALTER f AS e must keep the
// column's type (grammar §4.6 step 4).
var sameType = [][]string{
	{"{i} * 2", "length({g1})", "{i} + 7"},
	{"coalesce({g1}, 'none')", "lower(coalesce({g1}, 'X'))"},
	{"{n} + 1", "{n}", "{n} * 2"},
	{"{b}", "{g2} % 2 = 0", "NOT {b}"},
}

// readByReaders lists the fields of d that a chained definition reads.
func (l *lifecycle) readByReaders(d *dDef) map[string]bool {
	out := map[string]bool{}
	for _, o := range l.dr.defs {
		if o.upstream != d {
			continue
		}
		for _, f := range append(append([]dField{}, o.group...), o.fields...) {
			for _, c := range d.fields {
				if strings.Contains(f.expr, "{"+c.name+"}") {
					out[c.name] = true
				}
			}
		}
	}
	return out
}

// alter edits a 1-1 definition with ALTER TRANSFORM: ADD a field, ALTER a
// field to another formula of the same type, or DROP one no reader uses;
// the model follows only when the statement commits.
func (l *lifecycle) alter(d *dDef) error {
	if len(d.group) > 0 || d.upstream != nil {
		return nil // an aggregate target is UnsupportedAlter; the pools read base tables
	}
	used := l.readByReaders(d)
	fields := append([]dField{}, d.fields...)
	var clause string
	switch l.r.IntN(3) {
	case 0:
		f := scalarPool[l.r.IntN(len(scalarPool))]
		l.added++
		f.name = fmt.Sprintf("x%d", l.added)
		clause = "ADD (" + fill(f.expr, false) + ") AS " + base.Ident(f.name)
		fields = append(fields, f)
	case 1:
		for i, f := range fields {
			if used[f.name] {
				continue
			}
			for _, group := range sameType {
				if j := slices.Index(group, f.expr); j >= 0 {
					e := group[(j+1+l.r.IntN(len(group)-1))%len(group)]
					clause = "ALTER " + base.Ident(f.name) + " AS (" + fill(e, false) + ")"
					fields[i].expr = e
					break
				}
			}
			if clause != "" {
				break
			}
		}
	default:
		for i, f := range fields {
			if !used[f.name] && len(fields) > 1 {
				clause = "DROP " + base.Ident(f.name)
				fields = append(fields[:i:i], fields[i+1:]...)
				break
			}
		}
	}
	if clause == "" {
		return nil
	}
	text := "ALTER TRANSFORM " + base.Ident(d.name) + " " + clause
	l.note("%s", text)
	err := l.statement(text)
	if pe, ok := pgerr.As(err); ok && pe.Variant == "TransformNotLive" {
		return nil // a capture_failure paused it a moment ago
	}
	if err != nil {
		return err
	}
	d.fields = fields
	l.count("alter")
	return nil
}

// renameAndBack renames a column definitions read, waits, renames it back,
// and resumes every definition a capture_failure paused.
func (l *lifecycle) renameAndBack() error {
	l.ddl.Lock()
	defer l.ddl.Unlock()
	t := l.dr.tables[l.r.IntN(len(l.dr.tables))]
	cols := []string{"g1", "g2", "n", "i", "b", "j"}
	c := cols[l.r.IntN(len(cols))]
	ctx := context.Background()
	l.renameUntil.Store(time.Now().Add(time.Hour).UnixNano())
	l.note("ALTER TABLE %s RENAME %s", t, c)
	if _, err := l.dr.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s_tmp", t, c, c)); err != nil {
		return err
	}
	worker.SleepCtx(ctx, time.Duration(50+l.r.IntN(300))*time.Millisecond)
	_, err := l.dr.pool.Exec(ctx, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s_tmp TO %s", t, c, c))
	l.note("ALTER TABLE %s RENAME %s back", t, c)
	l.renameUntil.Store(time.Now().Add(time.Second).UnixNano())
	if err != nil {
		return err
	}
	// The staging pass may pause readers a moment after the rename back.
	worker.SleepCtx(ctx, 150*time.Millisecond)
	if err := l.resumeCaptureFailures(); err != nil {
		return err
	}
	l.count("rename_and_back")
	return nil
}

// resumeCaptureFailures resumes every definition paused by a
// capture_failure (the operator's fix after renaming back).
func (l *lifecycle) resumeCaptureFailures() error {
	rows, err := l.dr.pool.Query(context.Background(), `SELECT compiled #>> '{spec,target,name}' FROM trellis._definitions
		WHERE status = 'paused' AND status_detail ? 'capture_failure' ORDER BY id`)
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		if l.isFrozen(n) {
			continue
		}
		l.note("RESUME %s (capture_failure)", n)
		if err := l.resume(n); err != nil {
			return err
		}
		l.count("resume_after_capture_failure")
	}
	return nil
}

// freeze pauses a leaf to the end and snapshots its target at once: from
// the pause's commit no page or chunk may write it.
func (l *lifecycle) freeze(d *dDef) error {
	l.note("PAUSE %s to the end", d.name)
	if err := l.statement("PAUSE TRANSFORM " + d.name); err != nil {
		return err
	}
	snap := "frozen_" + d.name
	if _, err := l.dr.pool.Exec(context.Background(), "CREATE TABLE "+snap+" AS "+d.targetSQL()); err != nil {
		return err
	}
	l.mu.Lock()
	l.frozen[d.name] = snap
	l.mu.Unlock()
	l.count("freeze")
	return nil
}

// settle resumes every paused definition not frozen until all are live.
func (l *lifecycle) settle(deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for {
		var waiting []string
		for _, d := range l.dr.defs {
			if l.isFrozen(d.name) {
				continue
			}
			st, err := l.set.any().StatusOf(context.Background(), TableName{Name: d.name})
			if err != nil {
				return err
			}
			if st == nil {
				return fmt.Errorf("%s does not exist", d.name)
			}
			switch st.StoredStatus {
			case "live":
				if st.Status != "live" {
					waiting = append(waiting, d.name+" "+st.Status)
				}
				continue
			case "paused":
				l.note("settle: RESUME %s", d.name)
				if err := l.resume(d.name); err != nil {
					return err
				}
			}
			waiting = append(waiting, d.name+" "+st.StoredStatus)
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("not live after %s: %v", deadline, waiting)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkFrozen compares each frozen target with its snapshot.
func (l *lifecycle) checkFrozen() []string {
	var out []string
	for _, d := range l.dr.defs {
		snap, ok := l.frozen[d.name]
		if !ok {
			continue
		}
		if dd := diff(l.dr.t, l.dr.pool, d.targetSQL(), "SELECT * FROM "+snap); dd != "" {
			out = append(out, fmt.Sprintf("%s was written while paused:\n%s", d.name, dd))
		}
		if st, _, _ := storedStatus(l.dr.t, l.set.any(), d.name); st != "paused" {
			out = append(out, fmt.Sprintf("%s left paused is %s", d.name, st))
		}
	}
	return out
}

func (l *lifecycle) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for k := range l.ops {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, l.ops[k]))
	}
	return strings.Join(parts, " ")
}

func (l *lifecycle) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, v := range l.ops {
		n += v
	}
	return n
}
