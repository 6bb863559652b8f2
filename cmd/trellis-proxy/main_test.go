package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/trellis-proxy/trellis-proxy/internal/proxy"
)

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--bogus"}, 2, "bogus"},
		{[]string{"--log-format", "xml"}, 2, "--log-format"},
		{[]string{"--max-client-conns", "many"}, 2, "max-client-conns"},
		{[]string{"--shutdown-grace", "-1s"}, 2, "--shutdown-grace"},
		{[]string{"--listen", "0.0.0.0:6432"}, 2, "--embedded-password"},
		{[]string{"--tls-cert", "x.pem"}, 2, "--tls-key"},
		{[]string{"frobnicate"}, 2, "unknown subcommand"},
		{[]string{"--upstream", "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=5", "--listen", "127.0.0.1:0"}, 1, "upstream unreachable"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		msg := errb.String()
		if code != c.code || !strings.Contains(msg, c.want) || !strings.HasPrefix(msg, "error: ") || strings.Count(strings.TrimSpace(msg), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q on one line", c.args, code, msg, c.code, c.want)
		}
	}
}

func TestVersionAndHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "trellis-proxy ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "-shutdown-grace") {
		t.Fatalf("help: %d %q", code, out.String())
	}
}

func TestEnvironment(t *testing.T) {
	env := map[string]string{"TRELLIS_LISTEN": "127.0.0.1:7000", "TRELLIS_MAX_CLIENT_CONNS": "7", "TRELLIS_DRAIN_WORKERS": "3", "TRELLIS_UPSTREAM": "postgres://a@b/c"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg := proxy.Default()
	if _, err := parse(&cfg, []string{"--max-client-conns", "9"}, lookup); err != nil {
		t.Fatal(err)
	}
	// A flag wins over its variable, which wins over the default.
	if cfg.Listen != "127.0.0.1:7000" || cfg.MaxClientConns != 9 || cfg.DrainWorkers != 3 || cfg.Upstream != "postgres://a@b/c" {
		t.Fatalf("%+v", cfg)
	}
	cfg = proxy.Default()
	if _, err := parse(&cfg, []string{"-u", "postgres://x@y/z"}, lookup); err != nil || cfg.Upstream != "postgres://x@y/z" {
		t.Fatalf("-u: %v %q", err, cfg.Upstream)
	}
	env["TRELLIS_SHUTDOWN_GRACE"] = "soon"
	cfg = proxy.Default()
	if _, err := parse(&cfg, nil, lookup); err == nil || !strings.Contains(err.Error(), "TRELLIS_SHUTDOWN_GRACE") {
		t.Fatalf("want an error naming TRELLIS_SHUTDOWN_GRACE, got %v", err)
	}
}

// TestTuningFlags: the engine's knobs (D17) are flags with TRELLIS_*
// variables, under their own heading in --help.
func TestTuningFlags(t *testing.T) {
	cfg := proxy.Default()
	env := map[string]string{"TRELLIS_WORKER_TTL": "7s", "TRELLIS_SEAL_INTERVAL": "1s"}
	_, err := parse(&cfg, []string{"--seal-interval", "5ms", "--poll-interval=20ms", "--heartbeat", "2s", "--takeover-interval", "300ms"},
		func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SealInterval != 5*time.Millisecond || cfg.PollInterval != 20*time.Millisecond || cfg.Heartbeat != 2*time.Second ||
		cfg.WorkerTTL != 7*time.Second || cfg.TakeoverInterval != 300*time.Millisecond {
		t.Fatalf("parsed %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.WorkerTTL = -time.Second
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--worker-ttl") {
		t.Fatalf("negative --worker-ttl: %v", err)
	}
	var out, errb strings.Builder
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatal(code)
	}
	help := out.String()
	i := strings.Index(help, "Engine tuning")
	if i < 0 || !strings.Contains(help[i:], "-takeover-interval") || strings.Contains(help[i:], "-listen") {
		t.Fatalf("help:\n%s", help)
	}
}
