// Package quarantine isolates what makes a page or build step fail: a
// failing page is retried key by key under savepoints (probeApply), the
// keys that fail are held apart with a growing retry delay, a column whose
// expression keeps failing is paused (the column fuse), and a transform
// whose keys keep failing is paused whole (the transform fuse). Every
// decision is per transform, so one definition's bad data never holds up
// another's keys.
package quarantine
