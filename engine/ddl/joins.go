package ddl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/engine/model"
	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// JOIN targets (issue 16, docs/joins.md): every check of joins spec §4
// that needs the catalog, run in the spec's order after the grammar's name
// and ON checks, so a JOIN TRANSFORM gets the error a user would fix
// first. Maintenance is in engine/drain/fanout.go; the generated SQL reads the joins
// through model.Spec.JoinClause.

// qualifyTables returns st with the FROM table and every joined table
// qualified by the schema the client's search_path resolves them to (a
// name that resolves to nothing stays as written, for SourceTableNotFound).
func qualifyTables(ctx context.Context, q Querier, st *grammar.TransformStmt) (*grammar.TransformStmt, error) {
	schemaOf := func(name grammar.QualifiedName) (string, error) {
		if name.Schema != "" {
			return name.Schema, nil
		}
		var schema *string
		err := q.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass($1)`, pgx.Identifier{name.Name}.Sanitize()).Scan(&schema)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return "", err
		}
		if schema == nil {
			return "", nil
		}
		return *schema, nil
	}
	out := *st
	var err error
	if out.Source.Schema, err = schemaOf(st.Source); err != nil {
		return nil, err
	}
	if len(st.Joins) > 0 {
		out.Joins = slices.Clone(st.Joins)
		for i := range out.Joins {
			if out.Joins[i].Table.Schema, err = schemaOf(st.Joins[i].Table); err != nil {
				return nil, err
			}
		}
	}
	return &out, nil
}

// joinedTable is one FROM item's table as the defining session sees it.
type joinedTable struct {
	*resolvedSource
	oid  uint32
	text string // schema-qualified and quoted
	pos  grammar.Pos
}

// checkJoinTarget runs the checks of joins spec §4 on a JOIN TRANSFORM and
// returns the first failure, or the FROM table resolved with its joined
// tables when all pass.
func (e *Executor) checkJoinTarget(ctx context.Context, q Querier, st *grammar.TransformStmt) (*resolvedSource, error) {
	items := make([]joinedTable, 0, 1+len(st.Joins))
	names := []grammar.QualifiedName{st.Source}
	for _, j := range st.Joins {
		names = append(names, j.Table)
	}
	// Every item resolves, and the caller may read it.
	for _, name := range names {
		it, err := e.resolveItem(ctx, q, name)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	src := *items[0].resolvedSource
	src.Joined = nil
	for _, it := range items[1:] {
		src.Joined = append(src.Joined, grammar.JoinedTable{Schema: it.Schema, Table: it.Table, Columns: it.Columns})
		src.joinedTypes = append(src.joinedTypes, it.types)
	}
	// Names, ON shapes (the grammar's stage C).
	res, err := grammar.Resolve(st, &src.Source)
	if err != nil {
		return nil, err
	}
	// Each item a plain keyed table or a target.
	for _, it := range items {
		if err := changeKeyed(ctx, q, it); err != nil {
			return nil, err
		}
	}
	// Join columns: same types, deterministic collations, key types.
	for _, rj := range res.Joins {
		if err := checkJoinColumns(ctx, q, items, rj); err != nil {
			return nil, err
		}
	}
	// Every join to-one.
	for _, rj := range res.Joins {
		if err := checkToOne(ctx, q, items, rj); err != nil {
			return nil, err
		}
	}
	// The workers can read and capture every item; the owner's row
	// security does not apply to any.
	for _, it := range items {
		if err := e.checkWorkersCapture(ctx, q, it); err != nil {
			return nil, err
		}
		if err := checkRowSecurity(ctx, q, it.oid, it.text); err != nil {
			return nil, err
		}
	}
	// The fan-out indexes, unless WITHOUT SOURCE INDEX.
	if !st.WithoutSourceIndex {
		for _, rj := range res.Joins {
			if err := checkFanOutIndex(ctx, q, items, rj); err != nil {
				return nil, err
			}
		}
	}
	return &src, nil
}

// resolveItem resolves one FROM item's table and checks the caller may
// SELECT it.
func (e *Executor) resolveItem(ctx context.Context, q Querier, name grammar.QualifiedName) (joinedTable, error) {
	ref := pgx.Identifier{name.Name}.Sanitize()
	if name.Schema != "" {
		ref = pgx.Identifier{name.Schema, name.Name}.Sanitize()
	}
	it := joinedTable{resolvedSource: &resolvedSource{types: map[string]string{}}, pos: name.Pos}
	var readable bool
	err := q.QueryRow(ctx, `SELECT c.oid, n.nspname, c.relname, format('%I.%I', n.nspname, c.relname),
			has_table_privilege(c.oid, 'SELECT')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, ref).
		Scan(&it.oid, &it.Schema, &it.Table, &it.text, &readable)
	if errors.Is(err, pgx.ErrNoRows) {
		return it, pgerr.Newf(pgerr.UndefinedTable, "table %s does not exist", ref).
			WithClass("not_found", "SourceTableNotFound").WithPosition(int(name.Pos)).
			WithHint("create the table first, or qualify it with its schema")
	}
	if err != nil {
		return it, err
	}
	if !readable {
		return it, pgerr.Newf(pgerr.InsufficientPrivilege, "permission denied for table %s", it.text).
			WithClass("permission", "MissingPrivilege").WithPosition(int(name.Pos)).
			WithHint("GRANT SELECT ON %s TO <your role>;", it.text)
	}
	if _, err := e.sourceByOID(ctx, q, it.oid, it.resolvedSource); err != nil {
		return it, err
	}
	return it, nil
}

