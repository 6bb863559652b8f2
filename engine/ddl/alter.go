package ddl

// ALTER TRANSFORM t ADD e AS f / ALTER f AS e / DROP f (grammar spec §4.6),
// in the caller's transaction (D6) by the target's owner (D9).
//
// The clauses edit the stored statement text (grammar.ApplyAlter), the
// merged definition is validated exactly as define validates (against the
// live catalog as the caller sees it, probes under a savepoint, no source
// row read), then the caller's role adds and drops the target's columns and
// a catalog function stores the re-rendered statement and compiled form with
// a version bump. Added and altered fields are built by one rebuild of the
// definition started after commit (waiting_to_backfill, backfilling, live):
// every source key is re-derived with the new formulas, and a row is
// rewritten only where a value differs, so until its key's chunk runs an
// added column reads NULL and an altered one its old value, while pages
// compute new changes with the new formulas as soon as the build starts.
// A DROP alone needs no build.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

func (e *Executor) applyAlter(ctx context.Context, q Querier, st *grammar.AlterTransformStmt, opts ApplyOptions) (*Applied, error) {
	d, err := e.lockTransform(ctx, q, st.Target)
	if err != nil {
		return nil, err
	}
	tname := grammar.QuoteIdentIfNeeded(d.target)
	if frozen(d.status) {
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "transform %s is %s and cannot be altered", d.text, d.status).
			WithClass("conflict", "TransformNotLive").WithPosition(int(st.Target.Pos)).
			WithDetail("status: %s", d.status).
			WithHint("RESUME TRANSFORM %s first, or DROP TRANSFORM %s and define it anew", tname, tname)
	}
	parsed, err := grammar.Parse(d.statement)
	if err != nil {
		return nil, err
	}
	def, ok := parsed.(*grammar.TransformStmt)
	if !ok {
		return nil, fmt.Errorf("definition %d: stored text is not a TRANSFORM", d.id)
	}
	if def.Source.Schema == "" && d.c != nil { // as in revalidate
		def.Source.Schema = d.c.Spec.Source.Schema
	}
	merged, res, err := grammar.ApplyAlter(def, st)
	if err != nil {
		return nil, err
	}
	id := d.id
	a := &Applied{Kind: "altered", Target: d.target, TargetTable: d.text, ID: &id, Status: d.status, SourceTable: d.source,
		Warnings: []string{}, Added: nonNil(res.Added), Dropped: nonNil(res.Dropped), Altered: nonNil(res.Altered), CommandTag: st.CommandTag()}
	if !res.Changed() {
		return e.alterUnchanged(ctx, q, d, def, a)
	}

	// Stages C and D of define on the merged definition (grammar §9.2).
	// A JOIN target's FROM and JOIN items are not editable; its joined
	// tables resolve again as at define.
	src, err := e.resolveFrom(ctx, q, merged)
	if err != nil {
		return nil, err
	}
	resolution, err := grammar.Resolve(merged, &src.Source)
	if err != nil {
		return nil, err
	}
	spec, trees, err := buildSpec(merged, src, resolution, e.cfg.TargetSchema)
	if err != nil {
		return nil, err
	}
	if err := spec.Check(e.cfg.TargetSchema); err != nil {
		return nil, err
	}
	// D8's probes for the new formulas only: kept ones passed them at
	// define (or their last ALTER), and what the source did to them since
	// is the health check's and RESUME's business. resolveTypes below
	// still plans every formula against the live source.
	probe := *spec
	probe.Fields = nil
	for _, f := range spec.Fields {
		if slices.Contains(res.Added, f.Name) || slices.Contains(res.Altered, f.Name) {
			probe.Fields = append(probe.Fields, f)
		}
	}
	if err := e.checkFormulas(ctx, q, merged, src, &probe, trees); err != nil {
		return nil, err
	}
	clausePos := func(field string) int {
		for _, c := range st.Clauses {
			if c.Field.Name == field {
				return int(c.Field.Pos)
			}
		}
		return int(st.Target.Pos)
	}
	if err := e.checkDroppedUnread(ctx, q, d, res.Dropped, clausePos); err != nil {
		return nil, err
	}
	now := &model.Compiled{Spec: *spec, SourceText: d.c.SourceText, TargetText: d.c.TargetText, Key: d.c.Key, KeyNullable: d.c.KeyNullable}
	now.Spec.Joins = d.c.Spec.Joins // resolved at define: the same items
	if err := e.resolveTypes(ctx, q, now); err != nil {
		return nil, err
	}
	newType, err := alteredTypesKept(d, now, res.Altered, tname, clausePos)
	if err != nil {
		return nil, err
	}

	// The target is the workers' (D20): its columns change through a
	// SECURITY DEFINER function, its lock held until the caller's
	// transaction ends.
	if err := e.alterTargetColumns(ctx, q, d, res.Dropped, res.Added, newType); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	cols, _ := json.Marshal(now.Spec.ItemReads(0))
	jc := joinedColumns(&now.Spec)
	rebuilt := append(slices.Clone(res.Added), res.Altered...)
	var v int64
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._lifecycle_alter(current_user::regrole, $1, $2, $3, $4, $5, $6, $7)`, base.Ident(e.cfg.Schema)),
		d.id, spec.Statement, raw, cols, nonNil(res.Dropped), nonNil(rebuilt), jc).Scan(&v); err != nil {
		return nil, err
	}
	a.Version = &v
	a.SourceColumns = now.SourceColumns(src.types)
	a.Notice = alterNotice(d.text, res)
	if len(rebuilt) > 0 {
		a.Status = "waiting_to_backfill"
		a.Notice += "; the changed columns are rebuilt in the background"
		if opts.InTransactionBlock {
			a.Notice += " once this transaction commits"
		}
		if _, err := q.Exec(ctx, "SELECT pg_notify($1, 'alter')", e.channel("wake")); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// alterUnchanged answers an ALTER TRANSFORM whose every clause was a no-op:
// the version is bumped (the statement was applied) and nothing rebuilt.
func (e *Executor) alterUnchanged(ctx context.Context, q Querier, d *lockedDef, def *grammar.TransformStmt, a *Applied) (*Applied, error) {
	var v int64
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._lifecycle_alter(current_user::regrole, $1, NULL, NULL, NULL, NULL, NULL)`,
		base.Ident(e.cfg.Schema)), d.id).Scan(&v); err != nil {
		return nil, err
	}
	a.Version = &v
	types := map[string]string{}
	if src, err := e.resolveSource(ctx, q, def.Source); err == nil {
		types = src.types
	}
	a.SourceColumns = d.c.SourceColumns(types)
	a.Notice = fmt.Sprintf("transform %s unchanged: every clause was a no-op", d.text)
	return a, nil
}

