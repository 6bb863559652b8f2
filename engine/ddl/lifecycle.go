package ddl

// PAUSE TRANSFORM and RESUME TRANSFORM of a whole transform (grammar spec
// §4.3, §4.4), in the caller's transaction (D6), by the target's owner (D9).
// A pause freezes the definition under its row lock: pages and build chunks
// apply only applying definitions, so from the caller's commit its share of
// the change stream is discarded. A resume re-validates the stored statement
// text against the live catalog exactly as define does and, when nothing a
// target column or the key depends on changed, sends the definition back to
// waiting_to_backfill: the staging worker starts a rebuild (every source key
// re-derived, plus a sweep of ledger keys the source no longer has) while
// readers keep seeing the old rows.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

type lockedDef struct {
	id                   int64
	status, target, text string
	source, statement    string
	c                    *model.Compiled
}

// lockTransform finds a transform by bare name, checks ownership and locks
// its definition row until the caller's transaction ends.
func (e *Executor) lockTransform(ctx context.Context, q Querier, name grammar.Ident) (*lockedDef, error) {
	target, owner, found, err := e.findTransform(ctx, q, name.Name)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, pgerr.Newf(pgerr.UndefinedObject, "transform %s does not exist", grammar.QuoteIdentIfNeeded(name.Name)).
			WithClass("not_found", "TransformNotFound").WithPosition(int(name.Pos))
	}
	if err := checkOwner(ctx, q, owner, target, int(name.Pos)); err != nil {
		return nil, err
	}
	d := &lockedDef{target: name.Name, c: &model.Compiled{}}
	var raw []byte
	err = q.QueryRow(ctx, fmt.Sprintf(`SELECT id, status, target_table, source_table, definition_sql, compiled
		FROM %s._lifecycle_lock(current_user::regrole, $1, $2)`, base.Ident(e.cfg.Schema)),
		target.Schema, target.Name).Scan(&d.id, &d.status, &d.text, &d.source, &d.statement, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, pgerr.Newf(pgerr.UndefinedObject, "transform %s does not exist", grammar.QuoteIdentIfNeeded(name.Name)).
			WithClass("not_found", "TransformNotFound").WithPosition(int(name.Pos))
	}
	if err != nil {
		return nil, err
	}
	return d, json.Unmarshal(raw, d.c)
}

func frozen(status string) bool { return status == "paused" || status == "quarantined" }

func (e *Executor) applyPause(ctx context.Context, q Querier, st *grammar.PauseStmt) (*Applied, error) {
	d, err := e.lockTransform(ctx, q, st.Addr.Target)
	if err != nil {
		return nil, err
	}
	if st.Addr.Field != nil {
		return e.pauseColumn(ctx, q, d, st.Addr.Field, st.CommandTag())
	}
	id := d.id
	a := &Applied{Kind: "paused", Target: d.target, TargetTable: d.text, ID: &id, Status: d.status,
		Warnings: []string{}, CommandTag: st.CommandTag()}
	switch d.status {
	case "paused":
		a.Notice = fmt.Sprintf("transform %s was already paused; nothing changed", d.text)
		return a, nil
	case "quarantined":
		a.Notice = fmt.Sprintf("transform %s is quarantined and stays quarantined; RESUME TRANSFORM rebuilds it", d.text)
		return a, nil
	}
	if _, err := q.Exec(ctx, fmt.Sprintf(`SELECT %s._lifecycle_pause(current_user::regrole, $1)`, base.Ident(e.cfg.Schema)), d.id); err != nil {
		return nil, err
	}
	a.Status = "paused"
	a.Notice = fmt.Sprintf("transform %s paused; its rows stay as they are until RESUME TRANSFORM %s", d.text, grammar.QuoteIdentIfNeeded(d.target))
	return a, nil
}

