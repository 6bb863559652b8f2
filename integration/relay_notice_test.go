package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestNoticeRelayHonoursClientMinMessages: the proxy's NOTICE for a Trellis
// statement is suppressed where Postgres would suppress its own (a session
// with client_min_messages = warning, as ActiveRecord sets), and shown at
// the default level.
func TestNoticeRelayHonoursClientMinMessages(t *testing.T) {
	h := startTrellis(t)
	ctx := context.Background()
	var notices []string
	cfg, _ := pgx.ParseConfig(h.url("postgres", "", h.db, "default_query_exec_mode=simple_protocol"))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Severity+": "+n.Message) }
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	mustExec(t, c, "CREATE TABLE relay_src (id bigint PRIMARY KEY, v int)")
	mustExec(t, c, "SET client_min_messages = warning")
	mustExec(t, c, "TRANSFORM relay_quiet FROM relay_src SELECT v AS w")
	if len(notices) != 0 {
		t.Fatalf("client_min_messages = warning, got notices %q", notices)
	}
	mustExec(t, c, "RESET client_min_messages")
	mustExec(t, c, "TRANSFORM relay_loud FROM relay_src SELECT v AS w")
	if len(notices) != 1 {
		t.Fatalf("default client_min_messages, got notices %q, want the define notice", notices)
	}
}
