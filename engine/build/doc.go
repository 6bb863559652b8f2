// Package build runs the build tasks drain workers take from _build_tasks:
// a plan task cuts the source's key space into ranges (from the histogram,
// or by walking the key index), chunk tasks derive each range set-based
// (a fresh build) or through the locked path (a rebuild beside live pages),
// heap builds fill a target in bulk and index it after, and sweeps delete
// target rows whose keys left the source. A build ends with the live flip
// under the definition's row lock (TryLive).
package build
