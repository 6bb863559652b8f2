package engine

// FormatVersion is the catalog format this build writes and expects. The
// proxy's /readyz compares it with the catalog's (surface §16), so a fleet
// member older than its catalog turns unready instead of misreading it.
func FormatVersion() int { return formatVersion }
