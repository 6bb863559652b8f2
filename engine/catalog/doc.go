// Package catalog holds the instance catalog's schema as SQL: the versioned
// migrations (migrations/NNN.sql, one per format version, run once each) and
// the SECURITY DEFINER functions (functions/*.sql, re-created by every
// Migrate, so they follow the binary without a format bump), embedded in
// the binary, and their rendering for one instance's schema.
//
// A file's leading comment lines (up to the first blank line) document it
// and are not run; the rest is run as it is, after Render replaces the
// placeholders. testdata/catalog.sql in the engine package pins the
// rendered result.
//
// It imports engine/base only.
package catalog
