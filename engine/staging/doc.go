// Package staging is the staging worker, one per database (held by a
// random advisory key that rotates when another role holds it): it seals
// batches from the change log at the pace of the writes, installs capture
// through the capture package, verifies catalog rows written by other
// roles by recompiling their statements (D21, verify.go), starts and
// restarts builds, resolves deferred keys, retires drained log rows and
// materialised keys (retire.go), and drops trashed targets (trash.go).
package staging
