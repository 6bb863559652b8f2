package model

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// SourceAlias is the alias under which compiled expressions reference the
// source row: a field formula reads column amount as "__s"."amount".
// User names may not start with "__" (grammar §7.6), so it cannot be shadowed.
const SourceAlias = "__s"

// SourceColumn renders a reference to a source column for use in Spec
// expressions: SourceColumn("amount") = `"__s"."amount"`.
func SourceColumn(col string) string { return pgx.Identifier{SourceAlias, col}.Sanitize() }

// TableName is a schema-qualified relation name, unquoted.
type TableName struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

func (t TableName) Quoted() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

func (t TableName) String() string { return t.Schema + "." + t.Name }

// Display is the name as a user wrote it: bare when no schema was given.
func (t TableName) Display() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.String()
}

// AggKind is an aggregate of grammar §5.6.
type AggKind string

const (
	AggNone      AggKind = ""
	AggSum       AggKind = "sum"
	AggCountStar AggKind = "count_star"
	AggCount     AggKind = "count"
	AggAvg       AggKind = "avg"
	AggMin       AggKind = "min"
	AggMax       AggKind = "max"
	AggBoolAnd   AggKind = "bool_and"
	AggBoolOr    AggKind = "bool_or"
	AggBitAnd    AggKind = "bit_and"
	AggBitOr     AggKind = "bit_or"
	AggJSONBAgg  AggKind = "jsonb_agg"
)

var aggSQLName = map[AggKind]string{
	AggSum: "sum", AggCountStar: "count", AggCount: "count", AggAvg: "avg", AggMin: "min",
	AggMax: "max", AggBoolAnd: "bool_and", AggBoolOr: "bool_or", AggBitAnd: "bit_and",
	AggBitOr: "bit_or", AggJSONBAgg: "jsonb_agg",
}

// Field is one target column computed from the source row.
//
// Expr is a SQL expression, already validated and rendered by the grammar
// (D8), that references source columns only as SourceColumn(name). For a 1-1
// definition it is the column's value; for an aggregate field it is the
// aggregate's argument (empty for COUNT(*)).
type Field struct {
	Name  string   `json:"name"`
	Expr  string   `json:"expr,omitempty"`
	Agg   AggKind  `json:"agg,omitempty"`
	Cast  string   `json:"cast,omitempty"`  // result cast of grammar §6.3 (e.g. "text", "varbit"); optional
	Reads []string `json:"reads,omitempty"` // source columns the expression reads
	// JoinReads are the columns of joined items it reads (JOIN targets).
	JoinReads []JoinRead `json:"join_reads,omitempty"`
}

// GroupKey is one GROUP BY key column of an aggregate target.
type GroupKey struct {
	Name      string     `json:"name"`
	Expr      string     `json:"expr"`
	Reads     []string   `json:"reads,omitempty"`
	JoinReads []JoinRead `json:"join_reads,omitempty"`
}

// Spec is a compiled TRANSFORM definition, independent of the grammar. A
// grammar.TransformStmt maps onto it field by field; a JOIN target's
// joined tables are Joins.
type Spec struct {
	Target    TableName  `json:"target"`
	Source    TableName  `json:"source"`
	Statement string     `json:"statement"` // canonical statement text, stored as definition_sql
	GroupBy   []GroupKey `json:"group_by,omitempty"`
	Fields    []Field    `json:"fields"`
	Joins     []Join     `json:"joins,omitempty"`
}

// IsAggregate reports whether the definition has a GROUP BY key space.
func (s *Spec) IsAggregate() bool { return len(s.GroupBy) > 0 }

// Kind is the definition kind the catalog stores: one_to_one or aggregate.
func (s *Spec) Kind() string {
	if s.IsAggregate() {
		return "aggregate"
	}
	return "one_to_one"
}

func validationErr(code, variant, format string, args ...any) *pgerr.Error {
	return pgerr.Newf(code, format, args...).WithClass("validation", variant)
}

// Check verifies the static shape of a spec (the live catalog is checked by Define).
func (s *Spec) Check(targetSchema string) error {
	if s.Target.Schema == "" {
		s.Target.Schema = targetSchema
	}
	if s.Source.Schema == "" {
		s.Source.Schema = "public"
	}
	if s.Target.Name == "" || s.Source.Name == "" {
		return validationErr(pgerr.InvalidParameterValue, "InvalidDefinition", "a transform needs a target and a source table")
	}
	if len(s.Target.Name) > 63-len(LedgerSuffix) {
		return pgerr.Newf(pgerr.NameTooLong, "target name %q is too long: at most %d bytes (the ledger %q suffix must fit)",
			s.Target.Name, 63-len(LedgerSuffix), LedgerSuffix).WithClass("parse", "NameTooLong")
	}
	if len(s.Fields) == 0 && !s.IsAggregate() {
		return validationErr(pgerr.InvalidParameterValue, "InvalidDefinition", "transform %s has no fields", s.Target)
	}
	seen := map[string]bool{}
	names := []string{}
	for _, g := range s.GroupBy {
		names = append(names, g.Name)
		if g.Expr == "" {
			return validationErr(pgerr.InvalidParameterValue, "InvalidDefinition", "GROUP BY key %q has no expression", g.Name)
		}
	}
	for _, f := range s.Fields {
		names = append(names, f.Name)
		if s.IsAggregate() {
			if f.Agg == AggNone {
				return validationErr(pgerr.GroupingError, "UngroupedColumn", "field %q of aggregate transform %s must be an aggregate", f.Name, s.Target)
			}
			if _, ok := aggSQLName[f.Agg]; !ok {
				return validationErr(pgerr.InvalidParameterValue, "UnknownAggregate", "field %q: unknown aggregate %q", f.Name, f.Agg)
			}
			if (f.Agg == AggCountStar) != (f.Expr == "") {
				return validationErr(pgerr.InvalidParameterValue, "InvalidDefinition", "field %q: COUNT(*) takes no argument, every other aggregate exactly one", f.Name)
			}
		} else {
			if f.Agg != AggNone {
				return validationErr(pgerr.GroupingError, "AggregateWithoutGroupBy", "field %q: aggregates need GROUP BY (relationship aggregates are not yet supported)", f.Name)
			}
			if f.Expr == "" {
				return validationErr(pgerr.InvalidParameterValue, "InvalidDefinition", "field %q has no expression", f.Name)
			}
		}
	}
	for _, n := range names {
		if n == "" {
			return validationErr(pgerr.InvalidParameterValue, "InvalidDefinition", "a column of %s has no name", s.Target)
		}
		if strings.HasPrefix(n, "__") {
			return validationErr(pgerr.InvalidParameterValue, "ReservedName", "column name %q: names starting with __ are reserved", n)
		}
		if seen[n] {
			return pgerr.Newf(pgerr.DuplicateColumn, "column %q appears twice in %s", n, s.Target).WithClass("validation", "DuplicateField")
		}
		seen[n] = true
	}
	return nil
}