// checkDroppedUnread refuses to drop a field another transform reads.
func (e *Executor) checkDroppedUnread(ctx context.Context, q Querier, d *lockedDef, dropped []string, clausePos func(string) int) error {
	for _, col := range dropped {
		var lines []string
		if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._field_readers(current_user::regrole, $1, $2)`, base.Ident(e.cfg.Schema)),
			d.id, []string{col}).Scan(&lines); err != nil {
			return err
		}
		if len(lines) > 0 {
			return pgerr.Newf(pgerr.DependentObjectsStillExist, "cannot drop field %s of %s: other transforms read it", grammar.QuoteIdentIfNeeded(col), d.text).
				WithClass("conflict", "DependentsBlockDrop").WithPosition(clausePos(col)).
				WithDetail("subject: %s.%s\n%s", d.target, col, strings.Join(lines, "\n")).
				WithHint("alter or drop the readers first (leaves inward)")
		}
	}
	return nil
}

// alteredTypesKept returns the fields' types after the ALTER and refuses
// one that changes an altered field's type: an edit never rewrites the
// table.
func alteredTypesKept(d *lockedDef, now *model.Compiled, altered []string, tname string, clausePos func(string) int) (map[string]string, error) {
	oldType := map[string]string{}
	for i, f := range d.c.Spec.Fields {
		oldType[f.Name] = d.c.FieldTypes[i]
	}
	newType := map[string]string{}
	for i, f := range now.Spec.Fields {
		newType[f.Name] = now.FieldTypes[i]
	}
	for _, f := range altered {
		if oldType[f] != newType[f] {
			fq := grammar.QuoteIdentIfNeeded(f)
			return nil, pgerr.Newf(pgerr.FeatureNotSupported, "ALTER TRANSFORM %s ALTER %s would change the column's type from %s to %s", tname, fq, oldType[f], newType[f]).
				WithClass("validation", "UnsupportedAlter").WithPosition(clausePos(f)).
				WithDetail("transform: %s; field: %s; current type: %s; new type: %s; an edit never rewrites the table", d.target, f, oldType[f], newType[f]).
				WithHint("DROP %s, ADD <formula> AS %s in one ALTER TRANSFORM (the column is rebuilt), or cast the formula to %s", fq, fq, oldType[f])
		}
	}
	return newType, nil
}

// alterTargetColumns drops and adds the target's columns through the
// SECURITY DEFINER _alter_target (the target is the workers', D20), its
// lock held until the caller's transaction ends.
func (e *Executor) alterTargetColumns(ctx context.Context, q Querier, d *lockedDef, dropped, addedFields []string, newType map[string]string) error {
	if len(dropped)+len(addedFields) > 0 {
		added := &tableShape{}
		for _, f := range addedFields {
			added.Add(f, newType[f], false)
		}
		if len(added.Cols) > 0 {
			if err := resolveShape(ctx, q, added); err != nil {
				return err
			}
		}
		raw, _ := json.Marshal(nonNilCols(added.Cols))
		if _, err := q.Exec(ctx, fmt.Sprintf(`SELECT %s._alter_target(current_user::regrole, $1, $2, $3)`, base.Ident(e.cfg.Schema)),
			d.id, nonNil(dropped), raw); err != nil {
			return err
		}
	}
	return nil
}

// alterNotice names what an ALTER TRANSFORM changed.
func alterNotice(text string, res grammar.AlterResult) string {
	var parts []string
	for _, x := range []struct {
		verb  string
		names []string
	}{{"added", res.Added}, {"altered", res.Altered}, {"dropped", res.Dropped}} {
		if len(x.names) > 0 {
			quoted := make([]string, len(x.names))
			for i, n := range x.names {
				quoted[i] = grammar.QuoteIdentIfNeeded(n)
			}
			parts = append(parts, x.verb+" "+strings.Join(quoted, ", "))
		}
	}
	return fmt.Sprintf("transform %s altered: %s", text, strings.Join(parts, "; "))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
