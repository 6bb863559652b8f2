package ddl

// Trellis statements as the router hands them over: a parsed grammar
// statement, run on the caller's Querier inside the caller's transaction
// (D6). This is where the rules that need the live catalog live (grammar
// spec §9.2 stages B and D): the source resolved through search_path, names
// resolved against its columns, formulas rendered from their syntax tree, and
// D8's built-in-and-immutable check.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Applied is the one-row reply of a Trellis statement (surface spec §3.2,
// composite type trellis.applied). Unused columns stay zero and are sent as
// NULL.
type Applied struct {
	Kind          string // transform_defined, relationship_defined, paused, resumed, dropped, altered
	Target        string // the address acted on
	TargetTable   string
	ID            *int64
	Status        string
	SourceTable   string
	Version       *int64
	SourceColumns map[string]string // column -> type, as format_type spells it
	Cardinality   string
	Relationship  map[string]string
	Warnings      []string
	Resumed       []string
	Added         []string
	Dropped       []string
	Altered       []string

	// Notice is the NOTICE a person reads (surface §3.2's texts).
	Notice string
	// CommandTag is the tag of the CommandComplete.
	CommandTag string
}

// ApplyOptions describe the caller's situation.
type ApplyOptions struct {
	// InTransactionBlock is true inside the client's BEGIN ... COMMIT: the
	// notice then says that building starts at COMMIT.
	InTransactionBlock bool
}

// Apply runs one Trellis statement on q, which must be inside a transaction
// (the caller's own block, or one the caller opened for an autocommit
// statement). Errors are *pgerr.Error with positions relative to the
// statement text the grammar parsed.
//
// The statement runs in the client's session, as the client. The one name
// a user writes that resolves through her search_path, the source table, is
// resolved first; every query of the statement then runs with the workers'
// search_path (pg_catalog, pg_temp, D20), restored when it returns, so a
// function or operator planted in a schema on the client's path is never
// what a catalog query or a formula probe calls, and a formula resolves at
// define exactly as the workers will resolve it.
func (e *Executor) Apply(ctx context.Context, q Querier, st grammar.Statement, opts ApplyOptions) (*Applied, error) {
	if s, ok := st.(*grammar.TransformStmt); ok {
		// Every table the statement names resolves through the client's
		// search_path, before the path is pinned below.
		qualified, err := qualifyTables(ctx, q, s)
		if err != nil {
			return nil, err
		}
		st = qualified
	}
	var path string
	if err := q.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&path); err != nil {
		return nil, err
	}
	if _, err := q.Exec(ctx, `SELECT set_config('search_path', 'pg_catalog, pg_temp', true)`); err != nil {
		return nil, err
	}
	a, err := e.apply(ctx, q, st, opts)
	if err != nil {
		// The client's transaction or savepoint is rolled back, and the
		// setting with it.
		return nil, err
	}
	if _, err := q.Exec(ctx, `SELECT set_config('search_path', $1, true)`, path); err != nil {
		return nil, err
	}
	return a, nil
}

func (e *Executor) apply(ctx context.Context, q Querier, st grammar.Statement, opts ApplyOptions) (*Applied, error) {
	switch s := st.(type) {
	case *grammar.TransformStmt:
		return e.applyTransform(ctx, q, s, opts)
	case *grammar.DropTransformStmt:
		return e.applyDropTransform(ctx, q, s)
	case *grammar.PauseStmt:
		return e.applyPause(ctx, q, s)
	case *grammar.ResumeStmt:
		return e.applyResume(ctx, q, s)
	case *grammar.AlterTransformStmt:
		return e.applyAlter(ctx, q, s, opts)
	default:
		return nil, pgerr.Newf(pgerr.FeatureNotSupported, "%s is not supported by this version of trellis-proxy yet", st.CommandTag()).
			WithClass("unsupported", "NotYetSupported").WithPosition(int(st.Position()))
	}
}

