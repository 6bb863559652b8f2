package router

import (
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Relation is a relation the proxy answers itself (surface §11.1): its typed
// columns and current rows. A statement reading it in a FROM clause gets the
// rows spliced in as a typed list, and Postgres evaluates the rest (WHERE,
// joins, ORDER BY) as usual.
type Relation struct {
	Columns []Column
	Rows    [][]*string // text values; nil is NULL
}

// Column is one column of a Relation: its name and SQL type.
type Column struct{ Name, Type string }

// ProxyRelations are the relations answered by the proxy (surface §4).
var ProxyRelations = map[string]bool{"config": true, "proxy_workers": true}

// Splice is one replacement made in a statement's text, in bytes of the
// original text and in characters of both, so error positions Postgres
// reports against the rewritten text can be mapped back.
type Splice struct {
	Start, End int    // byte range replaced in the original text
	With       string // replacement
	// character offsets: where the splice starts, and the character
	// lengths of the replaced and the replacing text
	CharStart, CharOld, CharNew int
}

// needsRewrite is the byte-level prefilter of the rewrite (D5): only a
// statement with a dotted name whose schema part is the alias (under a
// non-default catalog) or the catalog followed by a proxy-answered
// relation is parsed. It visits only the dots of the text, with the
// vectorized IndexByte, and the words on either side of each. A comment
// between a schema name and its dot (trellis/**/.status) is not seen; such
// a name reaches Postgres as written.
func needsRewrite(sql string, opts Options) bool {
	aliasing := opts.aliasing()
	if !aliasing && opts.Relations == nil {
		return false
	}
	if aliasing && strings.Contains(sql, psqlAliasPattern) {
		return true
	}
	for i := 0; ; {
		k := strings.IndexByte(sql[i:], '.')
		if k < 0 {
			return false
		}
		dot := i + k
		i = dot + 1
		word, quoted := wordBefore(sql, dot)
		alias := nameIs(word, quoted, "trellis")
		if !alias && !nameIs(word, quoted, opts.CatalogName) {
			continue
		}
		if alias && aliasing {
			return true
		}
		if opts.Relations != nil {
			after, quoted := wordAfter(sql, dot+1)
			for rel := range ProxyRelations {
				if nameIs(after, quoted, rel) {
					return true
				}
			}
		}
	}
}

// nameIs compares a name as written with a stored one: a quoted name
// exactly, a bare one folded to lower case as Postgres folds it.
func nameIs(word string, quoted bool, name string) bool {
	if name == "" || len(word) != len(name) {
		return false
	}
	if quoted {
		return word == name
	}
	for k := 0; k < len(word); k++ {
		c := word[k]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[k] {
			return false
		}
	}
	return true
}

// wordBefore returns the identifier ending just before s[end] (spaces
// allowed between), without its quotes.
func wordBefore(s string, end int) (string, bool) {
	j := end - 1
	for j >= 0 && isSpace(s[j]) {
		j--
	}
	if j >= 0 && s[j] == '"' {
		open := strings.LastIndexByte(s[:j], '"')
		if open < 0 {
			return "", false
		}
		return s[open+1 : j], true
	}
	k := j
	for k >= 0 && isIdentByte(s[k]) {
		k--
	}
	return s[k+1 : j+1], false
}

// wordAfter returns the identifier starting at s[start] (spaces allowed
// before), without its quotes.
func wordAfter(s string, start int) (string, bool) {
	i := start
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i < len(s) && s[i] == '"' {
		close := strings.IndexByte(s[i+1:], '"')
		if close < 0 {
			return "", false
		}
		return s[i+1 : i+1+close], true
	}
	return leadingWordAt(s, i), false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Rewrite returns text with the trellis. alias pointed at the catalog
// schema and proxy-answered relations replaced by their rows, or ok false
// when nothing changes (or the text does not parse: Postgres then reports
// the error against the client's own text).
func Rewrite(text string, opts Options) (string, []Splice, bool) {
	tree, err := pg_query.Parse(text)
	if err != nil {
		return "", nil, false
	}
	r := rewriter{text: text, opts: opts}
	for _, st := range tree.Stmts {
		r.walk(st.ProtoReflect(), false)
	}
	if len(r.splices) == 0 {
		return "", nil, false
	}
	// Locations come in tree order; splice in text order.
	sortSplices(r.splices)
	var b strings.Builder
	at, chars := 0, 0
	out := r.splices[:0]
	for _, s := range r.splices {
		if s.Start < at {
			continue // nested in an earlier replacement
		}
		b.WriteString(text[at:s.Start])
		chars += utf8.RuneCountInString(text[at:s.Start])
		s.CharStart = chars
		s.CharOld = utf8.RuneCountInString(text[s.Start:s.End])
		s.CharNew = utf8.RuneCountInString(s.With)
		chars += s.CharOld
		b.WriteString(s.With)
		at = s.End
		out = append(out, s)
	}
	b.WriteString(text[at:])
	return b.String(), out, true
}

// MapPosition maps a 1-based character position in the rewritten text back
// to the original: a position inside a replacement points at its start.
func MapPosition(pos int, splices []Splice) int {
	shift := 0
	for _, s := range splices {
		start := s.CharStart + shift // in the rewritten text, 0-based
		switch {
		case pos-1 < start:
			return pos - shift
		case pos-1 < start+s.CharNew:
			return s.CharStart + 1
		}
		shift += s.CharNew - s.CharOld
	}
	return pos - shift
}

func sortSplices(s []Splice) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Start < s[j-1].Start; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

type rewriter struct {
	text    string
	opts    Options
	splices []Splice
}

// walk visits every node; inFrom is true below a FROM (or USING) list,
// where a relation may be replaced by rows.
func (r *rewriter) walk(m protoreflect.Message, inFrom bool) {
	switch n := m.Interface().(type) {
	case *pg_query.SelectStmt:
		inFrom = false
	case *pg_query.RangeVar:
		r.rangeVar(n, inFrom)
		return
	case *pg_query.FuncCall:
		r.qualified(n.Funcname, int(n.Location))
	case *pg_query.TypeName:
		r.qualified(n.Names, int(n.Location))
	case *pg_query.ColumnRef:
		if len(n.Fields) >= 3 { // schema.table.column
			r.qualified(n.Fields, int(n.Location))
		}
		return
	case *pg_query.A_Const:
		r.psqlPattern(n)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		from := inFrom || fd.Name() == "from_clause" || fd.Name() == "using_clause"
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				r.walk(l.Get(i).Message(), from)
			}
		case fd.Message() != nil && !fd.IsMap():
			r.walk(v.Message(), from)
		}
		return true
	})
}

