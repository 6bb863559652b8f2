package grammar

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Parse parses one Trellis statement (an optional trailing ";" allowed) and
// runs the checks of grammar spec §9.2 stage A, which need no database:
// lexing, statement syntax, formula syntax and shape, TargetEqualsSource.
//
// Errors are *pgerr.Error; positions are 1-based characters in text. A text
// that is not a Trellis statement at all (Recognize is false) gets an error
// wrapping ErrNotTrellis.
func Parse(text string) (Statement, error) {
	st, err := parse(text)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func parse(text string) (Statement, *pgerr.Error) {
	if !leadingTrellis(text) {
		e := newErr(UnexpectedToken, 1, "not a Trellis statement: expected TRANSFORM, RELATIONSHIP, PAUSE, RESUME, DROP or ALTER")
		e.Err = ErrNotTrellis
		return nil, e
	}
	pm := newPosMap(text)
	if i := strings.IndexByte(text, 0); i >= 0 {
		return nil, newErr(UnexpectedChar, pm.at(i), "unexpected NUL character in statement")
	}
	if !utf8.ValidString(text) {
		i := 0
		for i < len(text) {
			r, n := utf8.DecodeRuneInString(text[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, newErr(InvalidEncoding, pm.at(i), "invalid byte sequence for encoding \"UTF8\": 0x%02x", text[i])
	}
	p := &parser{text: text, pm: pm}
	if err := p.lexAll(); err != nil {
		return nil, err
	}
	return p.statement()
}

type parser struct {
	text string
	pm   *posMap
	toks []token // up to, excluding, the trailing ';'; ends with tEOF
	i    int
	end  int // byte offset where the statement ends (the ';' or len(text))
}

// lexAll tokenises the whole statement: lexing errors anywhere (including in
// formulas) come first (spec §9.2 A1).
func (p *parser) lexAll() *pgerr.Error {
	lx := &lexer{text: p.text, pm: p.pm}
	semi := -1
	for {
		t, err := lx.next()
		if err != nil {
			return err
		}
		if t.kind == tParam {
			return newErr(ParameterNotAllowed, p.pm.at(t.start), "parameters are not supported in Trellis statements").
				WithHint("pass the whole statement to trellis.apply($1)")
		}
		if t.kind == tEOF {
			if semi < 0 {
				p.end = len(p.text)
				p.toks = append(p.toks, t)
			}
			return nil
		}
		if semi >= 0 {
			return newErr(UnexpectedToken, p.pm.at(t.start), "syntax error at or near %q: only one statement may follow the Trellis keyword; nothing may follow the terminating \";\"", p.tokText(t))
		}
		if t.kind == tSemi {
			semi = t.start
			p.end = t.start
			p.toks = append(p.toks, token{kind: tEOF, start: t.start, end: t.start})
			continue
		}
		p.toks = append(p.toks, t)
	}
}

func (p *parser) tokText(t token) string {
	if t.kind == tEOF {
		return ""
	}
	s := p.text[t.start:t.end]
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) advance() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) at(t token) Pos { return p.pm.at(t.start) }

// isWord reports whether t is the unquoted keyword w.
func isWord(t token, w string) bool { return t.kind == tIdent && t.val == w }

// unexpected builds UnexpectedToken (or UnexpectedEof at the end).
func (p *parser) unexpected(t token, expected string) *pgerr.Error {
	if t.kind == tEOF {
		return newErr(UnexpectedEOF, p.pm.at(t.start), "syntax error at end of input: expected %s", expected)
	}
	return newErr(UnexpectedToken, p.at(t), "syntax error at or near %q: expected %s", p.tokText(t), expected)
}

func (p *parser) expectWord(w, expected string) (token, *pgerr.Error) {
	t := p.peek()
	if !isWord(t, w) {
		return t, p.unexpected(t, expected)
	}
	return p.advance(), nil
}

// name reads one identifier per spec §2.3: unquoted (not a reserved or
// type/function-name keyword) or double-quoted; U&"…" is refused here.
func (p *parser) name(what string) (Ident, *pgerr.Error) {
	t := p.peek()
	switch t.kind {
	case tQIdent:
		p.advance()
		return Ident{Name: t.val, Pos: p.at(t)}, nil
	case tUIdent:
		return Ident{}, newErr(UnsupportedIdentifierSyntax, p.at(t), "U&\"…\" identifiers are not supported in Trellis statement names").
			WithHint("write the name as a plain quoted identifier")
	case tIdent:
		if c := kwCategory[t.val]; c == kwReserved || c == kwTypeFunc {
			return Ident{}, newErr(UnexpectedToken, p.at(t), "syntax error at or near %q: %q is a reserved word and cannot be used as %s unquoted", p.tokText(t), t.val, what).
				WithHint("quote it: %s", quoteIdent(t.val))
		}
		p.advance()
		return Ident{Name: t.val, Pos: p.at(t)}, nil
	}
	return Ident{}, p.unexpected(t, what)
}

// dotted reads name { "." name } and returns the parts.
func (p *parser) dotted(what string) ([]Ident, *pgerr.Error) {
	first, err := p.name(what)
	if err != nil {
		return nil, err
	}
	parts := []Ident{first}
	for p.peek().kind == tDot {
		p.advance()
		n, err := p.name("a name after \".\"")
		if err != nil {
			return nil, err
		}
		parts = append(parts, n)
	}
	return parts, nil
}

func joinIdents(parts []Ident) string {
	s := make([]string, len(parts))
	for i, x := range parts {
		s[i] = quoteIdentIfNeeded(x.Name)
	}
	return strings.Join(s, ".")
}

func (p *parser) statement() (Statement, *pgerr.Error) {
	t := p.advance()
	var st Statement
	var err *pgerr.Error
	switch t.val {
	case "transform":
		st, err = p.transform(t)
	case "relationship":
		st, err = p.relationship(t)
	case "pause", "resume":
		st, err = p.pauseResume(t)
	case "drop":
		st, err = p.drop(t)
	case "alter":
		st, err = p.alter(t)
	default:
		return nil, p.unexpected(t, "TRANSFORM, RELATIONSHIP, PAUSE, RESUME, DROP or ALTER")
	}
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.unexpected(t, "end of statement")
	}
	if err := relationshipsReplaced(st); err != nil {
		return nil, err
	}
	return st, nil
}

// relationshipsReplaced refuses RELATIONSHIP and DROP RELATIONSHIP, which
// JOIN targets replace (architecture D19): the statement is still parsed
// whole, so its syntax errors come first, and the hint writes out the
// equivalent JOIN from the statement's own names.
func relationshipsReplaced(st Statement) *pgerr.Error {
	switch s := st.(type) {
	case *RelationshipStmt:
		from, to := quoteIdentIfNeeded(s.FromTable.Name), quoteIdentIfNeeded(s.ToTable.Name)
		name := quoteIdentIfNeeded(s.Name.Name)
		return newErr(RelationshipsReplacedByJoin, s.Pos, "RELATIONSHIP is replaced by JOIN: a transform reads other tables by joining them").
			WithHint("in the TRANSFORM that reads %s, write FROM %s LEFT JOIN %s AS %s ON %s.%s = %s.%s", name, from, to, name,
				name, quoteIdentIfNeeded(s.ToColumn.Name), from, quoteIdentIfNeeded(s.FromColumn.Name))
	case *DropRelationshipStmt:
		return newErr(RelationshipsReplacedByJoin, s.Pos, "DROP RELATIONSHIP: relationships are replaced by JOIN, so there is none to drop").
			WithHint("a transform's joins go with it: ALTER or DROP the TRANSFORM that joins the table")
	}
	return nil
}

// tableRef reads [schema.]table.
func (p *parser) tableRef(what string) (QualifiedName, *pgerr.Error) {
	parts, err := p.dotted(what)
	if err != nil {
		return QualifiedName{}, err
	}
	if len(parts) > 2 {
		return QualifiedName{}, newErr(TooManyQualifiedNameParts, parts[0].Pos, "too many dotted names in %s reference %s: expected [schema.]table", what, joinIdents(parts))
	}
	q := QualifiedName{Name: parts[len(parts)-1].Name, NamePos: parts[len(parts)-1].Pos, Pos: parts[0].Pos}
	if len(parts) == 2 {
		q.Schema, q.SchemaPos = parts[0].Name, parts[0].Pos
	}
	return q, nil
}

// maxTargetBytes leaves room for the engine's "<target>__ledger" companion
// (grammar spec §2.3).
const maxTargetBytes = 55

// maxJoins bounds the JOIN items of one transform (joins spec §4).
const maxJoins = 16

// notAlias are words that end a FROM item instead of naming it: the
// clauses that may follow, and the join words.
var notAlias = map[string]bool{"group": true, "select": true, "where": true, "without": true,
	"join": true, "inner": true, "left": true, "right": true, "full": true, "cross": true,
	"natural": true, "outer": true, "lateral": true, "on": true, "using": true}

func (p *parser) transform(kw token) (Statement, *pgerr.Error) {
	st := &TransformStmt{Pos: p.at(kw)}
	var err *pgerr.Error
	if st.Target, err = p.tableRef("target table"); err != nil {
		return nil, err
	}
	if len(st.Target.Name) > maxTargetBytes {
		return nil, newErr(NameTooLong, st.Target.NamePos, "target name %s is %d bytes long; target names are limited to %d bytes", quoteIdentIfNeeded(st.Target.Name), len(st.Target.Name), maxTargetBytes).
			WithDetail("the engine names a companion table %s__ledger", st.Target.Name)
	}
	if _, err = p.expectWord("from", "FROM"); err != nil {
		return nil, err
	}
	if st.Source, err = p.tableRef("source table"); err != nil {
		return nil, err
	}
	if st.SourceAlias, err = p.alias(); err != nil {
		return nil, err
	}
	if st.Joins, err = p.joins(); err != nil {
		return nil, err
	}
	if err := checkItemNames(st); err != nil {
		return nil, err
	}
	t := p.peek()
	if isWord(t, "group") {
		p.advance()
		if _, err := p.expectWord("by", "BY after GROUP"); err != nil {
			return nil, err
		}
		for {
			parts, err := p.dotted("a GROUP BY column")
			if err != nil {
				return nil, err
			}
			if len(parts) > 3 {
				return nil, newErr(TooManyQualifiedNameParts, parts[0].Pos, "too many dotted names in GROUP BY column %s", joinIdents(parts))
			}
			cn := ColumnName{Pos: parts[0].Pos}
			for _, x := range parts {
				cn.Parts = append(cn.Parts, x.Name)
			}
			st.GroupBy = append(st.GroupBy, cn)
			t := p.peek()
			if t.kind == tComma {
				p.advance()
				continue
			}
			if isWord(t, "select") {
				break
			}
			if isWord(t, "as") {
				return nil, newErr(UnexpectedToken, p.at(t), "syntax error at or near \"AS\": GROUP BY keys cannot be aliased").
					WithHint("a key's column is named after the column it reads")
			}
			return nil, p.unexpected(t, "\",\" or SELECT (GROUP BY keys are column references, not expressions)")
		}
	}
	t = p.peek()
	if !isWord(t, "select") {
		if t.kind == tIdent || t.kind == tQIdent {
			if !isWord(t, "where") && kwCategory[t.val] != kwReserved {
				return nil, newErr(UnexpectedToken, p.at(t), "syntax error at or near %q: a table alias is not allowed; expected GROUP BY or SELECT", p.tokText(t))
			}
		}
		return nil, p.unexpected(t, "GROUP BY or SELECT")
	}
	end := p.end
	if n := len(p.toks); n >= 4 && isWord(p.toks[n-4], "without") && isWord(p.toks[n-3], "source") && isWord(p.toks[n-2], "index") {
		st.WithoutSourceIndex = true
		end = p.toks[n-4].start
	}
	fields, err := p.selectList(t.start, end, true, !st.IsAggregate())
	if err != nil {
		return nil, err
	}
	st.Fields = fields
	p.i = len(p.toks) - 1 // the formula list runs to the end of the statement
	if st.Target.Name == st.Source.Name {
		return nil, newErr(TargetEqualsSource, st.Target.NamePos, "target %s has the same name as its source %s", quoteIdentIfNeeded(st.Target.Name), quoteIdentIfNeeded(st.Source.Name)).
			WithHint("choose another target name")
	}
	for _, j := range st.Joins {
		if st.Target.Name == j.Table.Name {
			return nil, newErr(TargetEqualsSource, st.Target.NamePos, "target %s has the same name as the joined table %s", quoteIdentIfNeeded(st.Target.Name), quoteIdentIfNeeded(j.Table.Name)).
				WithHint("choose another target name")
		}
	}
	return st, nil
}

// alias reads an optional `[AS] name` after a table reference.
func (p *parser) alias() (*Ident, *pgerr.Error) {
	t := p.peek()
	if isWord(t, "as") {
		p.advance()
		n, err := p.name("a table alias")
		if err != nil {
			return nil, err
		}
		return &n, nil
	}
	if t.kind == tQIdent || t.kind == tIdent && !notAlias[t.val] && kwCategory[t.val] != kwReserved && kwCategory[t.val] != kwTypeFunc {
		n, err := p.name("a table alias")
		if err != nil {
			return nil, err
		}
		return &n, nil
	}
	return nil, nil
}

// joins reads the JOIN items after the FROM item (joins spec §2): INNER and
// LEFT joins with an ON condition of equalities; every other join form is
// refused with the accepted shape as its hint.
func (p *parser) joins() ([]Join, *pgerr.Error) {
	var js []Join
	for {
		t := p.peek()
		j := Join{Pos: p.at(t), Kind: JoinInner}
		switch {
		case isWord(t, "join"):
			p.advance()
		case isWord(t, "inner"):
			p.advance()
			if _, err := p.expectWord("join", "JOIN after INNER"); err != nil {
				return nil, err
			}
		case isWord(t, "left"):
			p.advance()
			if isWord(p.peek(), "outer") {
				p.advance()
			}
			if _, err := p.expectWord("join", "JOIN after LEFT"); err != nil {
				return nil, err
			}
			j.Kind = JoinLeft
		case t.kind == tComma || t.kind == tIdent && (t.val == "right" || t.val == "full" || t.val == "cross" || t.val == "natural"):
			construct := "a comma-separated FROM list"
			if t.kind == tIdent {
				construct = strings.ToUpper(t.val) + " JOIN"
			}
			return nil, newErr(UnsupportedJoinKind, p.at(t), "%s is not supported in TRANSFORM: joins are INNER or LEFT, each with ON", construct).
				WithDetail("construct: %s", construct).
				WithHint("write [LEFT] JOIN <table> ON <table>.<column> = <earlier item>.<column>")
		default:
			return js, nil
		}
		if isWord(p.peek(), "lateral") || p.peek().kind == tLParen {
			return nil, newErr(UnsupportedJoinKind, p.at(p.peek()), "a joined item must be a table: LATERAL and subqueries are not supported in TRANSFORM").
				WithHint("join a table, or a target that computes what the subquery would")
		}
		var err *pgerr.Error
		if j.Table, err = p.tableRef("joined table"); err != nil {
			return nil, err
		}
		if j.Alias, err = p.alias(); err != nil {
			return nil, err
		}
		if isWord(p.peek(), "using") {
			return nil, newErr(UnsupportedJoinCondition, p.at(p.peek()), "JOIN ... USING is not supported in TRANSFORM").
				WithDetail("construct: USING").
				WithHint("write the columns out: ON %s.<column> = <earlier item>.<column>", quoteIdentIfNeeded(itemName(j.Table, j.Alias)))
		}
		if _, err := p.expectWord("on", "ON after the joined table"); err != nil {
			return nil, err
		}
		if j.On, err = p.joinCond(j.Table, j.Alias); err != nil {
			return nil, err
		}
		if len(js) == maxJoins {
			return nil, newErr(TooManyJoins, j.Pos, "a transform may join at most %d tables", maxJoins).
				WithHint("chain transforms: join some of the tables into a target, then join that target")
		}
		js = append(js, j)
	}
}

// joinCond reads `conjunct {AND conjunct}`, a conjunct being an equality or
// a parenthesised condition.
func (p *parser) joinCond(table QualifiedName, alias *Ident) ([]JoinEquality, *pgerr.Error) {
	var eqs []JoinEquality
	for {
		if p.peek().kind == tLParen {
			p.advance()
			inner, err := p.joinCond(table, alias)
			if err != nil {
				return nil, err
			}
			if t := p.peek(); t.kind != tRParen {
				return nil, p.badJoinCond(t, table, alias)
			}
			p.advance()
			eqs = append(eqs, inner...)
		} else {
			eq, err := p.joinEquality(table, alias)
			if err != nil {
				return nil, err
			}
			eqs = append(eqs, eq)
		}
		t := p.peek()
		if isWord(t, "and") {
			p.advance()
			continue
		}
		if isWord(t, "or") || t.kind == tOp || t.kind == tCast || t.kind == tNumber || t.kind == tString {
			return nil, p.badJoinCond(t, table, alias)
		}
		return eqs, nil
	}
}

// joinEquality reads `column_ref = column_ref`.
func (p *parser) joinEquality(table QualifiedName, alias *Ident) (JoinEquality, *pgerr.Error) {
	side := func() (ColumnName, *pgerr.Error) {
		t := p.peek()
		if t.kind != tIdent && t.kind != tQIdent {
			return ColumnName{}, p.badJoinCond(t, table, alias)
		}
		parts, err := p.dotted("a column reference")
		if err != nil {
			return ColumnName{}, err
		}
		if n := p.peek(); n.kind == tLParen {
			return ColumnName{}, p.badJoinCond(n, table, alias)
		}
		if len(parts) > 3 {
			return ColumnName{}, newErr(TooManyQualifiedNameParts, parts[0].Pos, "too many dotted names in column reference %s", joinIdents(parts))
		}
		cn := ColumnName{Pos: parts[0].Pos}
		for _, x := range parts {
			cn.Parts = append(cn.Parts, x.Name)
		}
		return cn, nil
	}
	left, err := side()
	if err != nil {
		return JoinEquality{}, err
	}
	if t := p.peek(); t.kind != tOp || p.text[t.start:t.end] != "=" {
		return JoinEquality{}, p.badJoinCond(t, table, alias)
	}
	p.advance()
	right, err := side()
	if err != nil {
		return JoinEquality{}, err
	}
	return JoinEquality{Left: left, Right: right, Pos: left.Pos}, nil
}

// badJoinCond is UnsupportedJoinCondition at t, with the accepted shape.
func (p *parser) badJoinCond(t token, table QualifiedName, alias *Ident) *pgerr.Error {
	near := "end of input"
	if t.kind != tEOF {
		near = fmt.Sprintf("%q", p.tokText(t))
	}
	return newErr(UnsupportedJoinCondition, p.at(t), "unsupported join condition at or near %s: an ON condition is one or more column = column equalities joined by AND", near).
		WithHint("write ON %s.<column> = <earlier item>.<column> [AND ...]", quoteIdentIfNeeded(itemName(table, alias)))
}

// checkItemNames refuses two items of one name (a self-join needs an alias)
// and a JOIN of the FROM table's own name without one.
func checkItemNames(st *TransformStmt) *pgerr.Error {
	seen := map[string]bool{}
	for i, n := range st.ItemNames() {
		if seen[n] {
			pos := st.Source.Pos
			table := st.Source
			if i > 0 {
				pos, table = st.Joins[i-1].Table.Pos, st.Joins[i-1].Table
			}
			return newErr(DuplicateTableName, pos, "table name %s specified more than once", quoteIdentIfNeeded(n)).
				WithHint("give the second %s an alias: JOIN %s AS %s ON ...", quoteIdentIfNeeded(table.Name), joinIdents([]Ident{{Name: table.Name}}), quoteIdentIfNeeded(n+"2"))
		}
		seen[n] = true
	}
	return nil
}

func (p *parser) relationship(kw token) (Statement, *pgerr.Error) {
	st := &RelationshipStmt{Pos: p.at(kw)}
	var err *pgerr.Error
	if st.Name, err = p.name("a relationship name"); err != nil {
		return nil, err
	}
	if _, err = p.expectWord("from", "FROM"); err != nil {
		return nil, err
	}
	if st.FromTable, st.FromColumn, err = p.endpoint("from"); err != nil {
		return nil, err
	}
	if _, err = p.expectWord("to", "TO"); err != nil {
		return nil, err
	}
	if st.ToTable, st.ToColumn, err = p.endpoint("to"); err != nil {
		return nil, err
	}
	return st, nil
}

// endpoint reads exactly table.column.
func (p *parser) endpoint(side string) (Ident, Ident, *pgerr.Error) {
	parts, err := p.dotted("a " + side + " table")
	if err != nil {
		return Ident{}, Ident{}, err
	}
	if len(parts) != 2 {
		e := newErr(UnexpectedToken, parts[0].Pos, "relationship %s endpoint %s must be written table.column", side, joinIdents(parts))
		if len(parts) > 2 {
			e = newErr(TooManyQualifiedNameParts, parts[0].Pos, "too many dotted names in relationship %s endpoint %s: expected table.column", side, joinIdents(parts)).
				WithHint("endpoint tables resolve through search_path; write table.column")
		}
		return Ident{}, Ident{}, e
	}
	return parts[0], parts[1], nil
}

func (p *parser) pauseResume(kw token) (Statement, *pgerr.Error) {
	verb := strings.ToUpper(kw.val)
	if _, err := p.expectWord("transform", "TRANSFORM after "+verb); err != nil {
		return nil, err
	}
	parts, err := p.dotted("a transform name")
	if err != nil {
		return nil, err
	}
	if len(parts) > 2 {
		return nil, newErr(MalformedDefinitionAddress, parts[0].Pos, "%s TRANSFORM %s: the address is a target name, optionally .field", verb, joinIdents(parts)).
			WithDetail("a dotted address never means schema.target")
	}
	addr := TransformAddr{Target: parts[0]}
	if len(parts) == 2 {
		f := parts[1]
		addr.Field = &f
	}
	if kw.val == "pause" {
		return &PauseStmt{Addr: addr, Pos: p.at(kw)}, nil
	}
	return &ResumeStmt{Addr: addr, Pos: p.at(kw)}, nil
}

func (p *parser) drop(kw token) (Statement, *pgerr.Error) {
	t := p.peek()
	switch {
	case isWord(t, "transform"):
		p.advance()
		parts, err := p.dotted("a transform name")
		if err != nil {
			return nil, err
		}
		if len(parts) > 1 {
			return nil, newErr(MalformedDefinitionAddress, parts[0].Pos, "DROP TRANSFORM %s: expected a bare target name", joinIdents(parts)).
				WithHint("to drop a field, use ALTER TRANSFORM %s DROP %s", quoteIdentIfNeeded(parts[0].Name), quoteIdentIfNeeded(parts[len(parts)-1].Name))
		}
		return &DropTransformStmt{Target: parts[0], Pos: p.at(kw)}, nil
	case isWord(t, "relationship"):
		p.advance()
		parts, err := p.dotted("a relationship address")
		if err != nil {
			return nil, err
		}
		switch len(parts) {
		case 1:
			return nil, newErr(UnscopedRelationshipAddress, parts[0].Pos, "DROP RELATIONSHIP %s: a relationship is addressed as from_table.name", joinIdents(parts)).
				WithHint("write DROP RELATIONSHIP <from_table>.%s", quoteIdentIfNeeded(parts[0].Name))
		case 2:
			return &DropRelationshipStmt{FromTable: parts[0], Name: parts[1], Pos: p.at(kw)}, nil
		case 3:
			s := parts[0]
			return &DropRelationshipStmt{Schema: &s, FromTable: parts[1], Name: parts[2], Pos: p.at(kw)}, nil
		}
		return nil, newErr(MalformedDefinitionAddress, parts[0].Pos, "DROP RELATIONSHIP %s: expected [schema.]from_table.name", joinIdents(parts))
	}
	return nil, p.unexpected(t, "TRANSFORM or RELATIONSHIP after DROP")
}

func (p *parser) alter(kw token) (Statement, *pgerr.Error) {
	if _, err := p.expectWord("transform", "TRANSFORM after ALTER"); err != nil {
		return nil, err
	}
	st := &AlterTransformStmt{Pos: p.at(kw)}
	parts, err := p.dotted("a transform name")
	if err != nil {
		return nil, err
	}
	if len(parts) > 1 {
		return nil, newErr(MalformedDefinitionAddress, parts[0].Pos, "ALTER TRANSFORM %s: expected a bare target name", joinIdents(parts))
	}
	st.Target = parts[0]
	for {
		// A clause runs to the next comma at depth 0 (a Postgres expression
		// never holds one there).
		start := p.i
		endTok := p.clauseEnd(start)
		verb := p.peek()
		c := AlterClause{Pos: p.at(verb)}
		switch {
		case isWord(verb, "add"):
			c.Action = AlterAdd
			p.advance()
			if p.i >= endTok {
				return nil, p.unexpected(p.toks[endTok], "a formula after ADD")
			}
			f := p.toks[p.i]
			fields, err := p.selectList(f.start, p.toks[endTok].start, false, false)
			if err != nil {
				return nil, err
			}
			c.Field = Ident{Name: fields[0].Name, Pos: fields[0].NamePos}
			c.Expr, c.ExprPos = fields[0].Expr, fields[0].Pos
		case isWord(verb, "drop"):
			c.Action = AlterDrop
			p.advance()
			n, err := p.name("a field name")
			if err != nil {
				return nil, err
			}
			c.Field = n
		case isWord(verb, "alter"):
			c.Action = AlterAlter
			p.advance()
			n, err := p.name("a field name")
			if err != nil {
				return nil, err
			}
			c.Field = n
			if _, err := p.expectWord("as", "AS after the field name (ALTER field AS formula)"); err != nil {
				return nil, err
			}
			if p.i >= endTok {
				return nil, p.unexpected(p.toks[endTok], "a formula after AS")
			}
			f := p.toks[p.i]
			e, pos, err := p.bareFormula(f.start, p.toks[endTok].start)
			if err != nil {
				return nil, err
			}
			c.Expr, c.ExprPos = e, pos
		default:
			return nil, p.unexpected(verb, "ADD, DROP or ALTER")
		}
		if c.Action == AlterDrop && p.i < endTok {
			return nil, p.unexpected(p.peek(), "\",\" or end of statement")
		}
		p.i = max(p.i, endTok)
		st.Clauses = append(st.Clauses, c)
		if p.peek().kind == tComma {
			p.advance()
			continue
		}
		break
	}
	return st, nil
}

// clauseEnd returns the index of the first token at or after i that is a
// depth-0 comma or the end.
func (p *parser) clauseEnd(i int) int {
	depth := 0
	for ; i < len(p.toks); i++ {
		switch p.toks[i].kind {
		case tLParen, tLBrack:
			depth++
		case tRParen, tRBrack:
			if depth > 0 {
				depth--
			}
		case tComma:
			if depth == 0 {
				return i
			}
		case tEOF:
			return i
		}
	}
	return len(p.toks) - 1
}

// tokensIn returns the token index range [a, b) whose tokens start within
// [start, end).
func (p *parser) tokensIn(start, end int) (int, int) {
	a := 0
	for a < len(p.toks) && p.toks[a].start < start {
		a++
	}
	b := a
	for b < len(p.toks) && p.toks[b].kind != tEOF && p.toks[b].start < end {
		b++
	}
	return a, b
}

func fmtList(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = quoteIdentIfNeeded(x)
	}
	return strings.Join(q, ", ")
}

var _ = fmt.Sprintf
