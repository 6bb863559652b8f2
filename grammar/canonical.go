package grammar

import "strings"

// Canonical renders a statement as the canonical text stored in the catalog
// and printed by dump (grammar spec §12): every statement-level name and
// every field label double-quoted, column references quoted, formulas
// re-rendered from the tree, no WHERE, no trailing ";". Parse(Canonical(s))
// yields a tree equal to s (positions aside), and Canonical of that tree is
// the same text.
func Canonical(st Statement) string {
	var b strings.Builder
	switch s := st.(type) {
	case *TransformStmt:
		b.WriteString("TRANSFORM ")
		b.WriteString(qualified(s.Target))
		b.WriteString(" FROM ")
		b.WriteString(qualified(s.Source))
		writeAlias(&b, s.SourceAlias)
		for _, j := range s.Joins {
			if j.Kind == JoinLeft {
				b.WriteString(" LEFT JOIN ")
			} else {
				b.WriteString(" JOIN ")
			}
			b.WriteString(qualified(j.Table))
			writeAlias(&b, j.Alias)
			b.WriteString(" ON ")
			for i, eq := range j.On {
				if i > 0 {
					b.WriteString(" AND ")
				}
				b.WriteString(quotedParts(eq.Left.Parts) + " = " + quotedParts(eq.Right.Parts))
			}
		}
		if len(s.GroupBy) > 0 {
			b.WriteString(" GROUP BY ")
			for i, k := range s.GroupBy {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(quotedParts(k.Parts))
			}
		}
		b.WriteString(" SELECT ")
		for i, f := range s.Fields {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(RenderExpr(f.Expr))
			b.WriteString(" AS ")
			b.WriteString(quoteIdent(f.Name))
		}
		if s.WithoutSourceIndex {
			b.WriteString(" WITHOUT SOURCE INDEX")
		}
	case *RelationshipStmt:
		b.WriteString("RELATIONSHIP ")
		b.WriteString(quoteIdent(s.Name.Name))
		b.WriteString(" FROM ")
		b.WriteString(quoteIdent(s.FromTable.Name) + "." + quoteIdent(s.FromColumn.Name))
		b.WriteString(" TO ")
		b.WriteString(quoteIdent(s.ToTable.Name) + "." + quoteIdent(s.ToColumn.Name))
	case *PauseStmt:
		b.WriteString("PAUSE TRANSFORM ")
		b.WriteString(addr(s.Addr))
	case *ResumeStmt:
		b.WriteString("RESUME TRANSFORM ")
		b.WriteString(addr(s.Addr))
	case *DropTransformStmt:
		b.WriteString("DROP TRANSFORM ")
		b.WriteString(quoteIdent(s.Target.Name))
	case *DropRelationshipStmt:
		b.WriteString("DROP RELATIONSHIP ")
		if s.Schema != nil {
			b.WriteString(quoteIdent(s.Schema.Name) + ".")
		}
		b.WriteString(quoteIdent(s.FromTable.Name) + "." + quoteIdent(s.Name.Name))
	case *AlterTransformStmt:
		b.WriteString("ALTER TRANSFORM ")
		b.WriteString(quoteIdent(s.Target.Name))
		for i, c := range s.Clauses {
			if i > 0 {
				b.WriteString(",")
			}
			switch c.Action {
			case AlterAdd:
				b.WriteString(" ADD " + RenderExpr(c.Expr) + " AS " + quoteIdent(c.Field.Name))
			case AlterDrop:
				b.WriteString(" DROP " + quoteIdent(c.Field.Name))
			case AlterAlter:
				b.WriteString(" ALTER " + quoteIdent(c.Field.Name) + " AS " + RenderExpr(c.Expr))
			}
		}
	}
	return b.String()
}

// writeAlias renders an item's alias; a statement without one renders as
// it always did, so canonical texts stored before joins stay unchanged.
func writeAlias(b *strings.Builder, alias *Ident) {
	if alias != nil {
		b.WriteString(" AS " + quoteIdent(alias.Name))
	}
}

func qualified(q QualifiedName) string {
	if q.Schema != "" {
		return quoteIdent(q.Schema) + "." + quoteIdent(q.Name)
	}
	return quoteIdent(q.Name)
}

func quotedParts(parts []string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = quoteIdent(p)
	}
	return strings.Join(q, ".")
}

func addr(a TransformAddr) string {
	s := quoteIdent(a.Target.Name)
	if a.Field != nil {
		s += "." + quoteIdent(a.Field.Name)
	}
	return s
}
