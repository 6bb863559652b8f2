package grammar

// This file is the public syntax tree the engine consumes. Keep it stable:
// add fields, never rename or remove them.
//
// Every node carries Pos, the 1-based character offset of the node in the
// statement text handed to Parse (0 when unknown, e.g. in a tree built by
// hand or merged by ApplyAlter). Positions are relative to that statement;
// the router adds the statement's offset in the whole query string
// (pgerr.Error.ShiftPosition).
//
// Names are stored as Postgres would after folding: unquoted identifiers
// lower-cased, quoted identifiers exact. Canonical rendering quotes every name
// where quote_ident would.

// Pos is a 1-based character position in the statement text; 0 means unknown.
type Pos int

// Kind is the side-effect-free statement kind used by the router and for
// command tags (grammar spec §3).
type Kind string

// Statement kinds.
const (
	KindTransform    Kind = "transform"
	KindRelationship Kind = "relationship"
	KindPause        Kind = "pause"
	KindResume       Kind = "resume"
	KindDrop         Kind = "drop"
	KindAlter        Kind = "alter"
)

// Statement is one parsed Trellis statement. Concrete types: *TransformStmt,
// *RelationshipStmt, *PauseStmt, *ResumeStmt, *DropTransformStmt,
// *DropRelationshipStmt, *AlterTransformStmt.
type Statement interface {
	Kind() Kind
	// CommandTag is the tag of the CommandComplete reply (grammar spec §10.1).
	CommandTag() string
	// Position is the position of the statement's first keyword.
	Position() Pos
	stmtNode()
}

// Ident is one name with its position.
type Ident struct {
	Name string
	Pos  Pos
}

// QualifiedName is a [schema.]name table reference. Schema is empty when the
// reference was written bare.
type QualifiedName struct {
	Schema    string
	Name      string
	Pos       Pos // position of the first part
	SchemaPos Pos // 0 when unqualified
	NamePos   Pos
}

// ColumnName is a GROUP BY key as written: col, head.col or
// schema.table.col. Parts has 1 to 3 elements, the last being the column.
type ColumnName struct {
	Parts []string
	Pos   Pos
}

// Column is the last part (the key's target column name, grammar spec §7.2).
func (c ColumnName) Column() string { return c.Parts[len(c.Parts)-1] }

// Field is one `formula AS label` of a TRANSFORM or of an ALTER ADD clause.
type Field struct {
	Name    string
	NamePos Pos
	Expr    Expr
	Pos     Pos // start of the formula
}

// TransformStmt is TRANSFORM target FROM source [[AS] alias] {join}
// [GROUP BY keys] SELECT fields. A trailing WHERE TRUE is accepted and
// dropped: it means the same as none.
type TransformStmt struct {
	Target  QualifiedName
	Source  QualifiedName
	GroupBy []ColumnName // empty for a 1-1 transform
	Fields  []Field
	Pos     Pos
	// SourceAlias is the FROM item's alias; nil when written without one.
	SourceAlias *Ident
	// Joins are the JOIN items in statement order (joins spec §2); empty
	// for a transform that reads one table.
	Joins []Join
	// WithoutSourceIndex is a trailing WITHOUT SOURCE INDEX: the JOIN
	// target's fan-out indexes are not required (joins spec §5 item 5).
	WithoutSourceIndex bool
}

// IsAggregate reports whether the transform has a GROUP BY key space.
func (t *TransformStmt) IsAggregate() bool { return len(t.GroupBy) > 0 }

// ItemNames lists the name of each item of the FROM clause: the FROM item
// first, then each join's; an item's name is its alias, else its table's
// name (joins spec §2).
func (t *TransformStmt) ItemNames() []string {
	names := []string{itemName(t.Source, t.SourceAlias)}
	for _, j := range t.Joins {
		names = append(names, itemName(j.Table, j.Alias))
	}
	return names
}

