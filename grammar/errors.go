package grammar

import (
	"errors"
	"fmt"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// kwCat is a Postgres keyword category (kwlist.h).
type kwCat uint8

const (
	kwColName  kwCat = iota + 1 // usable as a column or table name
	kwTypeFunc                  // usable as a function or type name only
	kwReserved                  // never a name unless quoted
)

// ErrNotTrellis is wrapped by the error Parse returns for a text whose
// leading words do not make it a Trellis statement (grammar spec §2.1): the
// router would forward such a text to Postgres. Recognize(text) is false
// exactly when errors.Is(err, ErrNotTrellis) for Parse(text).
var ErrNotTrellis = errors.New("not a Trellis statement")

// Error classes (grammar spec §9.1).
const (
	ClassParse      = "parse"
	ClassValidation = "validation"
	ClassConflict   = "conflict"
	ClassNotFound   = "not_found"
)

// Variant names (grammar spec §9.4) raised by this package. Tests assert them.
const (
	UnexpectedChar                       = "UnexpectedChar"
	UnterminatedString                   = "UnterminatedString"
	UnterminatedComment                  = "UnterminatedComment"
	UnexpectedToken                      = "UnexpectedToken"
	UnexpectedEOF                        = "UnexpectedEof"
	ZeroLengthIdentifier                 = "ZeroLengthIdentifier"
	NameTooLong                          = "NameTooLong"
	UnsupportedIdentifierSyntax          = "UnsupportedIdentifierSyntax"
	ParameterNotAllowed                  = "ParameterNotAllowed"
	TooManyQualifiedNameParts            = "TooManyQualifiedNameParts"
	UnsupportedKeySpace                  = "UnsupportedKeySpace"
	UnsupportedPredicate                 = "UnsupportedPredicate"
	UnsupportedConstruct                 = "UnsupportedConstruct"
	SubqueryNotAllowed                   = "SubqueryNotAllowed"
	WindowFunctionNotAllowed             = "WindowFunctionNotAllowed"
	AggregateModifierNotAllowed          = "AggregateModifierNotAllowed"
	FunctionArityMismatch                = "FunctionArityMismatch"
	MalformedDefinitionAddress           = "MalformedDefinitionAddress"
	UnscopedRelationshipAddress          = "UnscopedRelationshipAddress"
	NonImmutableConstruct                = "NonImmutableConstruct"
	TargetEqualsSource                   = "TargetEqualsSource"
	ExpressionTooComplex                 = "ExpressionTooComplex" // ours: nesting bound, 54001
	InvalidEncoding                      = "InvalidEncoding"      // ours: invalid UTF-8, 22021
	DuplicateFieldName                   = "DuplicateFieldName"
	FieldNamedAfterKeyColumn             = "FieldNamedAfterKeyColumn"
	ReservedColumnName                   = "ReservedColumnName"
	CalculatedFieldShadowsSourceColumn   = "CalculatedFieldShadowsSourceColumn"
	GroupingColumnFieldMustBePassthrough = "GroupingColumnFieldMustBePassthrough"
	DuplicateGroupByColumn               = "DuplicateGroupByColumn"
	UnresolvedColumn                     = "UnresolvedColumn"
	QualifiedColumnNotFromTable          = "QualifiedColumnNotFromTable"
	AmbiguousColumnReference             = "AmbiguousColumnReference"
	Cycle                                = "Cycle"
	UnresolvedGroupByColumn              = "UnresolvedGroupByColumn"
	UngroupedColumnReference             = "UngroupedColumnReference"
	AggregateOfAggregateField            = "AggregateOfAggregateField"
	AlterFieldAlreadyExists              = "AlterFieldAlreadyExists"
	AlterFieldNotFound                   = "AlterFieldNotFound"
	UnsupportedAlter                     = "UnsupportedAlter"
	SetReturningFunctionNotAllowed       = "SetReturningFunctionNotAllowed"
	UnsupportedAggregate                 = "UnsupportedAggregate"
	UnsupportedJoinKind                  = "UnsupportedJoinKind"
	UnsupportedJoinCondition             = "UnsupportedJoinCondition"
	TooManyJoins                         = "TooManyJoins"
	DuplicateTableName                   = "DuplicateTableName"
	RelationshipsReplacedByJoin          = "RelationshipsReplacedByJoin"
)

// variantCode maps each variant to its class and SQLSTATE (grammar spec
// §9.4, surface spec §12.2).
var variantCode = map[string][2]string{
	UnexpectedChar:                       {ClassParse, pgerr.SyntaxError},
	UnterminatedString:                   {ClassParse, pgerr.SyntaxError},
	UnterminatedComment:                  {ClassParse, pgerr.SyntaxError},
	UnexpectedToken:                      {ClassParse, pgerr.SyntaxError},
	UnexpectedEOF:                        {ClassParse, pgerr.SyntaxError},
	ZeroLengthIdentifier:                 {ClassParse, pgerr.SyntaxError},
	NameTooLong:                          {ClassParse, pgerr.NameTooLong},
	UnsupportedIdentifierSyntax:          {ClassParse, pgerr.FeatureNotSupported},
	ParameterNotAllowed:                  {ClassParse, pgerr.FeatureNotSupported},
	TooManyQualifiedNameParts:            {ClassParse, pgerr.SyntaxError},
	UnsupportedKeySpace:                  {ClassParse, pgerr.FeatureNotSupported},
	UnsupportedPredicate:                 {ClassParse, pgerr.FeatureNotSupported},
	UnsupportedConstruct:                 {ClassParse, pgerr.FeatureNotSupported},
	SubqueryNotAllowed:                   {ClassParse, pgerr.FeatureNotSupported},
	WindowFunctionNotAllowed:             {ClassParse, pgerr.WindowingError},
	AggregateModifierNotAllowed:          {ClassParse, pgerr.FeatureNotSupported},
	FunctionArityMismatch:                {ClassParse, pgerr.UndefinedFunction},
	MalformedDefinitionAddress:           {ClassParse, pgerr.SyntaxError},
	UnscopedRelationshipAddress:          {ClassParse, pgerr.SyntaxError},
	ExpressionTooComplex:                 {ClassParse, pgerr.StatementTooComplex},
	InvalidEncoding:                      {ClassParse, pgerr.CharacterNotInRepertoire},
	NonImmutableConstruct:                {ClassValidation, pgerr.InvalidObjectDefinition},
	TargetEqualsSource:                   {ClassValidation, pgerr.InvalidParameterValue},
	DuplicateFieldName:                   {ClassValidation, pgerr.DuplicateColumn},
	FieldNamedAfterKeyColumn:             {ClassValidation, pgerr.DuplicateColumn},
	ReservedColumnName:                   {ClassValidation, pgerr.ReservedName},
	CalculatedFieldShadowsSourceColumn:   {ClassValidation, pgerr.AmbiguousColumn},
	GroupingColumnFieldMustBePassthrough: {ClassValidation, pgerr.GroupingError},
	DuplicateGroupByColumn:               {ClassValidation, pgerr.DuplicateColumn},
	UnresolvedColumn:                     {ClassValidation, pgerr.UndefinedColumn},
	QualifiedColumnNotFromTable:          {ClassValidation, pgerr.UndefinedTable},
	AmbiguousColumnReference:             {ClassValidation, pgerr.AmbiguousColumn},
	Cycle:                                {ClassValidation, pgerr.InvalidObjectDefinition},
	UnresolvedGroupByColumn:              {ClassValidation, pgerr.UndefinedColumn},
	UngroupedColumnReference:             {ClassValidation, pgerr.GroupingError},
	AggregateOfAggregateField:            {ClassValidation, pgerr.GroupingError},
	AlterFieldAlreadyExists:              {ClassConflict, pgerr.DuplicateColumn},
	AlterFieldNotFound:                   {ClassNotFound, pgerr.UndefinedColumn},
	UnsupportedAlter:                     {ClassValidation, pgerr.FeatureNotSupported},
	SetReturningFunctionNotAllowed:       {ClassValidation, pgerr.FeatureNotSupported},
	UnsupportedAggregate:                 {ClassValidation, pgerr.FeatureNotSupported},
	UnsupportedJoinKind:                  {ClassParse, pgerr.FeatureNotSupported},
	UnsupportedJoinCondition:             {ClassParse, pgerr.FeatureNotSupported},
	TooManyJoins:                         {ClassParse, pgerr.ProgramLimitExceeded},
	DuplicateTableName:                   {ClassValidation, pgerr.DuplicateAlias},
	RelationshipsReplacedByJoin:          {ClassParse, pgerr.FeatureNotSupported},
}

// newErr builds the error for variant at pos with a Postgres-style message.
func newErr(variant string, pos Pos, format string, args ...any) *pgerr.Error {
	cc, ok := variantCode[variant]
	if !ok {
		panic("grammar: unknown variant " + variant)
	}
	e := pgerr.New(cc[1], fmt.Sprintf(format, args...)).WithClass(cc[0], variant)
	e.Position = int(pos)
	return e
}

// quoteForMsg shows a name the way quote_ident would, for messages.
func quoteForMsg(name string) string { return quoteIdentIfNeeded(name) }