func (e *Executor) applyTransform(ctx context.Context, q Querier, st *grammar.TransformStmt, opts ApplyOptions) (*Applied, error) {
	src, err := e.resolveFrom(ctx, q, st)
	if err != nil {
		return nil, err
	}
	spec, err := e.compileSpec(ctx, q, st, src)
	if err != nil {
		return nil, err
	}
	d, err := e.Define(ctx, q, *spec)
	if err != nil {
		if pe, ok := pgerr.As(err); ok && pe.Position == 0 {
			// State errors point at the target name (grammar spec §2.4).
			switch pe.Variant {
			case "TargetTableExists", "TargetTableSuffixCollision", "NameTooLong":
				pe.Position = int(st.Target.Pos)
			case "SourceTableNotFound", "NoPrimaryKey", "SourceNotChangeKeyed":
				pe.Position = int(st.Source.Pos)
			}
		}
		return nil, err
	}
	// The columns the definition reads, the source key included for a 1-1
	// target (its rows are keyed by it), as surface §3.2 shows them.
	cols := map[string]string{}
	for _, name := range spec.Reads() {
		cols[name] = src.types[name]
	}
	if !spec.IsAggregate() {
		for _, k := range src.Key {
			cols[k] = src.types[k]
		}
	}
	id, version := d.ID, d.Version
	notice := fmt.Sprintf("transform %s defined; it is %s and reads %s", d.TargetTable, d.Status, readsText(d.SourceTable, spec))
	if opts.InTransactionBlock {
		notice += "; it starts building when this transaction commits"
	}
	return &Applied{
		Kind: "transform_defined", Target: spec.Target.Name, TargetTable: d.TargetTable, ID: &id,
		Status: d.Status, SourceTable: d.SourceTable, Version: &version, SourceColumns: cols,
		Warnings: []string{}, Notice: notice, CommandTag: st.CommandTag(),
	}, nil
}

// compileSpec resolves a TRANSFORM against its source, renders its spec and
// checks its formulas: what TRANSFORM and the workers' verification of a
// stored statement (engine/staging/verify.go) both compile.
func (e *Executor) compileSpec(ctx context.Context, q Querier, st *grammar.TransformStmt, src *resolvedSource) (*model.Spec, error) {
	res, err := grammar.Resolve(st, &src.Source)
	if err != nil {
		return nil, err
	}
	spec, trees, err := buildSpec(st, src, res, e.cfg.TargetSchema)
	if err != nil {
		return nil, err
	}
	if err := e.checkFormulas(ctx, q, st, src, spec, trees); err != nil {
		return nil, err
	}
	return spec, nil
}

func (e *Executor) applyDropTransform(ctx context.Context, q Querier, st *grammar.DropTransformStmt) (*Applied, error) {
	target, owner, found, err := e.findTransform(ctx, q, st.Target.Name)
	if err != nil {
		return nil, err
	}
	if !found {
		// Dropping what is not there succeeds (grammar spec §4.9).
		return &Applied{Kind: "dropped", Target: st.Target.Name, Warnings: []string{},
			Notice:     fmt.Sprintf("transform %s does not exist, skipping", grammar.QuoteIdentIfNeeded(st.Target.Name)),
			CommandTag: st.CommandTag()}, nil
	}
	if err := checkOwner(ctx, q, owner, target, int(st.Target.Pos)); err != nil {
		return nil, err
	}
	// grammar §4.5 in order: TransformNotPaused, then DependentsBlockDrop
	// (the catalog function re-checks both under the row lock, D9).
	d, err := e.lockTransform(ctx, q, st.Target)
	if err != nil {
		return nil, err
	}
	tname := grammar.QuoteIdentIfNeeded(d.target)
	if !frozen(d.status) {
		return nil, pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "transform %s is %s, not paused", d.text, d.status).
			WithClass("conflict", "TransformNotPaused").WithPosition(int(st.Target.Pos)).
			WithDetail("a running transform is not dropped: its target would vanish under its readers mid-change").
			WithHint("PAUSE TRANSFORM %s first", tname)
	}
	var lines []string
	if err := q.QueryRow(ctx, fmt.Sprintf(`SELECT %s._field_readers(current_user::regrole, $1, NULL)`, base.Ident(e.cfg.Schema)), d.id).Scan(&lines); err != nil {
		return nil, err
	}
	if len(lines) > 0 {
		return nil, pgerr.Newf(pgerr.DependentObjectsStillExist, "cannot drop transform %s: other transforms read it", d.text).
			WithClass("conflict", "DependentsBlockDrop").WithPosition(int(st.Target.Pos)).
			WithDetail("subject: %s\n%s", d.target, strings.Join(lines, "\n")).
			WithHint("drop the readers first (leaves inward): PAUSE and DROP TRANSFORM each of them")
	}
	if err := e.Drop(ctx, q, target); err != nil {
		if pe, ok := pgerr.As(err); ok && pe.Position == 0 {
			pe.Position = int(st.Target.Pos)
		}
		return nil, err
	}
	return &Applied{Kind: "dropped", Target: st.Target.Name, TargetTable: d.text, Warnings: []string{},
		Notice: fmt.Sprintf("transform %s dropped with its table", d.text), CommandTag: st.CommandTag()}, nil
}