func itemName(q QualifiedName, alias *Ident) string {
	if alias != nil {
		return alias.Name
	}
	return q.Name
}

// JoinKind is the kind of one join: INNER or LEFT (joins spec §2).
type JoinKind string

// Join kinds.
const (
	JoinInner JoinKind = "INNER"
	JoinLeft  JoinKind = "LEFT"
)

// Join is one `[INNER | LEFT [OUTER]] JOIN table [[AS] alias] ON cond`.
type Join struct {
	Kind  JoinKind
	Table QualifiedName
	Alias *Ident // nil when written without one
	// On are the equalities of the ON condition, joined by AND.
	On  []JoinEquality
	Pos Pos // position of the first keyword of the join
}

// JoinEquality is one `column_ref = column_ref` of an ON condition, each
// side as written (1 to 3 parts).
type JoinEquality struct {
	Left, Right ColumnName
	Pos         Pos // position of the left side
}

// RelationshipStmt is RELATIONSHIP name FROM from_table.from_col TO to_table.to_col.
type RelationshipStmt struct {
	Name       Ident
	FromTable  Ident
	FromColumn Ident
	ToTable    Ident
	ToColumn   Ident
	Pos        Pos
}

// TransformAddr addresses a transform by bare target name, optionally one of
// its fields (PAUSE/RESUME TRANSFORM t[.c]).
type TransformAddr struct {
	Target Ident
	Field  *Ident // nil for the whole transform
}

// PauseStmt is PAUSE TRANSFORM t[.c].
type PauseStmt struct {
	Addr TransformAddr
	Pos  Pos
}

// ResumeStmt is RESUME TRANSFORM t[.c].
type ResumeStmt struct {
	Addr TransformAddr
	Pos  Pos
}

// DropTransformStmt is DROP TRANSFORM t (bare target name only).
type DropTransformStmt struct {
	Target Ident
	Pos    Pos
}

// DropRelationshipStmt is DROP RELATIONSHIP [schema.]from_table.name.
type DropRelationshipStmt struct {
	Schema    *Ident // nil when not written
	FromTable Ident
	Name      Ident
	Pos       Pos
}

// AlterAction is the verb of one ALTER TRANSFORM clause.
type AlterAction string

// ALTER TRANSFORM clause verbs.
const (
	AlterAdd   AlterAction = "ADD"   // ADD formula AS label
	AlterDrop  AlterAction = "DROP"  // DROP name
	AlterAlter AlterAction = "ALTER" // ALTER name AS formula
)

// AlterClause is one clause of ALTER TRANSFORM. Expr is nil for DROP.
type AlterClause struct {
	Action AlterAction
	Field  Ident
	Expr   Expr
	Pos    Pos // position of the verb
	// ExprPos is the start of the formula (0 for DROP).
	ExprPos Pos
}

// AlterTransformStmt is ALTER TRANSFORM t clause {, clause}.
type AlterTransformStmt struct {
	Target  Ident
	Clauses []AlterClause
	Pos     Pos
}

func (*TransformStmt) Kind() Kind        { return KindTransform }
func (*RelationshipStmt) Kind() Kind     { return KindRelationship }
func (*PauseStmt) Kind() Kind            { return KindPause }
func (*ResumeStmt) Kind() Kind           { return KindResume }
func (*DropTransformStmt) Kind() Kind    { return KindDrop }
func (*DropRelationshipStmt) Kind() Kind { return KindDrop }
func (*AlterTransformStmt) Kind() Kind   { return KindAlter }

func (*TransformStmt) CommandTag() string        { return "TRANSFORM" }
func (*RelationshipStmt) CommandTag() string     { return "RELATIONSHIP" }
func (*PauseStmt) CommandTag() string            { return "PAUSE TRANSFORM" }
func (*ResumeStmt) CommandTag() string           { return "RESUME TRANSFORM" }
func (*DropTransformStmt) CommandTag() string    { return "DROP TRANSFORM" }
func (*DropRelationshipStmt) CommandTag() string { return "DROP RELATIONSHIP" }
func (*AlterTransformStmt) CommandTag() string   { return "ALTER TRANSFORM" }

