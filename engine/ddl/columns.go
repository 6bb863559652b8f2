package ddl

// PAUSE TRANSFORM t.c and RESUME TRANSFORM t.c (grammar spec §4.3, §4.4):
// per-field pause state in the catalog (D18).
//
// A row of _paused_columns says a field is not written: pages and build
// chunks leave it out of their writes, so it keeps its last value, while the
// rest of the target (and an aggregate target's hidden accumulators) stays
// live. The row is local when an operator's PAUSE or the column fuse paused
// the field itself, and each _column_pause_edges row (upstream field ->
// downstream field) says it is also held by a paused field it reads: a pause
// cascades to every field of other transforms reading the paused column as
// a formula input, and to every field of a transform grouping by it. All of
// it is ordinary catalog rows written in the statement's transaction, so it
// is visible to the whole fleet at commit and survives kill -9.
//
// RESUME of a field deletes its row and schedules a field build of its
// definition: the definition goes back to waiting_to_backfill and is
// rebuilt like a resumed transform (every source key re-derived, rows
// rewritten only where a value differs, which after a field pause means
// where the resumed column is stale); an aggregate build also gets a
// 'refresh' task recomputing the resumed columns of every group from the
// accumulators kept meanwhile. Then it walks the edges: a downstream field
// left with no local pause and no other paused upstream is released the
// same way when its definition is not frozen.

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

type pausedField struct {
	name     string
	local    bool
	upstream []string
}

func (e *Executor) pausedFields(ctx context.Context, q Querier, d *lockedDef) (map[string]pausedField, error) {
	rows, err := q.Query(ctx, fmt.Sprintf(`SELECT column_name, local, upstream FROM %s._paused_fields(current_user::regrole, $1)`,
		base.Ident(e.cfg.Schema)), d.id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pausedField{}
	for rows.Next() {
		var p pausedField
		if err := rows.Scan(&p.name, &p.local, &p.upstream); err != nil {
			return nil, err
		}
		out[p.name] = p
	}
	return out, rows.Err()
}

// checkField refuses a column that is not a declared field of d
// (ColumnNotFound, listing the fields; key columns are not fields).
func checkField(d *lockedDef, col *grammar.Ident) error {
	var names []string
	for _, f := range d.c.Spec.Fields {
		if f.Name == col.Name {
			return nil
		}
		names = append(names, f.Name)
	}
	err := pgerr.Newf(pgerr.UndefinedColumn, "transform %s has no field %s", d.text, grammar.QuoteIdentIfNeeded(col.Name)).
		WithClass("not_found", "ColumnNotFound").WithPosition(int(col.Pos)).
		WithDetail("declared fields: %s", strings.Join(names, ", "))
	var keys []string
	for _, k := range d.c.Spec.GroupBy {
		keys = append(keys, k.Name)
	}
	if !d.c.Spec.IsAggregate() {
		for _, k := range d.c.Key {
			keys = append(keys, k.Name)
		}
	}
	if slices.Contains(keys, col.Name) {
		err = err.WithHint("%s is a key column; key columns cannot be paused (PAUSE TRANSFORM %s pauses the whole transform)",
			grammar.QuoteIdentIfNeeded(col.Name), grammar.QuoteIdentIfNeeded(d.target))
	}
	return err
}

// pauseColumn is PAUSE TRANSFORM t.c on a locked definition.
func (e *Executor) pauseColumn(ctx context.Context, q Querier, d *lockedDef, col *grammar.Ident, tag string) (*Applied, error) {
	if err := checkField(d, col); err != nil {
		return nil, err
	}
	var was string
	var cascaded []string
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT was, cascaded FROM %s._lifecycle_pause_column(current_user::regrole, $1, $2)`,
		base.Ident(e.cfg.Schema)), d.id, col.Name).Scan(&was, &cascaded); err != nil {
		return nil, err
	}
	addr := d.target + "." + col.Name
	id := d.id
	a := &Applied{Kind: "paused", Target: addr, TargetTable: d.text, ID: &id, Status: d.status, Warnings: []string{}, CommandTag: tag}
	colText := grammar.QuoteIdentIfNeeded(col.Name)
	switch was {
	case "local":
		a.Notice = fmt.Sprintf("column %s of %s was already paused; nothing changed", colText, d.text)
	case "cascade":
		a.Notice = fmt.Sprintf("column %s of %s was paused by an upstream pause and is now paused in its own right; it stays as it is until RESUME TRANSFORM %s",
			colText, d.text, grammar.QuoteIdentIfNeeded(d.target)+"."+colText)
	default:
		a.Notice = fmt.Sprintf("column %s of %s paused; it keeps its values until RESUME TRANSFORM %s",
			colText, d.text, grammar.QuoteIdentIfNeeded(d.target)+"."+colText)
		if len(cascaded) > 0 {
			a.Notice += "; fields reading it are paused too: " + strings.Join(cascaded, ", ")
		}
	}
	return a, nil
}

// resumeColumn is RESUME TRANSFORM t.c on a locked definition (grammar
// §9.3: ColumnNotPaused, then DefinitionNotLive).
func (e *Executor) resumeColumn(ctx context.Context, q Querier, d *lockedDef, col *grammar.Ident, tag string) (*Applied, error) {
	paused, err := e.pausedFields(ctx, q, d)
	if err != nil {
		return nil, err
	}
	colText := grammar.QuoteIdentIfNeeded(col.Name)
	p, ok := paused[col.Name]
	if !ok {
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "column %s of %s is not paused", colText, d.text).
			WithClass("not_found", "ColumnNotPaused").WithPosition(int(col.Pos)).
			WithHint("trellis.status lists a transform's paused columns (paused_columns)")
	}
	if d.status != "live" {
		hint := fmt.Sprintf("wait until %s is live (trellis.status), then resume the column", grammar.QuoteIdentIfNeeded(d.target))
		if frozen(d.status) {
			hint = fmt.Sprintf("RESUME TRANSFORM %s rebuilds the whole transform", grammar.QuoteIdentIfNeeded(d.target))
		}
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "transform %s is %s, not live: its column %s cannot be resumed now", d.text, d.status, colText).
			WithClass("conflict", "DefinitionNotLive").WithPosition(int(col.Pos)).WithHint("%s", hint)
	}
	if len(p.upstream) > 0 {
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "column %s of %s reads paused %s", colText, d.text, strings.Join(p.upstream, ", ")).
			WithClass("conflict", "UpstreamColumnPaused").WithPosition(int(col.Pos)).
			WithDetail("a field paused by cascade is released when the fields it reads resume").
			WithHint("RESUME TRANSFORM %s", p.upstream[0])
	}
	var resumed []string
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._lifecycle_resume_column(current_user::regrole, $1, $2)`, base.Ident(e.cfg.Schema)),
		d.id, col.Name).Scan(&resumed); err != nil {
		return nil, err
	}
	if _, err := q.Exec(ctx, "SELECT pg_notify($1, 'resume')", e.channel("wake")); err != nil {
		return nil, err
	}
	id := d.id
	notice := fmt.Sprintf("column %s of %s resumed; it is recomputed from %s in the background (the transform is backfilling until done)", colText, d.text, d.source)
	if len(resumed) > 1 {
		notice += "; released with it: " + strings.Join(resumed[1:], ", ")
	}
	return &Applied{Kind: "resumed", Target: d.target + "." + col.Name, TargetTable: d.text, ID: &id, Status: "waiting_to_backfill",
		Resumed: resumed, Warnings: []string{}, CommandTag: tag, Notice: notice}, nil
}