// changeKeyed refuses an item capture cannot follow: the rules of
// SourceNotChangeKeyed (a plain, logged table outside any partition or
// inheritance hierarchy), with a target of this instance allowed.
func changeKeyed(ctx context.Context, q Querier, it joinedTable) error {
	var plain bool
	if err := q.QueryRow(ctx, `SELECT c.relkind = 'r' AND NOT c.relispartition AND c.relpersistence = 'p'
			AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid OR inhparent = c.oid)
		FROM pg_class c WHERE c.oid = $1`, it.oid).Scan(&plain); err != nil {
		return err
	}
	if !plain {
		return pgerr.Newf(pgerr.FeatureNotSupported, "%s is not a plain table (or is partitioned, a partition, unlogged, temporary or part of an inheritance hierarchy); statement triggers cannot capture its changes", it.text).
			WithClass("validation", "SourceNotChangeKeyed").WithPosition(int(it.pos)).
			WithHint("read a plain, logged table, or a target of this instance that copies it")
	}
	if len(it.Key) == 0 {
		return pgerr.Newf(pgerr.ObjectNotInPrerequisiteState, "%s has no primary key", it.text).
			WithClass("validation", "NoPrimaryKey").WithPosition(int(it.pos)).
			WithHint("ALTER TABLE %s ADD PRIMARY KEY (...);", it.text)
	}
	return nil
}

// columnTypes reads what checkKeyType needs of columns cols of table oid,
// in the order given.
func columnTypes(ctx context.Context, q Querier, oid uint32, cols []string) ([]keyTypeRow, error) {
	rows, err := q.Query(ctx, `
		SELECT a.attname, format_type(t.oid, a.atttypmod), t.typtype::text, t.typcategory::text,
		       t.typnamespace = 'pg_catalog'::regnamespace, coalesce(co.collname, ''), coalesce(co.collisdeterministic, true)
		FROM pg_catalog.unnest($2::text[]) WITH ORDINALITY AS w(name, ord)
		JOIN pg_attribute a ON a.attrelid = $1 AND a.attname = w.name
		JOIN pg_type t ON t.oid = a.atttypid
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		ORDER BY w.ord`, oid, cols)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (keyTypeRow, error) {
		var k keyTypeRow
		err := r.Scan(&k.name, &k.typ, &k.typtype, &k.category, &k.builtin, &k.collation, &k.deterministicColl)
		return k, err
	})
}