// psqlAliasPattern is how psql's describe commands (\d trellis.status,
// \dv trellis.*) name the schema trellis: a regular expression in a string
// literal, matched against pg_namespace.nspname.
const psqlAliasPattern = `'^(trellis)$'`

// psqlPattern points psql's schema pattern for trellis at the catalog, so
// \d trellis.status describes the relation the alias reaches. Only that
// exact literal (what psql sends for the unquoted name trellis), and only
// for a catalog whose name needs neither quoting nor regular-expression
// escapes. A client's own literal spelled the same is rewritten too: it
// can only be a pattern for the alias.
func (r *rewriter) psqlPattern(n *pg_query.A_Const) {
	sv, ok := n.Val.(*pg_query.A_Const_Sval)
	if !ok || !r.opts.aliasing() || sv.Sval.Sval != "^(trellis)$" || !plainName(r.opts.CatalogName) {
		return
	}
	loc := int(n.Location)
	if loc < 0 || !strings.HasPrefix(r.text[loc:], psqlAliasPattern) {
		return
	}
	r.splices = append(r.splices, Splice{Start: loc, End: loc + len(psqlAliasPattern), With: "'^(" + r.opts.CatalogName + ")$'"})
}

// plainName reports whether a name is lower-case letters, digits and
// underscores, starting with a letter or underscore.
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// aliasing reports whether the trellis. alias names a catalog of another
// name, which statements are rewritten to.
func (o Options) aliasing() bool { return o.CatalogName != "" && o.CatalogName != "trellis" }

