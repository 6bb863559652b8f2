package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/internal/pgcluster"
	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

func TestMain(m *testing.M) { pgcluster.RunMain(m) }

// The client subcommands against a running proxy with its engine: apply
// defines, status reports it live, dump prints it, health is green, and a
// refused statement exits 1 with the sqlstate/detail/hint lines.
func TestClientSubcommands(t *testing.T) {
	c := pgcluster.ForTest(t)
	db := c.FreshDB(t, "cli")
	cfg := proxy.Default()
	cfg.Listen, cfg.Upstream = "127.0.0.1:0", c.URL(db)
	ready := make(chan proxy.Info, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- proxy.Run(ctx, cfg, proxy.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Ready: func(i proxy.Info) { ready <- i }})
	}()
	var info proxy.Info
	select {
	case info = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	url := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", info.Addr, db)
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(append(args[:1:1], append([]string{"-d", url}, args[1:]...)...), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, e := cli("apply", "CREATE TABLE o (id int PRIMARY KEY, a int)"); code != 0 {
		t.Fatalf("apply CREATE TABLE: %d %s", code, e)
	}
	code, out, e := cli("apply", "TRANSFORM ov FROM o SELECT a * 2 AS b")
	if code != 0 || !strings.Contains(out, "transform public.ov defined") {
		t.Fatalf("apply TRANSFORM: %d %q %q", code, out, e)
	}
	code, _, e = cli("apply", "TRANSFORM ov FROM o SELECT a AS b")
	if code != 1 || !strings.Contains(e, "sqlstate: 42P07") || !strings.Contains(e, "hint: ") {
		t.Fatalf("apply of an existing target: %d %q", code, e)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, e = cli("status")
		if code == 0 && strings.Contains(out, "target=public.ov status=live") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: %d %q %q", code, out, e)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out, e := cli("dump"); code != 0 || !strings.Contains(strings.ReplaceAll(out, `"`, ""), "TRANSFORM public.ov FROM public.o") {
		t.Fatalf("dump: %d %q %q", code, out, e)
	}
	if code, out, e := cli("check", "ov"); code != 0 || !strings.HasPrefix(out, "ov: converged (self-check ") {
		t.Fatalf("check: %d %q %q", code, out, e)
	}
	if code, out, e := cli("health"); code != 0 || !strings.HasPrefix(out, "healthy") {
		t.Fatalf("health: %d %q %q", code, out, e)
	}
}
