package model

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// Join is one JOIN item of a JOIN target (joins spec): its table, read in
// generated SQL under JoinAlias(i) for the i-th join (1-based), joined to
// an earlier item (Parent 0 the FROM table, else the Parent-th join) by
// Columns = ParentColumns, pairwise. Every join is to-one (define checks
// it), so the FROM table stays the grain.
type Join struct {
	Table         TableName `json:"table"`
	Left          bool      `json:"left,omitempty"`
	Parent        int       `json:"parent"`
	Columns       []string  `json:"columns"`
	ParentColumns []string  `json:"parent_columns"`
	// Resolved at define: the table's canonical name (as in
	// _change_log.src_table) and its identity, the key capture logs.
	Text        string   `json:"text,omitempty"`
	Key         []KeyCol `json:"key,omitempty"`
	KeyNullable bool     `json:"key_nullable,omitempty"`
	// Match is set for a join on a unique key other than the identity:
	// Columns with their types, which capture logs (old and new values,
	// NULL-aware) under LogTable, so fan-out finds the rows that read a
	// changed row by the values they join on.
	Match []KeyCol `json:"match,omitempty"`
}

// MatchKey is what fan-out finds a changed row's readers by, as the log
// carries it: the table's identity for a join on it, else Match.
func (j *Join) MatchKey() ([]KeyCol, bool) {
	if len(j.Match) == 0 {
		return j.Key, j.KeyNullable
	}
	return j.Match, true
}

// LogTable is the _change_log.src_table under which capture logs what
// MatchKey reads: the table itself, or for a join on another unique key
// AltLogTable of its columns.
func (j *Join) LogTable() string {
	if len(j.Match) == 0 {
		return j.Text
	}
	return AltLogTable(j.Text, j.Columns)
}

// AltLogTable names the log rows of table's values of cols: table's
// canonical name (which never holds an unquoted "#") and the columns.
func AltLogTable(table string, cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return table + "#(" + strings.Join(q, ",") + ")"
}

// AltBase is the table an AltLogTable name logs for ("" for a plain
// table name).
func AltBase(logTable string) string {
	if i := strings.Index(logTable, "#("); i > 0 && strings.HasSuffix(logTable, ")") {
		return logTable[:i]
	}
	return ""
}

// JoinRead is a column of a joined item a formula reads.
type JoinRead struct {
	Item   int    `json:"item"`
	Column string `json:"column"`
}

// JoinAlias is the alias of the i-th joined item (1-based) in generated
// SQL; item 0 is the FROM table, SourceAlias. User names may not start
// with "__", so no formula can shadow it.
func JoinAlias(i int) string {
	if i == 0 {
		return SourceAlias
	}
	return "__j" + Itoa(i)
}

// JoinColumn renders a reference to column col of item i.
func JoinColumn(i int, col string) string { return pgx.Identifier{JoinAlias(i), col}.Sanitize() }

// JoinClause renders the JOIN items after the FROM table (aliased
// SourceAlias): " LEFT JOIN t AS "__j1" ON ..." in statement order, as
// Postgres would run the definition's own query.
func (s *Spec) JoinClause() string {
	var b strings.Builder
	for i, j := range s.Joins {
		if j.Left {
			b.WriteString(" LEFT JOIN ")
		} else {
			b.WriteString(" JOIN ")
		}
		b.WriteString(j.Table.Quoted() + " AS " + pgx.Identifier{JoinAlias(i + 1)}.Sanitize() + " ON ")
		for n := range j.Columns {
			if n > 0 {
				b.WriteString(" AND ")
			}
			b.WriteString(JoinColumn(i+1, j.Columns[n]) + " = " + JoinColumn(j.Parent, j.ParentColumns[n]))
		}
	}
	return b.String()
}

// FromSQL is the definition's FROM clause body: the source under
// SourceAlias and every join.
func (c *Compiled) FromSQL() string {
	return c.Source() + " AS " + pgx.Identifier{SourceAlias}.Sanitize() + c.Spec.JoinClause()
}

// ItemReads are the columns of item i (0 the FROM table) the definition
// reads: those formulas and GROUP BY keys read, the item's own join
// columns and the columns later items join it on, each once.
func (s *Spec) ItemReads(i int) []string {
	seen := map[string]bool{}
	var out []string
	add := func(cols ...string) {
		for _, c := range cols {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	if i == 0 {
		add(s.Reads()...)
	} else {
		add(s.Joins[i-1].Columns...)
		for _, g := range s.GroupBy {
			for _, r := range g.JoinReads {
				if r.Item == i {
					add(r.Column)
				}
			}
		}
		for _, f := range s.Fields {
			for _, r := range f.JoinReads {
				if r.Item == i {
					add(r.Column)
				}
			}
		}
	}
	for _, j := range s.Joins {
		if j.Parent == i {
			add(j.ParentColumns...)
		}
	}
	return out
}

// Path lists the items from the FROM table (0) to item i, both included.
func (s *Spec) Path(i int) []int {
	var rev []int
	for at := i; at != 0; at = s.Joins[at-1].Parent {
		rev = append(rev, at)
	}
	out := []int{0}
	for n := len(rev) - 1; n >= 0; n-- {
		out = append(out, rev[n])
	}
	return out
}