// isAlias reports whether a parsed schema name is the alias "trellis" or
// the catalog itself.
func (r *rewriter) isCatalog(schema string) bool {
	return schema == "trellis" || (r.opts.CatalogName != "" && schema == r.opts.CatalogName)
}

func (r *rewriter) rangeVar(n *pg_query.RangeVar, inFrom bool) {
	if n.Catalogname != "" || !r.isCatalog(n.Schemaname) {
		return
	}
	loc := int(n.Location)
	if inFrom && ProxyRelations[n.Relname] && r.opts.Relations != nil {
		if rel := r.opts.Relations(n.Relname); rel != nil {
			end, ok := r.nameEnd(loc, 2)
			if !ok {
				return
			}
			with := "(" + valuesSQL(rel) + ")"
			if n.Alias == nil {
				with += " AS " + quoteIdent(n.Relname)
			}
			r.splices = append(r.splices, Splice{Start: loc, End: end, With: with})
			return
		}
	}
	r.alias(n.Schemaname, loc)
}

// qualified rewrites the schema part of a name list starting at loc.
func (r *rewriter) qualified(names []*pg_query.Node, loc int) {
	if len(names) < 2 || loc < 0 {
		return
	}
	if s := names[0].GetString_(); s != nil {
		r.alias(s.Sval, loc)
	}
}

// alias points "trellis" at the catalog schema, when they differ.
func (r *rewriter) alias(schema string, loc int) {
	if schema != "trellis" || r.opts.CatalogName == "" || r.opts.CatalogName == "trellis" || loc < 0 {
		return
	}
	end, ok := r.nameEnd(loc, 1)
	if !ok {
		return
	}
	r.splices = append(r.splices, Splice{Start: loc, End: end, With: quoteIdent(r.opts.CatalogName)})
}

// nameEnd returns the byte offset after the parts-th part of a dotted name
// starting at loc, or false when the text there is not such a name.
func (r *rewriter) nameEnd(loc, parts int) (int, bool) {
	s := r.text
	i := loc
	for p := 0; p < parts; p++ {
		if p > 0 {
			i = skipSpaceAndComments(s, i)
			if i >= len(s) || s[i] != '.' {
				return 0, false
			}
			i = skipSpaceAndComments(s, i+1)
		}
		switch {
		case i < len(s) && s[i] == '"':
			j := i + 1
			for {
				k := strings.IndexByte(s[j:], '"')
				if k < 0 {
					return 0, false
				}
				j += k + 1
				if j < len(s) && s[j] == '"' {
					j++
					continue
				}
				break
			}
			i = j
		default:
			j := i
			for j < len(s) && (isIdentByte(s[j]) || s[j] >= 0x80) {
				j++
			}
			if j == i {
				return 0, false
			}
			i = j
		}
	}
	return i, true
}

// valuesSQL renders a relation's rows as a typed subquery. Values are
// quoted as E'...' literals, which read the same whatever
// standard_conforming_strings says.
func valuesSQL(rel *Relation) string {
	var b strings.Builder
	row := func(vals []*string) {
		b.WriteString("SELECT ")
		for k, c := range rel.Columns {
			if k > 0 {
				b.WriteString(", ")
			}
			var v *string
			if k < len(vals) {
				v = vals[k]
			}
			if v == nil {
				b.WriteString("NULL")
			} else {
				b.WriteString(quoteLiteral(*v))
			}
			b.WriteString("::")
			b.WriteString(c.Type)
			b.WriteString(" AS ")
			b.WriteString(quoteIdent(c.Name))
		}
	}
	if len(rel.Rows) == 0 {
		row(nil)
		b.WriteString(" WHERE false")
		return b.String()
	}
	for k, vals := range rel.Rows {
		if k > 0 {
			b.WriteString(" UNION ALL ")
		}
		row(vals)
	}
	return b.String()
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func quoteLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "E'" + strings.ReplaceAll(s, `'`, `''`) + "'"
}