// findTransform finds a transform by its bare target name (unique across the
// instance, grammar spec §7.3).
func (e *Executor) findTransform(ctx context.Context, q Querier, bare string) (model.TableName, string, bool, error) {
	var t model.TableName
	var owner string
	err := q.QueryRow(ctx, fmt.Sprintf(`SELECT schema_name, table_name, owner_name FROM %s._find_transform($1)`,
		base.Ident(e.cfg.Schema)), bare).Scan(&t.Schema, &t.Name, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, "", false, nil
	}
	return t, owner, err == nil, err
}

// checkOwner enforces D9: lifecycle statements need membership in the
// target's owning role, like ALTER TABLE.
func checkOwner(ctx context.Context, q Querier, owner string, target model.TableName, pos int) error {
	var member bool
	if err := q.QueryRow(ctx, "SELECT pg_has_role(current_user, $1::name, 'USAGE')", owner).Scan(&member); err != nil {
		return err
	}
	if member {
		return nil
	}
	return pgerr.Newf(pgerr.InsufficientPrivilege, "must be owner of transform %s", pgx.Identifier{target.Schema, target.Name}.Sanitize()).
		WithClass("permission", "NotOwner").WithPosition(pos).
		WithHint("run it as %s or a member of that role (GRANT %s TO <your role>)", owner, pgx.Identifier{owner}.Sanitize())
}

// resolvedSource is the source table as the caller's session sees it.
type resolvedSource struct {
	grammar.Source
	types map[string]string // column -> format_type
	// joinedTypes are the same for each joined table (Source.Joined).
	joinedTypes []map[string]string
}

// resolveSource resolves the FROM table through the caller's search_path
// (or its schema) and reads its columns and key.
func (e *Executor) resolveSource(ctx context.Context, q Querier, name grammar.QualifiedName) (*resolvedSource, error) {
	ref := pgx.Identifier{name.Name}.Sanitize()
	if name.Schema != "" {
		ref = pgx.Identifier{name.Schema, name.Name}.Sanitize()
	}
	var oid uint32
	src := &resolvedSource{types: map[string]string{}}
	err := q.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, ref).
		Scan(&oid, &src.Schema, &src.Table)
	if errors.Is(err, pgx.ErrNoRows) {
		hint := "create the table first, or qualify it with its schema"
		return nil, pgerr.Newf(pgerr.UndefinedTable, "source table %s does not exist", ref).
			WithClass("not_found", "SourceTableNotFound").WithPosition(int(name.Pos)).WithHint("%s", hint)
	}
	if err != nil {
		return nil, err
	}
	return e.sourceByOID(ctx, q, oid, src)
}

