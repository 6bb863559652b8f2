// Package capture installs and checks the capture triggers on every table
// a definition reads: installs under a short lock_timeout (the commit is the
// table's join fence, H4), uninstalls from tables no definition reads, and
// the staging worker's health checks: schema changes that break a
// definition (paused with a named reason), tampered or disabled capture
// (repaired, readers rebuilt), rewritten tables, and the binding of reads
// to table oids.
package capture