// checkJoinColumns refuses an equality whose columns differ in type or
// typmod (no implicit cast: a key compared through a cast may match
// differently than the index the fan-out uses), or whose type or collation
// cannot be a key.
func checkJoinColumns(ctx context.Context, q Querier, items []joinedTable, rj grammar.ResolvedJoin) error {
	child, parent := items[rj.Item], items[rj.Parent]
	ct, err := columnTypes(ctx, q, child.oid, rj.Columns)
	if err != nil {
		return err
	}
	pt, err := columnTypes(ctx, q, parent.oid, rj.ParentColumns)
	if err != nil {
		return err
	}
	if len(ct) != len(rj.Columns) || len(pt) != len(rj.ParentColumns) {
		return fmt.Errorf("join columns of %s: %d and %d of %d found", child.text, len(ct), len(pt), len(rj.Columns))
	}
	for i := range ct {
		what := fmt.Sprintf("join column %s of %s", ct[i].name, child.text)
		if err := checkKeyType(ct[i], what, "UnsupportedPrimaryKeyType"); err != nil {
			return withPos(err, child.pos)
		}
		if err := checkKeyType(pt[i], fmt.Sprintf("join column %s of %s", pt[i].name, parent.text), "UnsupportedPrimaryKeyType"); err != nil {
			return withPos(err, child.pos)
		}
		if ct[i].typ != pt[i].typ || ct[i].collation != pt[i].collation {
			return pgerr.Newf(pgerr.DatatypeMismatch, "join of %s: %s.%s is %s but %s.%s is %s", child.text,
				child.text, grammar.QuoteIdentIfNeeded(ct[i].name), describeType(ct[i]), parent.text, grammar.QuoteIdentIfNeeded(pt[i].name), describeType(pt[i])).
				WithClass("validation", "JoinTypeMismatch").WithPosition(int(child.pos)).
				WithHint("join columns must have the same type, typmod and collation: change one column's type, or join a target that casts it")
		}
	}
	return nil
}

func describeType(k keyTypeRow) string {
	if k.collation != "" && k.collation != "default" {
		return k.typ + " COLLATE " + grammar.QuoteIdentIfNeeded(k.collation)
	}
	return k.typ
}

func withPos(err error, pos grammar.Pos) error {
	if pe, ok := pgerr.As(err); ok && pe.Position == 0 {
		return pe.WithPosition(int(pos))
	}
	return err
}