// sourceByOID reads the columns and key of the source table oid into src,
// whose Schema and Table name it.
func (e *Executor) sourceByOID(ctx context.Context, q Querier, oid uint32, src *resolvedSource) (*resolvedSource, error) {
	rows, err := q.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
			COALESCE(a.attnum = ANY (i.indkey::int2[]), false)
		FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var col, typ string
		var isKey bool
		if err := rows.Scan(&col, &typ, &isKey); err != nil {
			return nil, err
		}
		src.Columns = append(src.Columns, col)
		src.types[col] = typ
		if isKey {
			src.Key = append(src.Key, col)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(src.Key) == 0 {
		// A target of this instance has no primary key but a unique key
		// (its groups); the engine's Define knows it. Give the resolver the
		// key columns it will inherit so the naming rules apply.
		var keys []string
		err := q.QueryRow(ctx, fmt.Sprintf(`SELECT ARRAY(SELECT jsonb_array_elements(c->'spec'->'group_by')->>'name')
			FROM %s._definition_of(current_user::regrole, $1::oid) c WHERE c IS NOT NULL`, base.Ident(e.cfg.Schema)), oid).Scan(&keys)
		if err == nil {
			src.Key = keys
		}
	}
	return src, nil
}

// specHeader is a spec's tables and canonical statement text, with the
// source and target schemas filled in.
func specHeader(st *grammar.TransformStmt, src *resolvedSource, targetSchema string) *model.Spec {
	spec := &model.Spec{
		Target: model.TableName{Schema: st.Target.Schema, Name: st.Target.Name},
		Source: model.TableName{Schema: src.Schema, Name: src.Table},
	}
	if spec.Target.Schema == "" {
		spec.Target.Schema = targetSchema
	}
	canon := *st
	canon.Source.Schema, canon.Source.Name = src.Schema, src.Table
	canon.Target.Schema = spec.Target.Schema
	spec.Statement = grammar.Canonical(&canon)
	return spec
}

// buildSpec turns a resolved statement into the engine's compiled form,
// inlining field-to-field references and rendering every formula from its
// syntax tree (never from the user's text).
func buildSpec(st *grammar.TransformStmt, src *resolvedSource, res *grammar.Resolution, targetSchema string) (*model.Spec, *formulaTrees, error) {
	spec := specHeader(st, src, targetSchema)
	spec.Joins = joinSpecs(st, src, res)
	keyExpr := map[string]string{}
	keyReads := map[string]reads{}
	for _, k := range res.Keys {
		col := k.Key.Column()
		g := model.GroupKey{Name: k.Column, Expr: model.JoinColumn(k.Item, col)}
		if k.Item == 0 {
			g.Reads = []string{col}
		} else {
			g.JoinReads = []model.JoinRead{{Item: k.Item, Column: col}}
		}
		keyExpr[k.Column], keyReads[k.Column] = g.Expr, reads{g.Reads, g.JoinReads}
		spec.GroupBy = append(spec.GroupBy, g)
	}

	rendered := make(map[string]string, len(res.Fields)) // field -> SQL over the source row
	fieldReads := make(map[string]reads, len(res.Fields))
	byName := make(map[string]*grammar.ResolvedField, len(res.Fields))
	for i := range res.Fields {
		byName[res.Fields[i].Name] = &res.Fields[i]
	}
	render := func(rf *grammar.ResolvedField, e grammar.Expr) (string, reads, error) {
		refs := make(map[*grammar.ColumnRef]grammar.ResolvedRef, len(rf.Refs))
		for _, r := range rf.Refs {
			refs[r.Ref] = r
		}
		var rd reads
		sql, err := grammar.Render(e, func(ref *grammar.ColumnRef) (string, error) {
			r, ok := refs[ref]
			if !ok {
				return "", pgerr.Newf(pgerr.InternalError, "unresolved reference %s", strings.Join(ref.Parts, "."))
			}
			switch r.Kind {
			case grammar.RefSource:
				rd.cols = append(rd.cols, r.Column)
				return model.SourceColumn(r.Column), nil
			case grammar.RefJoined:
				rd.joined = append(rd.joined, model.JoinRead{Item: r.Item, Column: r.Column})
				return model.JoinColumn(r.Item, r.Column), nil
			case grammar.RefKey:
				rd = rd.add(keyReads[r.Column])
				return keyExpr[r.Column], nil
			case grammar.RefField:
				rd = rd.add(fieldReads[r.Field])
				return "(" + rendered[r.Field] + ")", nil
			}
			return "", pgerr.Newf(pgerr.InternalError, "reference %s of kind %s", strings.Join(ref.Parts, "."), r.Kind)
		})
		return sql, rd.dedupe(), err
	}
	trees := &formulaTrees{roots: map[string]formulaNode{}}
	trees.render = func(n formulaNode) (string, error) {
		sql, _, err := render(n.rf, n.e)
		return sql, err
	}
	trees.field = func(n formulaNode) (formulaNode, bool) {
		for _, r := range n.rf.Refs {
			if r.Ref == n.e && r.Kind == grammar.RefField {
				root, ok := trees.roots[r.Field]
				return root, ok
			}
		}
		return formulaNode{}, false
	}
	fields := make([]model.Field, len(res.Fields))
	keep := make([]bool, len(res.Fields))
	for _, i := range res.Order {
		rf := &res.Fields[i]
		f := model.Field{Name: rf.Name}
		switch {
		case !st.IsAggregate():
			sql, rd, err := render(rf, rf.Expr)
			if err != nil {
				return nil, nil, err
			}
			f.Expr, f.Reads, f.JoinReads = sql, rd.cols, rd.joined
			rendered[rf.Name], fieldReads[rf.Name] = sql, rd
			trees.roots[rf.Name] = formulaNode{rf, rf.Expr}
			keep[i] = true
		case rf.Passthrough:
			// The key column exists whether or not it is selected.
			rendered[rf.Name], fieldReads[rf.Name] = keyExpr[rf.Name], keyReads[rf.Name]
		case rf.Aggregate:
			call, ok := rf.Expr.(*grammar.FuncCall)
			if !ok {
				return nil, nil, pgerr.Newf(pgerr.FeatureNotSupported, "field %s: an expression over an aggregate is not supported yet; compute it in a 1-1 transform over this target",
					grammar.QuoteIdentIfNeeded(rf.Name)).WithClass("unsupported", "NotYetSupported").WithPosition(int(rf.Expr.Position()))
			}
			f.Agg = aggKind(call)
			if f.Agg != model.AggCountStar {
				if len(call.Args) != 1 {
					return nil, nil, pgerr.Newf(pgerr.FeatureNotSupported, "field %s: aggregates take exactly one argument", grammar.QuoteIdentIfNeeded(rf.Name)).
						WithClass("validation", "UnsupportedAggregateArguments").WithPosition(int(call.Pos))
				}
				sql, rd, err := render(rf, call.Args[0])
				if err != nil {
					return nil, nil, err
				}
				f.Expr, f.Reads, f.JoinReads = sql, rd.cols, rd.joined
				trees.roots[rf.Name] = formulaNode{rf, call.Args[0]}
			}
			keep[i] = true
		default:
			return nil, nil, pgerr.Newf(pgerr.FeatureNotSupported, "field %s: a computed non-aggregate field in a GROUP BY transform is not supported yet",
				grammar.QuoteIdentIfNeeded(rf.Name)).WithClass("unsupported", "NotYetSupported").WithPosition(int(rf.Expr.Position()))
		}
		fields[i] = f
	}
	for i, f := range fields {
		if keep[i] {
			spec.Fields = append(spec.Fields, f)
		}
	}
	return spec, trees, nil
}

func aggKind(f *grammar.FuncCall) model.AggKind {
	switch name := grammar.AggregateName(f); {
	case name == "count" && f.Star:
		return model.AggCountStar
	default:
		return model.AggKind(name)
	}
}

func dedupe(in []string) []string {
	seen := make(map[string]bool, len(in))
	out := in[:0:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// checkFormulas is D8 against the live catalog, run as the caller inside a
// savepoint so nothing it creates survives:
//
//   - every formula must resolve (unknown functions, operators, types and
//     type mismatches are reported by Postgres, at the failing formula);
//   - nothing it calls may be user-defined: Postgres records no dependency
//     on the pinned objects of pg_catalog, so any function, operator, cast or
//     type a probe view depends on was created by a user;
//   - every formula must be immutable, by Postgres's own rule for generated
//     columns (which also looks through casts that go via text I/O).
func (e *Executor) checkFormulas(ctx context.Context, q Querier, st *grammar.TransformStmt, src *resolvedSource, spec *model.Spec, trees *formulaTrees) error {
	var probes []formulaProbe
	fieldPos := map[string]grammar.Pos{}
	for _, f := range st.Fields {
		fieldPos[f.Name] = f.Pos
	}
	for _, g := range spec.GroupBy {
		probes = append(probes, formulaProbe{g.Expr, st.Pos, ""})
	}
	for _, f := range spec.Fields {
		if f.Expr != "" {
			probes = append(probes, formulaProbe{f.Expr, fieldPos[f.Name], f.Name})
		}
	}
	if len(probes) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, "SAVEPOINT trellis_formula_probe"); err != nil {
		return err
	}
	failed := true
	defer func() {
		if failed {
			q.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_formula_probe")
		}
		q.Exec(ctx, "RELEASE SAVEPOINT trellis_formula_probe")
	}()
	srcSQL := pgx.Identifier{src.Schema, src.Table}.Sanitize()
	if err := createProbeView(ctx, q, probes, (&model.Compiled{Spec: *spec}).FromSQL(), st.Pos); err != nil {
		return err
	}
	if err := refuseUserObjects(ctx, q, st.Pos); err != nil {
		return err
	}
	// Immutability, one formula at a time so the error names the culprit.
	// Each probe column takes the formula's own type, read off the view:
	// casting to text would itself be stable for some types.
	rows, err := q.Query(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = 'pg_temp.trellis_formula_probe'::regclass AND attnum > 0 ORDER BY attnum`)
	if err != nil {
		return err
	}
	types, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, "CREATE TEMP TABLE trellis_formula_probe_t (LIKE "+srcSQL+")"); err != nil {
		return err
	}
	// Generated columns see the table's columns unqualified: render the
	// formula against the probe table instead of the source alias; a
	// joined item's column read becomes a column "__j<i>.<name>" of it.
	unqualify := []string{base.Ident(model.SourceAlias) + ".", ""}
	if err := addJoinedProbeColumns(ctx, q, spec, src); err != nil {
		return err
	}
	for i := range spec.Joins {
		a := model.JoinAlias(i + 1)
		unqualify = append(unqualify, base.Ident(a)+`."`, `"`+a+".")
	}
	unq := strings.NewReplacer(unqualify...)
	addColumn := func(i int) string {
		return fmt.Sprintf("ADD COLUMN %s %s GENERATED ALWAYS AS ((%s)) STORED",
			base.Ident(fmt.Sprintf("__probe_%d", i)), types[i], unq.Replace(probes[i].sql))
	}
	// Every formula in one statement first (two round trips, not three a
	// formula); only when that fails, one at a time to name the culprit.
	if _, err := q.Exec(ctx, "SAVEPOINT trellis_formula_probe_one"); err != nil {
		return err
	}
	all := make([]string, len(probes))
	for i := range probes {
		all[i] = addColumn(i)
	}
	if _, err := q.Exec(ctx, "ALTER TABLE pg_temp.trellis_formula_probe_t "+strings.Join(all, ", ")); err == nil {
		failed = false
		_, err = q.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_formula_probe")
		return err
	}
	if _, err := q.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_formula_probe_one"); err != nil {
		return err
	}
	for i, p := range probes {
		if _, err := q.Exec(ctx, "SAVEPOINT trellis_formula_probe_one"); err != nil {
			return err
		}
		_, err := q.Exec(ctx, "ALTER TABLE pg_temp.trellis_formula_probe_t "+addColumn(i))
		if _, rbErr := q.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_formula_probe_one"); rbErr != nil {
			return rbErr
		}
		if err == nil {
			continue
		}
		if pgerr.CodeOf(err) == pgerr.InvalidObjectDefinition {
			// The caret goes on the call itself (Postgres gives no position).
			if at, ok, lerr := e.mutableCall(ctx, q, trees, p.field); lerr != nil {
				return lerr
			} else if ok {
				p.pos = at
			}
			return pgerr.New(pgerr.InvalidObjectDefinition, "formula is not immutable: it calls a volatile or stable function, or a cast that depends on session settings").
				WithClass("validation", "NonImmutableConstruct").WithPosition(int(p.pos)).
				WithDetail("targets must be computable from the source row alone (now(), random(), timestamptz-to-text casts and the like are refused)").
				WithHint("use an immutable built-in function, or store the value in a source column")
		}
		return formulaError(err, func(int) grammar.Pos { return p.pos })
	}
	failed = false
	_, err = q.Exec(ctx, "ROLLBACK TO SAVEPOINT trellis_formula_probe")
	return err
}

// formulaProbe is one formula checkFormulas probes.
type formulaProbe struct {
	sql   string
	pos   grammar.Pos
	field string // "" for a GROUP BY key
}

// createProbeView creates the temporary view holding every formula (its
// column i is probe i), which resolves them against the source as
// Postgres would; an error is placed at the failing formula.
func createProbeView(ctx context.Context, q Querier, probes []formulaProbe, from string, stmtPos grammar.Pos) error {
	// One view holds every formula; its column i is probe i.
	var b strings.Builder
	b.WriteString("CREATE TEMP VIEW trellis_formula_probe AS SELECT ")
	starts := make([]int, len(probes))
	for i, p := range probes {
		if i > 0 {
			b.WriteString(", ")
		}
		starts[i] = b.Len()
		b.WriteString("(" + p.sql + ") AS " + base.Ident(fmt.Sprintf("__probe_%d", i)))
	}
	b.WriteString(" FROM " + from)
	if _, err := q.Exec(ctx, b.String()); err != nil {
		return formulaError(err, func(at int) grammar.Pos {
			for i := len(starts) - 1; i >= 0; i-- {
				if at >= starts[i] {
					return probes[i].pos
				}
			}
			return stmtPos
		})
	}
	return nil
}

// refuseUserObjects refuses formulas (the probe view) that depend on a
// user-defined function, operator, cast, type or collation: Postgres
// records no dependency on pg_catalog's pinned objects, so any it records
// is a user's, and it would run with the workers' privileges.
func refuseUserObjects(ctx context.Context, q Querier, pos grammar.Pos) error {
	var userObjects []string
	rows, err := q.Query(ctx, `SELECT DISTINCT pg_describe_object(d.refclassid, d.refobjid, 0)
		FROM pg_depend d JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid
		WHERE r.ev_class = 'pg_temp.trellis_formula_probe'::regclass
		  AND d.refclassid IN ('pg_proc'::regclass, 'pg_operator'::regclass, 'pg_cast'::regclass,
		                       'pg_type'::regclass, 'pg_collation'::regclass)
		ORDER BY 1`)
	if err != nil {
		return err
	}
	if userObjects, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return err
	}
	if len(userObjects) > 0 {
		return pgerr.Newf(pgerr.FeatureNotSupported, "formulas may only use built-in functions, operators and types; %s is user-defined", userObjects[0]).
			WithClass("validation", "UserDefinedFunction").WithPosition(int(pos)).
			WithDetail("user-defined objects would run with the workers' privileges").
			WithHint("express the formula with built-in (pg_catalog) functions")
	}
	return nil
}

// formulaError turns a Postgres error raised by a probe into one that points
// into the client's statement. The error comes from pgx (*pgconn.PgError) on
// the workers' connections, or as a *pgerr.Error from the proxy's lent
// client connection.
func formulaError(err error, posOf func(at int) grammar.Pos) error {
	out := &pgerr.Error{Err: err}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		out.Code, out.Message, out.Detail, out.Hint, out.Position = pgErr.Code, pgErr.Message, pgErr.Detail, pgErr.Hint, int(pgErr.Position)
	} else if pe, ok := pgerr.As(err); ok {
		out.Code, out.Message, out.Detail, out.Hint, out.Position = pe.Code, pe.Message, pe.Detail, pe.Hint, pe.Position
	} else {
		return err
	}
	out.Position = int(posOf(out.Position - 1))
	switch out.Code {
	case pgerr.UndefinedFunction:
		out.Class, out.Variant = "validation", "FunctionArgTypeMismatch"
	case pgerr.DatatypeMismatch:
		out.Class, out.Variant = "validation", "TypeMismatch"
	case pgerr.FeatureNotSupported:
		out.Class, out.Variant = "validation", "SetReturningFunctionNotAllowed"
	default:
		out.Class, out.Variant = "validation", "InvalidFormula"
	}
	return out
}