func (e *Executor) applyResume(ctx context.Context, q Querier, st *grammar.ResumeStmt) (*Applied, error) {
	d, err := e.lockTransform(ctx, q, st.Addr.Target)
	if err != nil {
		return nil, err
	}
	if st.Addr.Field != nil {
		return e.resumeColumn(ctx, q, d, st.Addr.Field, st.CommandTag())
	}
	if !frozen(d.status) {
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "transform %s is %s, not paused", d.text, d.status).
			WithClass("conflict", "TransformNotPaused").WithPosition(int(st.Addr.Target.Pos)).
			WithDetail("RESUME TRANSFORM applies only to a paused or quarantined transform").
			WithHint("to rebuild a running transform, PAUSE TRANSFORM %s first", grammar.QuoteIdentIfNeeded(d.target))
	}
	if err := e.revalidate(ctx, q, d); err != nil {
		pe, ok := pgerr.As(err)
		if !ok {
			return nil, err
		}
		out := &pgerr.Error{Code: pe.Code, Message: fmt.Sprintf("cannot resume transform %s: %s", d.text, pe.Message),
			Detail: pe.Detail, Hint: pe.Hint, Position: int(st.Addr.Target.Pos), Class: pe.Class, Variant: "ResumeRefused", Err: pe}
		if pe.Variant != "" {
			out.Detail = "reason: " + pe.Variant
			if pe.Detail != "" {
				out.Detail += "; " + pe.Detail
			}
		}
		if out.Hint == "" {
			out.Hint = fmt.Sprintf("fix the source so the definition validates again, or DROP TRANSFORM %s and define it anew", grammar.QuoteIdentIfNeeded(d.target))
		}
		return nil, out
	}
	// Status, build work, column bindings and held keys change in the
	// catalog function (D9); the rebuild starts after the caller's COMMIT.
	var released int64
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._lifecycle_resume(current_user::regrole, $1)`, base.Ident(e.cfg.Schema)), d.id).Scan(&released); err != nil {
		return nil, err
	}
	if _, err := q.Exec(ctx, "SELECT pg_notify($1, 'resume')", e.channel("wake")); err != nil {
		return nil, err
	}
	id := d.id
	notice := fmt.Sprintf("transform %s resumed; it is waiting_to_backfill and will be rebuilt from %s", d.text, d.source)
	if released > 0 {
		notice += fmt.Sprintf("; %d held keys released", released)
	}
	return &Applied{Kind: "resumed", Target: d.target, TargetTable: d.text, ID: &id, Status: "waiting_to_backfill",
		Resumed: []string{}, Warnings: []string{}, Notice: notice, CommandTag: st.CommandTag()}, nil
}

// revalidate runs define's checks on the stored statement text against the
// live catalog as the caller sees it (grammar §4.4), then requires that what
// Trellis created still fits: the same source key (names and types) and the
// same type for every target column and hidden accumulator.
func (e *Executor) revalidate(ctx context.Context, q Querier, d *lockedDef) error {
	parsed, err := grammar.Parse(d.statement)
	if err != nil {
		return err
	}
	st, ok := parsed.(*grammar.TransformStmt)
	if !ok {
		return fmt.Errorf("definition %d: stored text is not a TRANSFORM", d.id)
	}
	// A stored statement names its source qualified; one written by an
	// earlier version may not, and resolves in the definition's schema (the
	// statement's own queries run under pg_catalog, pg_temp; see Apply).
	if st.Source.Schema == "" && d.c != nil {
		st.Source.Schema = d.c.Spec.Source.Schema
	}
	src, err := e.resolveFrom(ctx, q, st)
	if err != nil {
		return err
	}
	var srcOID uint32
	var changeKeyed bool
	if err := q.QueryRow(ctx, `SELECT c.oid, c.relkind = 'r' AND NOT c.relispartition AND c.relpersistence = 'p'
			AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid OR inhparent = c.oid)
		FROM pg_class c WHERE c.oid = to_regclass($1)`, d.source).Scan(&srcOID, &changeKeyed); err != nil {
		return err
	}
	if !changeKeyed {
		return pgerr.Newf(pgerr.FeatureNotSupported, "source %s is no longer a plain table outside any partition or inheritance hierarchy", d.source).
			WithClass("validation", "SourceNotChangeKeyed")
	}
	res, err := grammar.Resolve(st, &src.Source)
	if err != nil {
		return err
	}
	spec, trees, err := buildSpec(st, src, res, e.cfg.TargetSchema)
	if err != nil {
		return err
	}
	if err := e.checkFormulas(ctx, q, st, src, spec, trees); err != nil {
		return err
	}
	old := d.c
	now := &model.Compiled{Spec: *spec, SourceText: old.SourceText, TargetText: old.TargetText}
	if now.Key, err = primaryKey(ctx, q, srcOID); err != nil {
		return err
	}
	if err := checkRowSecurity(ctx, q, srcOID, d.source); err != nil {
		return err
	}
	if len(now.Key) == 0 && old.KeyNullable {
		now.Key, now.KeyNullable = old.Key, old.KeyNullable // an upstream aggregate target's groups
	}
	if !slices.Equal(now.Key, old.Key) {
		var was, is []string
		for _, k := range old.Key {
			was = append(was, k.Name+" "+k.FullType)
		}
		for _, k := range now.Key {
			is = append(is, k.Name+" "+k.FullType)
		}
		return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "the key of %s is now (%s) but the target is keyed by (%s)", d.source, joinStr(is), joinStr(was)).
			WithClass("validation", "KeyChanged").
			WithHint("restore the key of %s, or DROP TRANSFORM %s and define it again", d.source, grammar.QuoteIdentIfNeeded(d.target))
	}
	// A JOIN target's joined tables must still join on their keys.
	if _, err := e.resolveJoins(ctx, q, now); err != nil {
		return err
	}
	if err := e.resolveTypes(ctx, q, now); err != nil {
		return err
	}
	for i, f := range old.Spec.Fields {
		if i >= len(now.FieldTypes) || i >= len(now.Spec.Fields) || now.Spec.Fields[i].Name != f.Name {
			return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "the fields of %s no longer match the stored definition", d.text).
				WithClass("validation", "DefinitionChanged")
		}
		if now.FieldTypes[i] != old.FieldTypes[i] {
			return pgerr.Newf(pgerr.DatatypeMismatch, "column %s of %s would now be %s but the target column is %s", f.Name, d.text, now.FieldTypes[i], old.FieldTypes[i]).
				WithClass("validation", "ColumnTypeChanged").
				WithDetail("a source column %s reads changed type", f.Name).
				WithHint("change the source column back to its old type and RESUME TRANSFORM %s, or DROP TRANSFORM %s and define it again",
					grammar.QuoteIdentIfNeeded(d.target), grammar.QuoteIdentIfNeeded(d.target))
		}
	}
	for i := range old.GroupTypes {
		if i >= len(now.GroupTypes) || now.GroupTypes[i] != old.GroupTypes[i] {
			g := old.Spec.GroupBy[i].Name
			return pgerr.Newf(pgerr.DatatypeMismatch, "group key %s of %s would now have another type than the target's %s", g, d.text, old.GroupTypes[i]).
				WithClass("validation", "ColumnTypeChanged").
				WithHint("change %s of %s back and RESUME TRANSFORM %s", g, d.source, grammar.QuoteIdentIfNeeded(d.target))
		}
	}
	a, _ := json.Marshal(old.Args)
	b, _ := json.Marshal(now.Args)
	if string(a) != string(b) || !slices.Equal(old.Recompute, now.Recompute) {
		return pgerr.Newf(pgerr.DatatypeMismatch, "an aggregate argument of %s changed type", d.text).
			WithClass("validation", "ColumnTypeChanged").
			WithHint("change the source columns back and RESUME TRANSFORM %s, or DROP TRANSFORM %s and define it again",
				grammar.QuoteIdentIfNeeded(d.target), grammar.QuoteIdentIfNeeded(d.target))
	}
	return nil
}

func joinStr(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
