package engine

import "github.com/trellis-proxy/trellis-proxy/engine/model"

// The definition model lives in engine/model; these aliases keep it the
// engine's public API.
type (
	TableName = model.TableName
	AggKind   = model.AggKind
	Field     = model.Field
	GroupKey  = model.GroupKey
	Spec      = model.Spec

	Compiled = model.Compiled
	keyCol   = model.KeyCol
	argInfo  = model.ArgInfo
)

const (
	SourceAlias = model.SourceAlias

	AggNone      = model.AggNone
	AggSum       = model.AggSum
	AggCountStar = model.AggCountStar
	AggCount     = model.AggCount
	AggAvg       = model.AggAvg
	AggMin       = model.AggMin
	AggMax       = model.AggMax
	AggBoolAnd   = model.AggBoolAnd
	AggBoolOr    = model.AggBoolOr
	AggBitAnd    = model.AggBitAnd
	AggBitOr     = model.AggBitOr
	AggJSONBAgg  = model.AggJSONBAgg
)

// SourceColumn renders a reference to a source column for use in Spec
// expressions: SourceColumn("amount") = `"__s"."amount"`.
func SourceColumn(col string) string { return model.SourceColumn(col) }
