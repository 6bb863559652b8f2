// Package model is the definition model: a TRANSFORM as the engine keeps
// it (Spec, its fields and GROUP BY keys), what Define resolved against the
// live catalog (Compiled, stored as _definitions.compiled), and the key
// identity every generated statement and every page shares (a key is its
// text rendering: KeySQL in SQL, EncodeKey/DecodeKey in Go).
//
// It imports engine/base and pgerr only; the root engine package re-exports
// the public types (engine.Spec, engine.TableName, ...) as aliases.
package model