func (s *TransformStmt) Position() Pos        { return s.Pos }
func (s *RelationshipStmt) Position() Pos     { return s.Pos }
func (s *PauseStmt) Position() Pos            { return s.Pos }
func (s *ResumeStmt) Position() Pos           { return s.Pos }
func (s *DropTransformStmt) Position() Pos    { return s.Pos }
func (s *DropRelationshipStmt) Position() Pos { return s.Pos }
func (s *AlterTransformStmt) Position() Pos   { return s.Pos }

func (*TransformStmt) stmtNode()        {}
func (*RelationshipStmt) stmtNode()     {}
func (*PauseStmt) stmtNode()            {}
func (*ResumeStmt) stmtNode()           {}
func (*DropTransformStmt) stmtNode()    {}
func (*DropRelationshipStmt) stmtNode() {}
func (*AlterTransformStmt) stmtNode()   {}

// ---------------------------------------------------------------------------
// Formula expressions: the built-in subset of Postgres's raw expression tree
// that grammar spec §5.2 accepts. Everything else is refused while the tree
// is converted from pg_query's, so the engine only ever sees these nodes.

// Expr is a formula node.
type Expr interface {
	Position() Pos
	exprNode()
}

// ColumnRef is a column reference: name, head.name or schema.table.name.
// Parts has 1 to 3 elements (4 or more is refused at parse time). What a
// reference means (source column, field, key, relationship path) is decided
// by Resolve.
type ColumnRef struct {
	Parts []string
	Pos   Pos
}

// ConstKind is the lexical kind of a literal.
type ConstKind string

// Literal kinds.
const (
	ConstInteger ConstKind = "integer" // fits int32; Value is its decimal spelling
	ConstNumeric ConstKind = "numeric" // any other number, Value as Postgres kept it ("1.5", "1e3", "-0x1FFFFFFFFF")
	ConstString  ConstKind = "string"  // Value is the decoded string
	ConstBits    ConstKind = "bits"    // B'…' / X'…'; Value as Postgres keeps it ("b101", "xff")
	ConstBool    ConstKind = "bool"    // Value "true" or "false"
	ConstNull    ConstKind = "null"    // Value ""
)

// Const is a literal. A typed literal (DATE '…') is a TypeCast over a Const.
type Const struct {
	Kind  ConstKind
	Value string
	Pos   Pos
}

// TypeName is a type as written in a cast, e.g. pg_catalog.numeric(10,2) or
// text[]. Postgres maps SQL-standard spellings to pg_catalog names
// (integer → pg_catalog.int4), and so does this tree.
type TypeName struct {
	Names       []string
	Typmods     []Expr
	ArrayBounds []int32 // -1 for [] without a bound
	Pos         Pos
}

// CastSyntax records how a cast was written, so rendering reproduces it.
type CastSyntax string

// Cast spellings.
const (
	CastColons  CastSyntax = "::"     // x::type
	CastCall    CastSyntax = "CAST"   // CAST(x AS type)
	CastLiteral CastSyntax = "prefix" // type 'literal' (a typed literal)
)

// TypeCast is a cast or a typed literal.
type TypeCast struct {
	Arg    Expr
	Type   TypeName
	Syntax CastSyntax
	Pos    Pos
}

// OpExpr is an operator application. Op holds the operator's name, qualified
// when written OPERATOR(schema.op). Left is nil for a prefix operator.
type OpExpr struct {
	Op    []string
	Left  Expr
	Right Expr
	Pos   Pos // position of the operator
}

// OpName returns the operator symbol without its schema.
func (o *OpExpr) OpName() string { return o.Op[len(o.Op)-1] }

