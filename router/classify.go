// Package router classifies client statements (D5): ordinary SQL, which
// passes through unparsed; Trellis statements, which the proxy executes; and
// calls of the proxy-only functions, which the proxy answers itself. It also
// splits multi-statement strings where Postgres would.
package router

import (
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/trellis-proxy/trellis-proxy/grammar"
	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Kind says who answers a unit.
type Kind int

const (
	// PassThrough units go upstream as written.
	PassThrough Kind = iota
	// Statement units are Trellis statements the proxy executes.
	Statement
	// ProxyCall units call a proxy-only function (surface §11).
	ProxyCall
)

func (k Kind) String() string {
	switch k {
	case Statement:
		return "statement"
	case ProxyCall:
		return "call"
	}
	return "passthrough"
}

// Unit is one statement of a client's query string with its route.
type Unit struct {
	Piece
	Kind Kind
	// Stmt is the parsed Trellis statement (Kind == Statement, Err == nil).
	Stmt grammar.Statement
	// Err is the parse error of a Trellis statement, its position already
	// relative to the whole query string.
	Err *pgerr.Error
	// Call is the proxy-only call (Kind == ProxyCall).
	Call *Call
	// Splices are the rewrites made in Text (a pass-through unit that
	// names trellis. under another catalog, or a proxy-answered
	// relation); Text is then the rewritten statement.
	Splices []Splice
}

// MapPosition maps a 1-based character position Postgres reported for the
// unit's (possibly rewritten) Text to the client's whole query string.
func (u *Unit) MapPosition(pos int) int {
	if pos <= 0 {
		return pos
	}
	return MapPosition(pos, u.Splices) + u.CharOffset
}

// Plan is the classification of one client query string. A nil *Plan means
// "pass the whole string through untouched".
type Plan struct {
	Units []Unit
}

// Rewritten returns the statement to send upstream in place of a Parse's
// text: set when the plan is one pass-through statement the proxy only
// rewrote (the prepared statement then stays Postgres's).
func (p *Plan) Rewritten() (string, bool) {
	if p == nil || len(p.Units) != 1 || p.Units[0].Kind != PassThrough || len(p.Units[0].Splices) == 0 {
		return "", false
	}
	return p.Units[0].Text, true
}

// Local reports whether any unit needs the proxy.
func (p *Plan) Local() bool {
	if p == nil {
		return false
	}
	for _, u := range p.Units {
		if u.Kind != PassThrough || len(u.Splices) > 0 {
			return true
		}
	}
	return false
}

// Options configure classification for one proxy instance.
type Options struct {
	// Schema is the instance's catalog schema (lower case); "trellis" always
	// names it too through the proxy (surface §1.1).
	Schema string
	// CatalogName is the catalog schema exactly as named: what the
	// trellis. alias is rewritten to when it is not "trellis".
	CatalogName string
	// Relations returns the current rows of a proxy-answered relation
	// (ProxyRelations), or nil to leave it to its catalog stub.
	Relations func(name string) *Relation
}

// Classify routes a simple-query string (or the text of one Parse message).
// It returns nil, without parsing anything, for ordinary SQL.
func Classify(sql string, opts Options) *Plan {
	rewrite := needsRewrite(sql, opts)
	if !rewrite && !MayConcernTrellis(sql, opts.Schema) {
		return nil
	}
	pieces := Split(sql)
	plan := &Plan{Units: make([]Unit, 0, len(pieces))}
	local := false
	for _, p := range pieces {
		u := Unit{Piece: p}
		switch {
		case grammar.Recognize(p.Text):
			u.Kind = Statement
			local = true
			stmt, err := grammar.Parse(p.Text)
			if err != nil {
				u.Err = asPgErr(err).ShiftPosition(p.CharOffset)
			} else {
				u.Stmt = stmt
			}
		default:
			if call := parseCall(p.Text, opts.Schema); call != nil {
				u.Kind = ProxyCall
				u.Call = call
				local = true
				if rewrite && call.ArgsSQL != "" {
					if text, _, ok := Rewrite(call.ArgsSQL, opts); ok {
						call.ArgsSQL = text
					}
				}
			} else if rewrite {
				if text, splices, ok := Rewrite(p.Text, opts); ok {
					u.Text, u.Splices = text, splices
					local = true
				}
			}
		}
		plan.Units = append(plan.Units, u)
	}
	if !local {
		return nil
	}
	return plan
}

func asPgErr(err error) *pgerr.Error {
	if e, ok := pgerr.As(err); ok {
		return e
	}
	return pgerr.New(pgerr.SyntaxError, err.Error()).Wrap(err)
}

// Call is a call of a proxy-only function in one of the accepted shapes:
// SELECT trellis.f(args) [AS alias] or SELECT * FROM trellis.f(args).
type Call struct {
	Func string // function name without schema, e.g. "await_converged"
	// Column is the result column's name (the alias, else the function name).
	Column string
	// Star is true for the SELECT * FROM f(...) shape.
	Star bool
	// ArgsSQL is "SELECT arg1, arg2, ..." re-rendered from the syntax tree:
	// the proxy evaluates it on the client's backend (binding the client's
	// parameters) to get the argument values, so $n, casts and calls of real
	// trellis functions work as the surface spec says. Empty with no args.
	ArgsSQL string
	NArgs   int
	// Params maps each parameter $n written as a whole argument to that
	// argument's index; MaxParam is the highest $n anywhere in the call.
	Params   map[int]int
	MaxParam int
}

// ParamOIDs returns the types of $1..$MaxParam for a Describe: the
// signature's type for a parameter that is a whole argument, text otherwise
// (Postgres then casts it as the call needs).
func (c *Call) ParamOIDs(signature []uint32) []uint32 {
	const textOID = 25
	out := make([]uint32, c.MaxParam)
	for k := range out {
		out[k] = textOID
		if arg, ok := c.Params[k+1]; ok && arg < len(signature) {
			out[k] = signature[arg]
		}
	}
	return out
}

// ProxyFunctions are the functions the proxy answers itself (surface §4).
var ProxyFunctions = map[string]bool{
	"await_converged": true, "try_await_converged": true, "await_live": true,
	"await_self_check": true, "apply": true, "define": true,
	"metrics_text": true, "migrate": true,
}

// parseCall recognises an accepted proxy-call shape. Anything else,
// including a proxy-only function used inside a larger query, goes upstream,
// where the function's catalog stub refuses it with 0A000 (surface §11).
func parseCall(text, schema string) *Call {
	if !containsAnyProxyFunc(text) {
		return nil
	}
	tree, err := pg_query.Parse(text)
	if err != nil || len(tree.Stmts) != 1 {
		return nil
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || sel.WhereClause != nil || len(sel.GroupClause) > 0 || sel.HavingClause != nil ||
		len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.ValuesLists) > 0 ||
		sel.WithClause != nil || len(sel.DistinctClause) > 0 || sel.Op != pg_query.SetOperation_SETOP_NONE ||
		len(sel.TargetList) != 1 || sel.IntoClause != nil || len(sel.LockingClause) > 0 {
		return nil
	}
	target := sel.TargetList[0].GetResTarget()
	if target == nil {
		return nil
	}
	var fc *pg_query.FuncCall
	call := &Call{}
	switch len(sel.FromClause) {
	case 0:
		fc = target.Val.GetFuncCall()
		call.Column = target.Name
	case 1:
		// SELECT * FROM trellis.f(args) [AS alias]
		ref := target.Val.GetColumnRef()
		if ref == nil || len(ref.Fields) != 1 || ref.Fields[0].GetAStar() == nil || target.Name != "" {
			return nil
		}
		rf := sel.FromClause[0].GetRangeFunction()
		if rf == nil || rf.Lateral || rf.Ordinality || rf.IsRowsfrom || len(rf.Functions) != 1 {
			return nil
		}
		items := rf.Functions[0].GetList()
		if items == nil || len(items.Items) == 0 {
			return nil
		}
		fc = items.Items[0].GetFuncCall()
		call.Star = true
		if rf.Alias != nil {
			call.Column = rf.Alias.Aliasname
		}
	default:
		return nil
	}
	if fc == nil || len(fc.Funcname) != 2 || fc.AggStar || fc.AggDistinct || fc.Over != nil ||
		fc.AggFilter != nil || len(fc.AggOrder) > 0 || fc.FuncVariadic {
		return nil
	}
	ns, name := fc.Funcname[0].GetString_().GetSval(), fc.Funcname[1].GetString_().GetSval()
	if (ns != "trellis" && ns != schema) || !ProxyFunctions[name] {
		return nil
	}
	call.Func = name
	if call.Column == "" {
		call.Column = name
	}
	call.NArgs = len(fc.Args)
	for k, a := range fc.Args {
		if p := a.GetParamRef(); p != nil {
			if call.Params == nil {
				call.Params = map[int]int{}
			}
			call.Params[int(p.Number)] = k
		}
	}
	call.MaxParam = maxParam(text)
	if len(fc.Args) > 0 {
		args := &pg_query.SelectStmt{}
		for _, a := range fc.Args {
			if a.GetNamedArgExpr() != nil {
				return nil
			}
			args.TargetList = append(args.TargetList, pg_query.MakeResTargetNodeWithVal(a, 0))
		}
		out, err := pg_query.Deparse(&pg_query.ParseResult{Version: tree.Version, Stmts: []*pg_query.RawStmt{{
			Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: args}},
		}}})
		if err != nil {
			return nil
		}
		call.ArgsSQL = out
	}
	return call
}

// maxParam returns the highest $n in a statement that the parser accepted,
// where a '$' followed by digits outside quotes is a parameter.
func maxParam(text string) int {
	highest := 0
	scan, err := pg_query.Scan(text)
	if err != nil {
		return 0
	}
	for _, tok := range scan.Tokens {
		if tok.Token != pg_query.Token_PARAM {
			continue
		}
		n, err := strconv.Atoi(text[tok.Start+1 : tok.End])
		if err == nil && n > highest {
			highest = n
		}
	}
	return highest
}

func containsAnyProxyFunc(text string) bool {
	for _, f := range []string{"await_", "apply", "define", "metrics_text", "migrate"} {
		if containsFold(text, f) {
			return true
		}
	}
	return false
}

// StatementName is a short label for metrics: the statement kind or call.
func (u *Unit) StatementName() string {
	switch {
	case u.Kind == Statement && u.Stmt != nil:
		return string(u.Stmt.Kind())
	case u.Kind == Statement:
		return "invalid"
	case u.Kind == ProxyCall:
		return strings.ToLower(u.Call.Func)
	}
	return "passthrough"
}