// checkToOne refuses a join whose equalities do not cover a unique key of
// the joined table: its primary key or a non-partial unique index without
// expressions (a target's group index qualifies).
func checkToOne(ctx context.Context, q Querier, items []joinedTable, rj grammar.ResolvedJoin) error {
	child := items[rj.Item]
	rows, err := q.Query(ctx, `SELECT ARRAY(SELECT a.attname::text FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord)
		FROM pg_index i WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
		ORDER BY i.indisprimary DESC, i.indexrelid`, child.oid)
	if err != nil {
		return err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	if err != nil {
		return err
	}
	for _, k := range keys {
		covered := len(k) > 0
		for _, c := range k {
			covered = covered && slices.Contains(rj.Columns, c)
		}
		if covered {
			return nil
		}
	}
	want := "a primary key or unique index"
	if len(keys) > 0 {
		want = "(" + strings.Join(keys[0], ", ") + ")"
	}
	return pgerr.Newf(pgerr.FeatureNotSupported, "join of %s is not to-one: its ON condition sets (%s) equal, which is not a unique key of %s", child.text,
		strings.Join(rj.Columns, ", "), child.text).
		WithClass("validation", "JoinNotToOne").WithPosition(int(child.pos)).
		WithDetail("columns that would have to be unique: %s; unique keys of %s: %s", strings.Join(rj.Columns, ", "), child.text, want).
		WithHint("every join reads at most one row; to fold many rows per row, make the many side the FROM table and GROUP BY the other's key")
}

// checkWorkersCapture refuses an item whose changes the workers' role
// could not capture (capture triggers are ENABLE ALWAYS: the owner's, D9).
func (e *Executor) checkWorkersCapture(ctx context.Context, q Querier, it joinedTable) error {
	worker := e.workerRole()
	if worker == "" {
		return nil // not running yet (define-only tools); _define checks the FROM table
	}
	var ok bool
	var owner string
	if err := q.QueryRow(ctx, `SELECT pg_has_role($1::name, c.relowner, 'USAGE'), pg_get_userbyid(c.relowner)::text FROM pg_class c WHERE c.oid = $2`,
		worker, it.oid).Scan(&ok, &owner); err != nil {
		return err
	}
	if !ok {
		return pgerr.Newf(pgerr.InsufficientPrivilege, "the workers' role %s cannot capture changes of %s", worker, it.text).
			WithClass("permission", "WorkersCannotCapture").WithPosition(int(it.pos)).
			WithHint("GRANT %s TO %s;", pgx.Identifier{owner}.Sanitize(), pgx.Identifier{worker}.Sanitize())
	}
	return nil
}

// checkFanOutIndex refuses a join whose earlier item has no btree index
// leading with the columns its ON condition reads: fan-out finds the FROM
// keys reading a changed row of the joined table through that index
// (joins spec §5 item 5).
func checkFanOutIndex(ctx context.Context, q Querier, items []joinedTable, rj grammar.ResolvedJoin) error {
	parent := items[rj.Parent]
	var found bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
		WHERE i.indrelid = $1 AND am.amname = 'btree' AND i.indpred IS NULL AND i.indnkeyatts >= cardinality($2::text[])
		  AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_catalog.unnest((i.indkey::int2[])[0:cardinality($2::text[]) - 1]) AS k(attnum)
		       JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum)
		      = (SELECT array_agg(c ORDER BY c) FROM pg_catalog.unnest($2::text[]) AS c))`, parent.oid, rj.ParentColumns).Scan(&found); err != nil {
		return err
	}
	if found {
		return nil
	}
	cols := make([]string, len(rj.ParentColumns))
	for i, c := range rj.ParentColumns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	create := fmt.Sprintf("CREATE INDEX ON %s (%s);", parent.text, strings.Join(cols, ", "))
	return pgerr.Newf(pgerr.FeatureNotSupported, "join of %s needs an index on %s (%s): a change of %s finds the rows that read it through it",
		items[rj.Item].text, parent.text, strings.Join(rj.ParentColumns, ", "), items[rj.Item].text).
		WithClass("validation", "MissingSourceIndex").WithPosition(int(items[rj.Item].pos)).
		WithDetail("create_index: %s", create).
		WithHint("%s (or end the statement with WITHOUT SOURCE INDEX)", create)
}

// addJoinedProbeColumns adds to the immutability probe's table a column
// "__j<i>.<name>" of the column's type for every joined column a formula
// reads, so the probe's generated columns can read them (checkFormulas).
func addJoinedProbeColumns(ctx context.Context, q Querier, spec *model.Spec, src *resolvedSource) error {
	seen := map[model.JoinRead]bool{}
	var adds []string
	add := func(rs []model.JoinRead) {
		for _, r := range rs {
			if seen[r] {
				continue
			}
			seen[r] = true
			adds = append(adds, "ADD COLUMN "+pgx.Identifier{model.JoinAlias(r.Item) + "." + r.Column}.Sanitize()+" "+src.joinedTypes[r.Item-1][r.Column])
		}
	}
	for _, g := range spec.GroupBy {
		add(g.JoinReads)
	}
	for _, f := range spec.Fields {
		add(f.JoinReads)
	}
	if len(adds) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, "ALTER TABLE pg_temp.trellis_formula_probe_t "+strings.Join(adds, ", "))
	return err
}

// joinedRead is one joined table's _definition_reads row as _define takes
// it: a table joined twice (two aliases) reads the union of the columns.
type joinedRead struct {
	Table   string   `json:"table"`
	OID     uint32   `json:"oid"`
	Columns []string `json:"columns"`
}

// resolveJoins resolves a JOIN target's joined tables as Define and the
// workers' verification both see them: each one's canonical name and
// identity (the key its capture logs), with the key-type and row-security
// rules of a source. It returns the joined tables' reads, JSON for _define
// (nil for a one-table target).
func (e *Executor) resolveJoins(ctx context.Context, q Querier, c *model.Compiled) ([]byte, error) {
	if len(c.Spec.Joins) == 0 {
		return nil, nil
	}
	var out []joinedRead
	at := map[string]int{}
	for i := range c.Spec.Joins {
		j := &c.Spec.Joins[i]
		var oid uint32
		err := q.QueryRow(ctx, `SELECT c.oid, format('%I.%I', n.nspname, c.relname) FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, j.Table.Quoted()).Scan(&oid, &j.Text)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, pgerr.Newf(pgerr.UndefinedTable, "table %s does not exist", j.Table.Quoted()).
				WithClass("not_found", "SourceTableNotFound").WithHint("create the table first, or qualify it with its schema")
		}
		if err != nil {
			return nil, err
		}
		if j.Key, j.KeyNullable, _, err = e.keyOfReadTable(ctx, q, oid, j.Text); err != nil {
			return nil, err
		}
		if !onIdentity(j) {
			// Joined on another unique key: capture logs its values too.
			if j.Match, err = columnKeys(ctx, q, oid, j.Columns); err != nil {
				return nil, err
			}
		}
		cols := c.Spec.ItemReads(i + 1)
		if n, ok := at[j.Text]; ok {
			out[n].Columns = dedupe(append(out[n].Columns, cols...))
			continue
		}
		at[j.Text] = len(out)
		out = append(out, joinedRead{Table: j.Text, OID: oid, Columns: cols})
	}
	return json.Marshal(out)
}