// QuantifiedOp is `left op ANY (right)` or `left op ALL (right)`.
type QuantifiedOp struct {
	Op    []string
	All   bool
	Left  Expr
	Right Expr
	Pos   Pos
}

// DistinctExpr is `left IS [NOT] DISTINCT FROM right`.
type DistinctExpr struct {
	Not   bool
	Left  Expr
	Right Expr
	Pos   Pos
}

// NullIfExpr is NULLIF(left, right).
type NullIfExpr struct {
	Left  Expr
	Right Expr
	Pos   Pos
}

// InList is `expr [NOT] IN (list)` with a list of values (never a subquery).
type InList struct {
	Not  bool
	Expr Expr
	List []Expr
	Pos  Pos
}

// LikeKind distinguishes LIKE, ILIKE and SIMILAR TO.
type LikeKind string

// Pattern-match spellings.
const (
	Like      LikeKind = "LIKE"
	ILike     LikeKind = "ILIKE"
	SimilarTo LikeKind = "SIMILAR TO"
)

// LikeExpr is `expr [NOT] LIKE|ILIKE|SIMILAR TO pattern [ESCAPE escape]`.
type LikeExpr struct {
	Kind    LikeKind
	Not     bool
	Expr    Expr
	Pattern Expr
	Escape  Expr // nil when not written
	Pos     Pos
}

// BetweenExpr is `expr [NOT] BETWEEN [SYMMETRIC] low AND high`.
type BetweenExpr struct {
	Not       bool
	Symmetric bool
	Expr      Expr
	Low       Expr
	High      Expr
	Pos       Pos
}

// BoolOp is AND, OR or NOT.
type BoolOp string

// Boolean operators.
const (
	And BoolOp = "AND"
	Or  BoolOp = "OR"
	Not BoolOp = "NOT"
)

// BoolExpr is a boolean connective; NOT has one argument.
type BoolExpr struct {
	Op   BoolOp
	Args []Expr
	Pos  Pos
}

// NullTest is `arg IS [NOT] NULL`.
type NullTest struct {
	Not bool
	Arg Expr
	Pos Pos
}

// BoolTestKind is the test of a BoolTest.
type BoolTestKind string

// Boolean tests.
const (
	IsTrue       BoolTestKind = "IS TRUE"
	IsNotTrue    BoolTestKind = "IS NOT TRUE"
	IsFalse      BoolTestKind = "IS FALSE"
	IsNotFalse   BoolTestKind = "IS NOT FALSE"
	IsUnknown    BoolTestKind = "IS UNKNOWN"
	IsNotUnknown BoolTestKind = "IS NOT UNKNOWN"
)

// BoolTest is `arg IS [NOT] TRUE|FALSE|UNKNOWN`.
type BoolTest struct {
	Test BoolTestKind
	Arg  Expr
	Pos  Pos
}

// FuncCall is a function or aggregate call. Star is COUNT(*). SQLSyntax marks
// calls Postgres's grammar produced from special syntax (EXTRACT(f FROM x),
// SUBSTRING(s FROM i), POSITION(a IN b), TRIM(…), x AT TIME ZONE z, …); the
// name is then pg_catalog-qualified and the arguments in call order.
type FuncCall struct {
	Name      []string
	Args      []Expr
	Star      bool
	Variadic  bool // last argument written VARIADIC
	SQLSyntax bool
	Pos       Pos
}

// FuncName returns the function name without its schema.
func (f *FuncCall) FuncName() string { return f.Name[len(f.Name)-1] }

// NamedArg is `name => arg` inside a function call.
type NamedArg struct {
	Name string
	Arg  Expr
	Pos  Pos
}

// CaseWhen is one WHEN cond THEN result.
type CaseWhen struct {
	Cond   Expr
	Result Expr
	Pos    Pos
}

