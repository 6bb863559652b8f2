package main

import (
	"context"
	"os/exec"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// captureEnv collects the environment fields every result line carries
// (§1.8): server version and durability settings, where the data lives and on
// what filesystem, the cores and the commit under test.
func captureEnv(ctx context.Context, admin *pgconn.PgConn, dataDir string) map[string]any {
	env := map[string]any{
		"gomaxprocs": runtime.GOMAXPROCS(0),
		"cores":      runtime.NumCPU(),
		// The load generator runs on the same cores as everything it measures.
		"generator_shares_cores": true,
		// B11 (generator-reach) does not exist yet, so there is no box factor.
		"box_factor": nil,
		"commit":     gitCommit(),
		// The proxy is built from the working tree, which may hold
		// uncommitted changes to the packages it is made of.
		"commit_dirty": gitDirty("wire", "cmd/trellis-proxy", "pgerr", "internal", "router", "grammar", "engine"),
	}
	names := []string{"server_version", "fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "wal_level", "max_connections"}
	var sel []string
	for _, n := range names {
		sel = append(sel, "current_setting('"+n+"')")
	}
	if rows, err := admin.Exec(ctx, "SELECT "+strings.Join(sel, ", ")).ReadAll(); err == nil && len(rows) == 1 && len(rows[0].Rows) == 1 {
		for i, n := range names {
			env[n] = string(rows[0].Rows[0][i])
		}
	}
	if dataDir != "" {
		mount, typ := fsType(dataDir)
		env["storage_dir"] = dataDir
		env["storage_mount"] = mount
		env["storage_fs"] = typ
	} else {
		env["storage_dir"], env["storage_fs"] = nil, nil
	}
	return env
}

// gitCommit is the short commit of the working tree the harness runs in,
// which `make bench` builds the proxy from.
func gitCommit() any {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return nil
	}
	return strings.TrimSpace(string(out))
}

// gitDirty reports uncommitted changes under the given paths; nil when git
// cannot tell.
func gitDirty(paths ...string) any {
	out, err := exec.Command("git", append([]string{"status", "--porcelain", "--"}, paths...)...).Output()
	if err != nil {
		return nil
	}
	return len(strings.TrimSpace(string(out))) > 0
}