// onIdentity reports whether a join's columns are exactly the joined
// table's identity (its key capture logs).
func onIdentity(j *model.Join) bool {
	if len(j.Columns) != len(j.Key) {
		return false
	}
	for _, k := range j.Key {
		if !slices.Contains(j.Columns, k.Name) {
			return false
		}
	}
	return true
}

// columnKeys describes columns cols of table rel, in that order, as key
// columns (primaryKey's rendering of their types).
func columnKeys(ctx context.Context, q Querier, rel uint32, cols []string) ([]model.KeyCol, error) {
	rows, err := q.Query(ctx, keyColSelect+`
		FROM pg_catalog.unnest($2::text[]) WITH ORDINALITY AS w(name, ord)
		JOIN pg_attribute a ON a.attrelid = $1 AND a.attname = w.name AND NOT a.attisdropped
		JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace tn ON tn.oid = t.typnamespace
		ORDER BY w.ord`, rel, cols)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, scanKeyCol)
	if err == nil && len(out) != len(cols) {
		err = fmt.Errorf("columns %v of relation %d: %d found", cols, rel, len(out))
	}
	return out, err
}

// resolveFrom resolves a TRANSFORM's FROM table through the caller's
// catalog, with its joined tables and the checks of joins spec §4 for a
// JOIN target.
func (e *Executor) resolveFrom(ctx context.Context, q Querier, st *grammar.TransformStmt) (*resolvedSource, error) {
	if len(st.Joins) > 0 {
		return e.checkJoinTarget(ctx, q, st)
	}
	return e.resolveSource(ctx, q, st.Source)
}

// joinSpecs are the JOIN items of a resolved statement as the spec keeps
// them.
func joinSpecs(st *grammar.TransformStmt, src *resolvedSource, res *grammar.Resolution) []model.Join {
	var out []model.Join
	for i, rj := range res.Joins {
		jt := src.Joined[i]
		out = append(out, model.Join{Table: model.TableName{Schema: jt.Schema, Name: jt.Table},
			Left: st.Joins[i].Kind == grammar.JoinLeft, Parent: rj.Parent, Columns: rj.Columns, ParentColumns: rj.ParentColumns})
	}
	return out
}

// reads are the columns a formula reads: of the FROM table and of joined
// items.
type reads struct {
	cols   []string
	joined []model.JoinRead
}

func (r reads) add(o reads) reads {
	r.cols = append(r.cols, o.cols...)
	r.joined = append(r.joined, o.joined...)
	return r
}

func (r reads) dedupe() reads {
	r.cols = dedupe(r.cols)
	seen := map[model.JoinRead]bool{}
	var out []model.JoinRead
	for _, j := range r.joined {
		if !seen[j] {
			seen[j] = true
			out = append(out, j)
		}
	}
	r.joined = out
	return r
}

// joinedColumns are the columns a JOIN target reads of each joined table,
// as JSON {table: [column, ...]} (ALTER TRANSFORM stores them).
func joinedColumns(spec *model.Spec) []byte {
	cols := map[string][]string{}
	for i, j := range spec.Joins {
		cols[j.Text] = dedupe(append(cols[j.Text], spec.ItemReads(i+1)...))
	}
	out, _ := json.Marshal(cols)
	return out
}

// readsText lists the tables a definition reads for its notice: the
// source, then each joined table once.
func readsText(source string, spec *model.Spec) string {
	out, seen := source, map[string]bool{source: true}
	for _, j := range spec.Joins {
		if t := grammar.QuoteIdentIfNeeded(j.Table.Schema) + "." + grammar.QuoteIdentIfNeeded(j.Table.Name); !seen[t] {
			seen[t] = true
			out += ", " + t
		}
	}
	return out
}