// CaseExpr is CASE [arg] WHEN … THEN … [ELSE …] END.
type CaseExpr struct {
	Arg   Expr // nil for the searched form
	Whens []CaseWhen
	Else  Expr // nil when not written
	Pos   Pos
}

// CoalesceExpr is COALESCE(args…).
type CoalesceExpr struct {
	Args []Expr
	Pos  Pos
}

// MinMaxExpr is GREATEST(args…) or LEAST(args…).
type MinMaxExpr struct {
	Greatest bool
	Args     []Expr
	Pos      Pos
}

// CollateExpr is `arg COLLATE collation`.
type CollateExpr struct {
	Arg       Expr
	Collation []string
	Pos       Pos
}

// ArrayExpr is ARRAY[elems…] (nested brackets are nested ArrayExprs).
type ArrayExpr struct {
	Elems []Expr
	Pos   Pos
}

// RowExpr is ROW(args…) (Explicit) or (a, b, …).
type RowExpr struct {
	Args     []Expr
	Explicit bool
	Pos      Pos
}

// Index is one subscript: [Upper] or, when Slice, [Lower:Upper] with either
// bound optional.
type Index struct {
	Slice bool
	Lower Expr
	Upper Expr
}

// SubscriptExpr is `arg[i]…` (array subscripts only; field selection is
// refused).
type SubscriptExpr struct {
	Arg     Expr
	Indices []Index
	Pos     Pos
}

func (e *ColumnRef) Position() Pos     { return e.Pos }
func (e *Const) Position() Pos         { return e.Pos }
func (e *TypeCast) Position() Pos      { return e.Pos }
func (e *OpExpr) Position() Pos        { return e.Pos }
func (e *QuantifiedOp) Position() Pos  { return e.Pos }
func (e *DistinctExpr) Position() Pos  { return e.Pos }
func (e *NullIfExpr) Position() Pos    { return e.Pos }
func (e *InList) Position() Pos        { return e.Pos }
func (e *LikeExpr) Position() Pos      { return e.Pos }
func (e *BetweenExpr) Position() Pos   { return e.Pos }
func (e *BoolExpr) Position() Pos      { return e.Pos }
func (e *NullTest) Position() Pos      { return e.Pos }
func (e *BoolTest) Position() Pos      { return e.Pos }
func (e *FuncCall) Position() Pos      { return e.Pos }
func (e *NamedArg) Position() Pos      { return e.Pos }
func (e *CaseExpr) Position() Pos      { return e.Pos }
func (e *CoalesceExpr) Position() Pos  { return e.Pos }
func (e *MinMaxExpr) Position() Pos    { return e.Pos }
func (e *CollateExpr) Position() Pos   { return e.Pos }
func (e *ArrayExpr) Position() Pos     { return e.Pos }
func (e *RowExpr) Position() Pos       { return e.Pos }
func (e *SubscriptExpr) Position() Pos { return e.Pos }

func (*ColumnRef) exprNode()     {}
func (*Const) exprNode()         {}
func (*TypeCast) exprNode()      {}
func (*OpExpr) exprNode()        {}
func (*QuantifiedOp) exprNode()  {}
func (*DistinctExpr) exprNode()  {}
func (*NullIfExpr) exprNode()    {}
func (*InList) exprNode()        {}
func (*LikeExpr) exprNode()      {}
func (*BetweenExpr) exprNode()   {}
func (*BoolExpr) exprNode()      {}
func (*NullTest) exprNode()      {}
func (*BoolTest) exprNode()      {}
func (*FuncCall) exprNode()      {}
func (*NamedArg) exprNode()      {}
func (*CaseExpr) exprNode()      {}
func (*CoalesceExpr) exprNode()  {}
func (*MinMaxExpr) exprNode()    {}
func (*CollateExpr) exprNode()   {}
func (*ArrayExpr) exprNode()     {}
func (*RowExpr) exprNode()       {}
func (*SubscriptExpr) exprNode() {}
