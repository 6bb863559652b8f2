package sqlgen

// A build chunk's key range (lo, hi] as predicates over the key columns,
// its bounds encoded keys passed as parameters from $first on.

import (
	"strings"

	"github.com/trellis-proxy/trellis-proxy/engine/base"
	"github.com/trellis-proxy/trellis-proxy/engine/model"
)

// RangeWhere renders " WHERE key > lo AND key <= hi" over the source alias,
// comparing typed key columns as a row; parameters start at $first.
func RangeWhere(c *model.Compiled, lo, hi *string, first int) (string, []any) {
	conds, args := RangeConds(c, base.Ident(model.SourceAlias), lo, hi, first)
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// RangeConds are RangeWhere's conditions over the key columns of alias.
func RangeConds(c *model.Compiled, alias string, lo, hi *string, first int) ([]string, []any) {
	if c.KeyNullable {
		return nil, nil // nullable identities (aggregate targets) build in one chunk
	}
	var conds []string
	var args []any
	cols := Joinf(len(c.Key), func(i int) string { return alias + "." + base.Ident(c.Key[i].Name) }, ", ")
	bound := func(k string, op string) {
		parts, _ := model.DecodeKey(k, len(c.Key), false)
		var ps []string
		for i, p := range parts {
			args = append(args, *p)
			ps = append(ps, "$"+model.Itoa(first+len(args)-1)+"::text::"+c.Key[i].Type)
		}
		conds = append(conds, "ROW("+cols+") "+op+" ROW("+strings.Join(ps, ", ")+")")
	}
	if lo != nil {
		bound(*lo, ">")
	}
	if hi != nil {
		bound(*hi, "<=")
	}
	return conds, args
}