// KeyCol is a source identity column as resolved at define.
type KeyCol struct {
	Name     string `json:"name"`
	Type     string `json:"type"`      // type without modifier, for casting key parts
	FullType string `json:"full_type"` // type with modifier and COLLATE clause, for CREATE TABLE
}

// ArgInfo is one distinct aggregate argument: a ledger column a<i> and its
// hidden accumulators in the target.
type ArgInfo struct {
	Expr     string `json:"expr"`
	Type     string `json:"type"`
	SumType  string `json:"sum_type,omitempty"`
	NeedSum  bool   `json:"need_sum,omitempty"`
	NeedTrue bool   `json:"need_true,omitempty"`
}

// Compiled is what the catalog stores in _definitions.compiled: the spec
// plus everything Define resolved against the live catalog.
type Compiled struct {
	Spec        Spec      `json:"spec"`
	SourceText  string    `json:"source_text"` // canonical name as in _change_log.src_table
	TargetText  string    `json:"target_text"`
	Key         []KeyCol  `json:"key"`
	KeyNullable bool      `json:"key_nullable"`
	GroupTypes  []string  `json:"group_types,omitempty"`
	GroupBase   []string  `json:"group_base,omitempty"`
	FieldTypes  []string  `json:"field_types"`
	Args        []ArgInfo `json:"args,omitempty"`
	FieldArg    []int     `json:"field_arg,omitempty"` // per field: index into Args, -1 for COUNT(*)
	Recompute   []bool    `json:"recompute,omitempty"` // per field: recomputed from the ledger
	NeedSrcKey  bool      `json:"need_src_key,omitempty"`
}

// LedgerSuffix names a target's ledger table: <target>__ledger.
const LedgerSuffix = "__ledger"

// Target, Ledger and Source are the quoted, schema-qualified tables.
func (c *Compiled) Target() string { return c.Spec.Target.Quoted() }
func (c *Compiled) Ledger() string {
	return pgx.Identifier{c.Spec.Target.Schema, c.Spec.Target.Name + LedgerSuffix}.Sanitize()
}
func (c *Compiled) Source() string { return c.Spec.Source.Quoted() }

func (c *Compiled) String() string { return fmt.Sprintf("%s <- %s", c.TargetText, c.SourceText) }

// AggSQLName is the SQL aggregate function of an aggregate kind.
func AggSQLName(k AggKind) string { return aggSQLName[k] }

// Reads are the source columns the definition reads, each once, GROUP BY
// keys first.
func (s *Spec) Reads() []string {
	seen := map[string]bool{}
	var out []string
	add := func(cols []string) {
		for _, c := range cols {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	for _, g := range s.GroupBy {
		add(g.Reads)
	}
	for _, f := range s.Fields {
		add(f.Reads)
	}
	return out
}

// TargetIdentity is the key a reader of this definition's target uses.
func (c *Compiled) TargetIdentity() ([]KeyCol, bool) {
	if !c.Spec.IsAggregate() {
		return c.Key, c.KeyNullable
	}
	out := make([]KeyCol, len(c.Spec.GroupBy))
	for i, g := range c.Spec.GroupBy {
		out[i] = KeyCol{Name: g.Name, Type: c.GroupBase[i], FullType: c.GroupTypes[i]}
	}
	return out, true
}

// ResolveArgs numbers the distinct aggregate arguments (Args, FieldArg).
func (c *Compiled) ResolveArgs() {
	c.FieldArg = make([]int, len(c.Spec.Fields))
	idx := map[string]int{}
	for i, f := range c.Spec.Fields {
		if f.Agg == AggCountStar {
			c.FieldArg[i] = -1
			continue
		}
		j, ok := idx[f.Expr]
		if !ok {
			j = len(c.Args)
			idx[f.Expr] = j
			c.Args = append(c.Args, ArgInfo{Expr: f.Expr})
		}
		c.FieldArg[i] = j
	}
}

// SourceColumns is what the reply shows as source_columns: the columns the
// definition reads, with their types in the live source, and a 1-1
// target's key.
func (c *Compiled) SourceColumns(types map[string]string) map[string]string {
	out := map[string]string{}
	for _, n := range c.Spec.Reads() {
		out[n] = types[n]
	}
	if !c.Spec.IsAggregate() {
		for _, k := range c.Key {
			out[k.Name] = k.FullType
		}
	}
	return out
}
